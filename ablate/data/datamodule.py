"""The LightningDataModule: corpus -> shared vocabulary -> encoded arrays (cached) -> step batches.

`prepare_corpus` does the one-time work (in the launching process, before any worker starts) and caches
everything under <cache>/data/<key>/, written atomically, keyed by the corpus content and the vocabulary
settings, so sweep members and resumed runs reuse it.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytorch_lightning as pl
import torch

from ablate.config import ConfigError, DataConfig
from ablate.data import sources
from ablate.data.batching import StepSampler, token_batches
from ablate.data.dataset import Batch, Encoded, collate
from ablate.data.subword import EpochSegmenter
from ablate.data.tokenizer import file_lock, load_or_train, vocab_key

SPLITS = ("train", "dev", "test")


@dataclass
class Prepared:
    """Paths of one prepared corpus."""

    root: Path

    @property
    def spm_model(self) -> Path:
        return self.root / "spm.model"

    def encoded(self, split: str) -> Path:
        return self.root / f"{split}.npz"

    def text(self, split: str, side: str) -> Path:
        return self.root / f"{split}.{side}.txt"

    @property
    def meta(self) -> dict:
        return json.loads((self.root / "meta.json").read_text())

    def has(self, split: str) -> bool:
        return self.encoded(split).is_file()


def load_corpus(cfg: DataConfig) -> sources.Corpus:
    if cfg.name == "builtin":
        return sources.builtin_corpus(cfg.builtin_train, cfg.builtin_dev, cfg.builtin_test, cfg.builtin_seed)
    if cfg.name == "multi30k":
        if not cfg.root:
            raise ConfigError(
                "data.root must name a folder of Multi30k raw files "
                "(python -m ablate.prepare data=multi30k downloads them)"
            )
        return sources.multi30k_corpus(cfg.root, cfg.src_lang, cfg.tgt_lang)
    if cfg.name in ("wsj", "wsj_semi"):
        from ablate.parsing.task import parsing_corpus

        return parsing_corpus(cfg)
    if cfg.name == "files":
        paths = {}
        for split in SPLITS:
            s, t = getattr(cfg, f"{split}_src"), getattr(cfg, f"{split}_tgt")
            if s and t:
                paths[split] = (s, t)
        for split in ("dev", "test"):
            if split in paths:
                check_heldout_files(*paths[split])
        return sources.files_corpus(paths, cfg.src_lang, cfg.tgt_lang, cfg.max_len_ratio)
    raise ConfigError(
        f"data.name={cfg.name!r} is not one of builtin, files, multi30k, wmt14_en_de, wsj, wsj_semi"
    )


def check_heldout_files(src: str, tgt: str) -> None:
    """Dev and test sets are scored whole, so a line that training would drop is an error there: an empty
    line or one over sources.MAX_CHARS characters is reported with its file and line number."""
    for path in (src, tgt):
        for lineno, line in enumerate(sources.read_lines(path), start=1):
            if not line.strip():
                raise sources.DataError(
                    f"{path}:{lineno}: empty line in a dev/test file (every line is scored)"
                )
            if len(line) > sources.MAX_CHARS:
                raise sources.DataError(
                    f"{path}:{lineno}: line of {len(line):,} characters in a dev/test file "
                    f"(at most {sources.MAX_CHARS:,})"
                )


def corpus_cache_key(cfg: DataConfig) -> str:
    """A cheap key to find a prepared corpus without reading it: the config's data settings."""
    import hashlib

    # Settings that act at training time only leave the prepared corpus alone.
    runtime = ("cache_dir", "num_workers", "bpe_dropout", "bpe_dropout_sides")
    fields = {k: v for k, v in vars(cfg).items() if k not in runtime}
    for split in SPLITS:  # files: include size and mtime so edited files are not served stale
        for side in ("src", "tgt"):
            p = getattr(cfg, f"{split}_{side}")
            if p and Path(p).is_file():
                st = Path(p).stat()
                fields[f"{split}_{side}_stat"] = (st.st_size, int(st.st_mtime))
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()[:16]


