"""BPE-dropout (Provilkov et al. 2020), an option: each epoch the training text is segmented again with every
BPE merge dropped with probability p, so the model sees many segmentations of a word while dev/test (and
decoding) keep the deterministic one. Not in the paper; data.bpe_dropout=0 (the default) trains on the
prepared arrays unchanged.

Deterministic in (seed, epoch): every DDP rank and every resumed run re-encodes an epoch identically.
Sentencepiece samples from a per-thread generator that `set_random_generator_seed` resets for the calling
thread only, so encoding runs on the calling thread (num_threads=1): 0.7 s for Multi30k's 29,000 source
sentences here (p 0.1), so ~1.5 s an epoch for both sides; WMT14's 9M longer sentences are not measured.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import sentencepiece as spm

from ablate.data.dataset import Encoded


class EpochSegmenter:
    """The training split as segmented for one epoch: `base` itself at p = 0, else the training text
    (`texts`: source and target files, one sentence a line, aligned with `base`) encoded with BPE-dropout.
    A sampled segmentation longer than `limit` wordpieces falls back to the sentence's deterministic one,
    so no pair leaves training and none outgrows the batch budget."""

    def __init__(
        self,
        base: Encoded,
        spm_model: Path,
        texts: tuple[Path, Path],
        p: float,
        sides: str = "both",  # both | src (checked with the config: config.validate)
        seed: int = 1,
        limit: int = 256,
        chunk: int = 100_000,
    ):
        self.base, self.p, self.sides, self.seed, self.limit = base, p, sides, seed, limit
        self.spm_model, self.texts, self.chunk = spm_model, texts, chunk
        self._sp: spm.SentencePieceProcessor | None = None
        self._cached: tuple[int, Encoded] | None = None

    def __call__(self, epoch: int) -> Encoded:
        if self.p == 0:
            return self.base
        if self._cached is None or self._cached[0] != epoch:
            self._cached = (epoch, self._encode(epoch))
        return self._cached[1]

    def widths(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """Wordpieces + 1 a sentence (the source's EOS, the target's BOS/EOS): what batching plans with."""
        enc = self(epoch)
        return enc.src_lens + 1, enc.tgt_lens + 1

    def _encode(self, epoch: int) -> Encoded:
        if self._sp is None:
            self._sp = spm.SentencePieceProcessor(model_file=str(self.spm_model))
        # One generator seed per (run seed, epoch); sentencepiece takes an unsigned 32-bit seed.
        spm.set_random_generator_seed(int(np.random.SeedSequence([self.seed, epoch]).generate_state(1)[0]))
        src = self._side(self.texts[0], self.base.src_tokens, self.base.src_offsets)
        if self.sides == "src":
            return Encoded(*src, self.base.tgt_tokens, self.base.tgt_offsets)
        return Encoded(*src, *self._side(self.texts[1], self.base.tgt_tokens, self.base.tgt_offsets))

    def _side(self, path: Path, base_tokens: np.ndarray, base_offsets: np.ndarray):
        """(tokens, offsets) of one side, the text read and encoded `chunk` lines at a time."""
        n = len(base_offsets) - 1
        lens = np.zeros(n, dtype=np.int64)
        parts: list[np.ndarray] = []
        with open(path, encoding="utf-8", newline="\n") as f:
            lines = (line.rstrip("\n") for line in f)
            for start in range(0, n, self.chunk):
                batch = list(itertools.islice(lines, min(self.chunk, n - start)))
                if len(batch) < min(self.chunk, n - start):
                    raise ValueError(f"{path}: {start + len(batch)} lines, the encoded split has {n}")
                ids = self._sp.encode(batch, enable_sampling=True, alpha=self.p, nbest_size=-1, num_threads=1)
                for j, seq in enumerate(ids):
                    if len(seq) > self.limit:  # back to the deterministic segmentation
                        i = start + j
                        ids[j] = base_tokens[base_offsets[i] : base_offsets[i + 1]].tolist()
                chunk_lens = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
                lens[start : start + len(ids)] = chunk_lens
                flat = itertools.chain.from_iterable(ids)
                parts.append(np.fromiter(flat, dtype=np.int32, count=int(chunk_lens.sum())))
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lens, out=offsets[1:])
        return (np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)), offsets
