"""The data sources by name, and the prepared corpus of a data config.

`SOURCES` maps data.name to how its text is read. `prepare_corpus` does the one-time work (in the launching
process, before any worker starts): the source's inputs go through the one builder (ablate.data.binarize)
into <cache>/data/<key>/, keyed by `corpus_cache_key`, so sweep members and resumed runs reuse it. A folder
is trusted only once its meta.json is written (the builder writes it last, then renames the folder in).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from ablate.config import ConfigError, DataConfig
from ablate.data import binarize, sources, wmt14
from ablate.data.sources import SPLITS, PairSource
from ablate.data.tokenizer import file_lock

Log = Callable[[str], None]
FORMAT = 2  # of the prepared folder: part of the cache key, bumped when the builder's output changes
RUNTIME = ("cache_dir", "num_workers", "bpe_dropout", "bpe_dropout_sides")  # leave the prepared corpus alone


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


def is_prepared(folder: Path) -> bool:
    return all((Path(folder) / f).is_file() for f in ("meta.json", "spm.model", "train.npz", "dev.npz"))


@dataclass(frozen=True)
class Source:
    """How one data.name is read. inputs: the text for the builder (reads, and may download). identity:
    cheap, for the cache key: what besides the config decides the content (file sizes and times, the
    release). download: what `python -m ablate.prepare` fetches first, for a source training does not
    download itself; it returns the config that points at the files."""

    inputs: Callable[[DataConfig, Log], binarize.Inputs]
    identity: Callable[[DataConfig], dict] = lambda cfg: {}
    download: Callable[[DataConfig, Log], DataConfig] | None = None


# ----------------------------------------------------------------------------------------------------------
# The sources


def _builtin_inputs(cfg: DataConfig, log: Log) -> binarize.Inputs:
    corpus = sources.builtin_corpus(cfg.builtin_train, cfg.builtin_dev, cfg.builtin_test, cfg.builtin_seed)
    return binarize.Inputs(corpus.splits, corpus.key)


def _builtin_identity(cfg: DataConfig) -> dict:
    from ablate.data import builtin

    return {"code": hashlib.sha256(Path(builtin.__file__).read_bytes()).hexdigest()[:16]}


def _local_pairs(cfg: DataConfig) -> dict[str, PairSource]:
    """data.{split}_src / _tgt: local line-aligned files, given in pairs."""
    pairs = {}
    for split in SPLITS:
        s, t = getattr(cfg, f"{split}_src"), getattr(cfg, f"{split}_tgt")
        if (s or t) and not (s and t):
            raise ConfigError(f"data.{split}_src and data.{split}_tgt must be given together")
        if s and t:
            pairs[split] = PairSource(Path(s), Path(t))
    return pairs


def _stats(pairs: dict[str, PairSource]) -> dict:
    """Size and mtime of each file that exists, so that an edited file is not served stale."""
    out = {}
    for split, pair in sorted(pairs.items()):
        for p in (pair.src, pair.tgt):
            st = p.stat() if p.is_file() else None
            out[f"{split}:{p.resolve()}"] = (st.st_size, st.st_mtime_ns) if st else None
    return out


def _file_inputs(pairs: dict[str, PairSource]) -> binarize.Inputs:
    key = sources.file_digest([p for pair in pairs.values() for p in (pair.src, pair.tgt)])
    return binarize.Inputs({split: [pair] for split, pair in pairs.items()}, key)


def _files_inputs(cfg: DataConfig, log: Log) -> binarize.Inputs:
    pairs = _local_pairs(cfg)
    if "train" not in pairs or "dev" not in pairs:
        raise ConfigError("data=files needs data.train_src/train_tgt and data.dev_src/dev_tgt")
    return _file_inputs(pairs)


def _multi30k_root(cfg: DataConfig) -> str:
    if not cfg.root:
        raise ConfigError(
            "data.root must name a folder of Multi30k raw files "
            "(python -m ablate.prepare data=multi30k downloads them)"
        )
    return cfg.root


def _multi30k_inputs(cfg: DataConfig, log: Log) -> binarize.Inputs:
    return _file_inputs(sources.multi30k_pairs(_multi30k_root(cfg), cfg.src_lang, cfg.tgt_lang))


def _multi30k_identity(cfg: DataConfig) -> dict:
    try:
        return _stats(sources.multi30k_pairs(cfg.root, cfg.src_lang, cfg.tgt_lang)) if cfg.root else {}
    except sources.DataError:  # reported when the corpus is built
        return {}


def _multi30k_download(cfg: DataConfig, log: Log) -> DataConfig:
    """Fetch the raw files into data.root (default <cache>/raw/multi30k) when it is absent or empty."""
    default = Path(cfg.cache_dir) / "raw" / "multi30k"
    root = Path(cfg.root) if cfg.root else default
    langs = (cfg.src_lang, cfg.tgt_lang)
    empty = not root.is_dir() or not any(root.iterdir())
    if empty or (root == default and not wmt14.multi30k_complete(root, langs)):
        wmt14.fetch_multi30k(root, langs, log)
    log(f"train with: data=multi30k data.root={root}")
    return replace(cfg, root=str(root))


def _wmt14_inputs(spec: wmt14.Spec, cfg: DataConfig, log: Log) -> binarize.Inputs:
    """The release's files (downloaded and verified into data.root, default <cache>/raw/<name>), with
    data.{split}_src/_tgt in place of a split's files. Its Common Crawl part holds undecodable lines:
    dropped and counted, in local replacements too."""
    local = _local_pairs(cfg)
    splits = {split: [replace(pair, drop_bad_utf8=True)] for split, pair in local.items()}
    from_spec = {p.split for p in spec.parts} - set(local)
    meta, keys = {}, []
    if from_spec:
        raw = Path(cfg.root) if cfg.root else Path(cfg.cache_dir) / "raw" / spec.name
        fetched = wmt14.fetch(spec, raw, cfg.src_lang, cfg.tgt_lang, log)
        for split in from_spec:
            splits[split] = [PairSource(s, t, n, drop_bad_utf8=True) for s, t, n in fetched.files[split]]
        meta = {"source": spec.name, "raw_dir": str(raw)}
        keys.append(spec.key(cfg.src_lang, cfg.tgt_lang))  # verified content: no need to read it
    if local:
        keys.append(sources.file_digest([p for pair in local.values() for p in (pair.src, pair.tgt)]))
    key = keys[0] if len(keys) == 1 else hashlib.sha256("|".join(keys).encode()).hexdigest()[:16]
    return binarize.Inputs(splits, key, meta)


def _wmt14_identity(spec: wmt14.Spec, cfg: DataConfig) -> dict:
    return {"release": spec.key(cfg.src_lang, cfg.tgt_lang), **_stats(_local_pairs(cfg))}


def wmt14_source(spec: wmt14.Spec) -> Source:
    return Source(partial(_wmt14_inputs, spec), partial(_wmt14_identity, spec))


def _parsing_inputs(cfg: DataConfig, log: Log) -> binarize.Inputs:
    from ablate.parsing.task import parsing_corpus

    corpus = parsing_corpus(cfg)
    return binarize.Inputs(corpus.splits, corpus.key, write_extras=corpus.write_extras)


SOURCES: dict[str, Source] = {
    "builtin": Source(_builtin_inputs, _builtin_identity),
    "files": Source(_files_inputs, lambda cfg: _stats(_local_pairs(cfg))),
    "multi30k": Source(_multi30k_inputs, _multi30k_identity, download=_multi30k_download),
    "wmt14_en_de": wmt14_source(wmt14.WMT14_EN_DE),
    "wsj": Source(_parsing_inputs),  # parsing (6.3): the WSJ treebank as parallel text
    "wsj_semi": Source(_parsing_inputs),  # and with data.silver_trees added to training
}


def source(cfg: DataConfig) -> Source:
    if cfg.name not in SOURCES:
        raise ConfigError(f"data.name={cfg.name!r} is not one of {', '.join(SOURCES)}")
    return SOURCES[cfg.name]


# ----------------------------------------------------------------------------------------------------------
# The prepared corpus


def corpus_cache_key(cfg: DataConfig) -> str:
    """A cheap key to find a prepared corpus without reading it: the data settings, the folder format and
    the source's identity."""
    fields = {k: v for k, v in vars(cfg).items() if k not in RUNTIME}
    fields["format"] = FORMAT
    fields["identity"] = source(cfg).identity(cfg)
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()[:16]


