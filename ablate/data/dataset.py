"""Encoded sentence pairs held as flat int32 arrays plus offsets (no Python object per sentence), and the
padded tensors a step trains on."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from ablate.data.tokenizer import BOS, EOS, PAD


@dataclass
class Encoded:
    """Sentences i of a side are tokens[offsets[i]:offsets[i+1]] (wordpiece ids, no BOS/EOS)."""

    src_tokens: np.ndarray
    src_offsets: np.ndarray
    tgt_tokens: np.ndarray
    tgt_offsets: np.ndarray

    def __len__(self) -> int:
        return len(self.src_offsets) - 1

    # Computed once: collate looks them up for every batch, and recomputing them over 4.5M offsets cost
    # ~20 ms a batch at WMT size. The arrays are never reassigned.
    @cached_property
    def src_lens(self) -> np.ndarray:
        return np.diff(self.src_offsets)

    @cached_property
    def tgt_lens(self) -> np.ndarray:
        return np.diff(self.tgt_offsets)

    @classmethod
    def from_ids(cls, src: list[list[int]], tgt: list[list[int]]) -> Encoded:
        def flat(seqs):
            offsets = np.zeros(len(seqs) + 1, dtype=np.int64)
            np.cumsum([len(s) for s in seqs], out=offsets[1:])
            tokens = np.fromiter((t for s in seqs for t in s), dtype=np.int32, count=int(offsets[-1]))
            return tokens, offsets

        return cls(*flat(src), *flat(tgt))

    def save(self, path: Path) -> None:
        np.savez(
            path,
            src_tokens=self.src_tokens,
            src_offsets=self.src_offsets,
            tgt_tokens=self.tgt_tokens,
            tgt_offsets=self.tgt_offsets,
        )

    @classmethod
    def load(cls, path: Path, mmap: bool = False) -> Encoded:
        """mmap: memory-mapped (training: ranks on one machine share the page cache, nothing is read up
        front); np.load's mmap_mode ignores .npz files, hence binarize.load_npz_mmap."""
        if mmap:
            from ablate.data.binarize import load_npz_mmap

            z = load_npz_mmap(path)
        else:
            z = np.load(path)
        return cls(z["src_tokens"], z["src_offsets"], z["tgt_tokens"], z["tgt_offsets"])

    def select(self, keep: np.ndarray) -> Encoded:
        src = [self.src_tokens[self.src_offsets[i] : self.src_offsets[i + 1]] for i in keep]
        tgt = [self.tgt_tokens[self.tgt_offsets[i] : self.tgt_offsets[i + 1]] for i in keep]
        return Encoded.from_ids(src, tgt)


@dataclass
class Batch:
    src: Tensor  # (B, S) source ids + EOS, right-padded with PAD
    tgt_in: Tensor  # (B, T) BOS + target ids: the decoder input, "shifted right" (3.1)
    tgt_out: Tensor  # (B, T) target ids + EOS: what the decoder predicts
    src_lengths: Tensor  # (B,) source wordpieces without EOS: "input length" for max output length
    index: Tensor  # (B,) sentence ids in the split

    def to(self, device) -> Batch:
        return Batch(
            *(
                t.to(device, non_blocking=True)
                for t in (self.src, self.tgt_in, self.tgt_out, self.src_lengths, self.index)
            )
        )

    def __len__(self) -> int:
        return self.src.shape[0]


def collate(data: Encoded, idx: np.ndarray) -> Batch:
    idx = np.asarray(idx)
    B = len(idx)
    sl, tl = data.src_lens[idx], data.tgt_lens[idx]
    src = np.full((B, int(sl.max()) + 1), PAD, dtype=np.int64)
    tgt_in = np.full((B, int(tl.max()) + 1), PAD, dtype=np.int64)
    tgt_out = np.full_like(tgt_in, PAD)
    for r, i in enumerate(idx):
        s = data.src_tokens[data.src_offsets[i] : data.src_offsets[i + 1]]
        t = data.tgt_tokens[data.tgt_offsets[i] : data.tgt_offsets[i + 1]]
        src[r, : len(s)] = s
        src[r, len(s)] = EOS
        tgt_in[r, 0] = BOS
        tgt_in[r, 1 : len(t) + 1] = t
        tgt_out[r, : len(t)] = t
        tgt_out[r, len(t)] = EOS
    return Batch(
        torch.from_numpy(src),
        torch.from_numpy(tgt_in),
        torch.from_numpy(tgt_out),
        torch.from_numpy(sl.astype(np.int64)),
        torch.from_numpy(idx.astype(np.int64)),
    )
