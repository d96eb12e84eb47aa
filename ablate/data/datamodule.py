"""The LightningDataModule: a prepared corpus (ablate.data.corpora) -> step batches for training and
token-bounded batches for evaluation."""

from __future__ import annotations

import numpy as np
import pytorch_lightning as pl
import torch

from ablate.config import DataConfig
from ablate.data.batching import StepSampler, token_batches
from ablate.data.corpora import Prepared, corpus_cache_key, load_corpus, prepare_corpus
from ablate.data.dataset import Batch, Encoded, collate
from ablate.data.sources import SPLITS
from ablate.data.subword import EpochSegmenter

__all__ = ["Prepared", "StepStream", "Seq2SeqData", "corpus_cache_key", "load_corpus", "prepare_corpus"]


class StepStream(torch.utils.data.IterableDataset):
    """Yields (MicroBatch, Batch) for this device, endlessly. `data(epoch)` is the training split as
    segmented for that epoch (EpochSegmenter: the prepared arrays unless data.bpe_dropout > 0)."""

    def __init__(self, data: EpochSegmenter, sampler: StepSampler):
        self.data, self.sampler = data, sampler

    def __iter__(self):
        for mb in self.sampler:
            yield mb, collate(self.data(mb.epoch), mb.indices)


class Seq2SeqData(pl.LightningDataModule):
    def __init__(
        self,
        cfg: DataConfig,
        prepared: Prepared,
        max_tokens: int,
        accumulate: int,
        seed: int,
        resume_position: tuple[int, int] | None = None,
    ):
        super().__init__()
        self.cfg, self.prepared = cfg, prepared
        self.max_tokens, self.accumulate, self.seed = max_tokens, accumulate, seed
        # (epoch, step) last completed: training resumes after it; read when the train loader is made
        self.resume_position = resume_position
        self.splits: dict[str, Encoded] = {}

    def setup(self, stage: str | None = None) -> None:
        for split in SPLITS:
            if split not in self.splits and self.prepared.has(split):
                self.splits[split] = Encoded.load(self.prepared.encoded(split), mmap=split == "train")

    def _world(self) -> tuple[int, int]:
        if self.trainer is not None:
            return self.trainer.world_size, self.trainer.global_rank
        return 1, 0

    def segmenter(self) -> EpochSegmenter:
        c = self.cfg
        return EpochSegmenter(
            self.splits["train"],
            self.prepared.spm_model,
            (self.prepared.text("train", "src"), self.prepared.text("train", "tgt")),
            c.bpe_dropout,
            c.bpe_dropout_sides,
            self.seed,
            limit=min(c.max_len, self.max_tokens - 1),  # + EOS/BOS must fit a micro-batch
        )

    def train_dataloader(self):
        data = self.splits["train"]
        segmenter = self.segmenter()
        world, rank = self._world()
        sampler = StepSampler(
            data.src_lens + 1,
            data.tgt_lens + 1,
            self.max_tokens,
            self.accumulate,
            world,
            rank,
            self.seed,
            epoch_lengths=segmenter.widths if self.cfg.bpe_dropout > 0 else None,
        )
        if self.resume_position is not None:
            sampler.resume_after(*self.resume_position)
        return torch.utils.data.DataLoader(
            StepStream(segmenter, sampler), batch_size=None, num_workers=self.cfg.num_workers
        )

    def eval_batches(self, split: str, limit: int | None = None) -> list[Batch]:
        """This device's share of a split, in token-bounded batches sorted by length (no shuffling)."""
        data = self.splits[split]
        n = len(data) if limit is None else min(limit, len(data))
        idx = np.arange(n)
        order = idx[np.lexsort((data.src_lens[:n], data.tgt_lens[:n]))]
        batches = token_batches(data.src_lens[:n] + 1, data.tgt_lens[:n] + 1, self.max_tokens, order)
        world, rank = self._world()
        return [collate(data, b) for b in batches[rank::world]]

    def eval_loader(self, split: str, limit: int | None = None):
        batches = self.eval_batches(split, limit)
        return torch.utils.data.DataLoader(batches, batch_size=None, collate_fn=lambda b: b)

    def val_dataloader(self):
        return self.eval_loader("dev")

    def references(self, split: str) -> list[str]:
        return (
            self.prepared.text(split, "tgt")
            .read_text(encoding="utf-8")
            .split("\n")[: len(self.splits[split])]
        )

    def sources_text(self, split: str) -> list[str]:
        return (
            self.prepared.text(split, "src")
            .read_text(encoding="utf-8")
            .split("\n")[: len(self.splits[split])]
        )