def prepare_corpus(cfg: DataConfig) -> Prepared:
    """Build (once) and return the prepared corpus for this data config."""
    if cfg.name == "wmt14_en_de":  # 4.5M pairs: streamed with bounded memory (ablate/prepare.py)
        from ablate.prepare import prepare

        return Prepared(prepare(cfg))
    cache = Path(cfg.cache_dir)
    root = cache / "data" / corpus_cache_key(cfg)
    with file_lock(cache / "data" / f".{root.name}.lock"):
        if not (root / "meta.json").is_file():
            _build(cfg, root)
    return Prepared(root)


def _build(cfg: DataConfig, root: Path) -> None:
    corpus = load_corpus(cfg)
    train = corpus.splits["train"]
    sp = load_or_train(
        cfg.cache_dir,
        corpus.key,
        train.src + train.tgt,
        cfg.vocab_size,
        cfg.spm_model_type,
        cfg.spm_sentences,
    )
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=root.parent, prefix=".tmp-"))
    meta = {
        "corpus_key": corpus.key,
        "vocab_size": sp.get_piece_size(),
        "src_lang": corpus.src_lang,
        "tgt_lang": corpus.tgt_lang,
        "vocab_key": vocab_key(corpus.key, cfg.vocab_size, cfg.spm_model_type, cfg.spm_sentences),
        "splits": {},
    }
    try:
        shutil.copy(_spm_path(cfg, corpus.key), tmp / "spm.model")
        for name, split in corpus.splits.items():
            enc = Encoded.from_ids(sp.encode(split.src), sp.encode(split.tgt))
            dropped = dict(split.dropped)
            if name == "train":  # over-long pairs leave training; dev/test are scored whole (5.1, 6.1)
                keep = np.flatnonzero((enc.src_lens <= cfg.max_len) & (enc.tgt_lens <= cfg.max_len))
                if len(keep) < len(enc):
                    dropped["over_max_len"] = len(enc) - len(keep)
                    enc = enc.select(keep)
                    split = sources.Split([split.src[i] for i in keep], [split.tgt[i] for i in keep])
            enc.save(tmp / f"{name}.npz")
            for side, lines in (("src", split.src), ("tgt", split.tgt)):
                (tmp / f"{name}.{side}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
            meta["splits"][name] = {
                "pairs": len(enc),
                "dropped": dropped,
                "src_tokens": int(enc.src_lens.sum()),
                "tgt_tokens": int(enc.tgt_lens.sum()),
            }
        if hasattr(corpus, "write_extras"):  # parsing: the gold trees of dev/test (<split>.gold.mrg)
            corpus.write_extras(tmp)
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2))
        if root.exists():
            shutil.rmtree(root)
        os.replace(tmp, root)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _spm_path(cfg: DataConfig, corpus_key: str) -> Path:
    key = vocab_key(corpus_key, cfg.vocab_size, cfg.spm_model_type, cfg.spm_sentences)
    return Path(cfg.cache_dir) / "spm" / key / "spm.model"


class StepStream(torch.utils.data.IterableDataset):
    """Yields (MicroBatch, Batch) for this device, endlessly. `data(epoch)` is the training split as
    segmented for that epoch (EpochSegmenter: the prepared arrays unless data.bpe_dropout > 0)."""

    def __init__(self, data: EpochSegmenter, sampler: StepSampler):
        self.data, self.sampler = data, sampler

    def __iter__(self):
        for mb in self.sampler:
            yield mb, collate(self.data(mb.epoch), mb.indices)


class TranslationData(pl.LightningDataModule):
    def __init__(
        self,
        cfg: DataConfig,
        prepared: Prepared,
        max_tokens: int,
        accumulate: int,
        seed: int,
        eval_max_tokens: int | None = None,
    ):
        super().__init__()
        self.cfg, self.prepared = cfg, prepared
        self.max_tokens, self.accumulate, self.seed = max_tokens, accumulate, seed
        self.eval_max_tokens = eval_max_tokens or max_tokens
        self.resume_position: tuple[int, int] | None = None  # (epoch, step) last completed
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
        batches = token_batches(data.src_lens[:n] + 1, data.tgt_lens[:n] + 1, self.eval_max_tokens, order)
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
