"""Data: corpora, the shared sentencepiece vocabulary, token-count batching and the LightningDataModule."""