def settings(cfg: DataConfig) -> binarize.Settings:
    return binarize.Settings(
        cache_dir=cfg.cache_dir,
        vocab_size=cfg.vocab_size,
        model_type=cfg.spm_model_type,
        spm_sentences=cfg.spm_sentences,
        max_len=cfg.max_len,
        max_len_ratio=cfg.max_len_ratio,
        src_lang=cfg.src_lang,
        tgt_lang=cfg.tgt_lang,
    )


def prepare_corpus(cfg: DataConfig, log: Log = print) -> Prepared:
    """Build (once) and return the prepared corpus for this data config. A prepared folder given as
    data.root is used as it is."""
    if cfg.root and is_prepared(Path(cfg.root)):
        log(f"{cfg.root}: already prepared, nothing to do")
        return Prepared(Path(cfg.root))
    key = corpus_cache_key(cfg)
    out = Path(cfg.cache_dir) / "data" / key
    with file_lock(out.parent / f".{key}.lock"):
        if is_prepared(out):
            log(f"{out}: already prepared, nothing to do")
            return Prepared(out)
        for stale in out.parent.glob(f".tmp-{key}-*"):  # an interrupted build (we hold the lock)
            shutil.rmtree(stale, ignore_errors=True)
        t0 = time.perf_counter()
        binarize.build(out, source(cfg).inputs(cfg, log), settings(cfg), log)
        log(f"prepared in {time.perf_counter() - t0:,.0f} s: {out}")
    return Prepared(out)


def load_corpus(cfg: DataConfig) -> sources.Corpus:
    """The cleaned text of a config's corpus in memory, as the builder sees it (small corpora: inspection,
    tests); training goes through `prepare_corpus`."""
    inputs = source(cfg).inputs(cfg, lambda msg: None)
    splits = {}
    for name, given in inputs.splits.items():
        read = isinstance(given, list)
        splits[name] = sources.read_split(given, name != "train", cfg.max_len_ratio) if read else given
    return sources.Corpus(splits, inputs.corpus_key, cfg.src_lang, cfg.tgt_lang)
