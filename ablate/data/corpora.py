"""The data sources by name, and the prepared corpus of a data config.

`SOURCES` maps data.name to how its text is read. `prepare_corpus` does the one-time work (in the launching
process, before any worker starts): the source's inputs go through the one builder (ablate.data.binarize)
into <cache>/data/<key>/, keyed by `corpus_cache_key`, so sweep members and resumed runs reuse it. A folder
is trusted only when complete: its meta.json (which the builder writes last, then renames the folder in) and
every file meta.json lists, at the size it was written. An incomplete one is prepared again.

Inputs read from files are named by their content (ablate.data.fingerprint), not by their mtime: an edited
file gives a new prepared corpus, and (results.identity_dict's data.fingerprint) a new run.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, is_dataclass, replace
from functools import partial
from pathlib import Path

from ablate.config import RENAMED, ConfigError, DataConfig, RunConfig
from ablate.data import binarize, degenerate, fingerprint, sources, wmt14
from ablate.data.sources import SPLITS, PairSource
from ablate.data.tokenizer import file_lock
from ablate.errors import doing

Log = Callable[[str], None]
FORMAT = 2  # of the prepared folder: part of the cache key, bumped when the builder's output changes
SIDES = ("src", "tgt")
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


def incomplete(folder: Path) -> str | None:
    """Why a prepared folder cannot be trusted ('spm.model is missing'), or None when it is complete:
    meta.json readable, and every file it lists there at the size it was written (a folder written before
    that list: the spm model and each of its splits' .npz and text files)."""
    folder = Path(folder)
    try:
        meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
        files = meta.get("files")
        if not isinstance(files, dict):
            need = ["spm.model"] + [
                f"{split}{ext}" for split in meta["splits"] for ext in (".npz", ".src.txt", ".tgt.txt")
            ]
            files = dict.fromkeys(need)
    except FileNotFoundError:
        return "meta.json is missing"
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return "meta.json is unreadable"
    for name in dict.fromkeys(["spm.model", *files]):
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        size = files.get(name)
        if size is not None and path.stat().st_size != size:
            return f"{name} is {path.stat().st_size:,} bytes, written as {size:,}"
    return None


def is_prepared(folder: Path) -> bool:
    """A complete prepared folder (`incomplete` finds nothing wrong)."""
    return incomplete(folder) is None


@dataclass(frozen=True)
class Source:
    """How one data.name is read, each a function of the run's config (its `data` and its task's
    `task_cfg`). inputs: the text for the builder (reads, and may download). fingerprint: the content of the
    files it reads that the code does not pin (local files, a treebank), cheap (ablate.data.fingerprint),
    or None when there are none. identity: for the cache key, what besides the config decides the content
    (the fingerprint, the generator's code, the release). download: what `python -m ablate.prepare`
    fetches first, for a source training does not download itself; it returns the data config that points
    at the files."""

    inputs: Callable[[RunConfig, Log], binarize.Inputs]
    fingerprint: Callable[[RunConfig], str | None] = lambda cfg: None
    identity: Callable[[RunConfig], dict] | None = None  # default: {"fingerprint": ...} when there is one
    download: Callable[[RunConfig, Log], DataConfig] | None = None


def run_config(cfg: RunConfig | DataConfig) -> RunConfig:
    """A run's config; a data config alone is a translation run's (its task has no keys of its own)."""
    return cfg if isinstance(cfg, RunConfig) else RunConfig(data=cfg)


# ----------------------------------------------------------------------------------------------------------
# The sources


def _builtin_inputs(run: RunConfig, log: Log) -> binarize.Inputs:
    cfg = run.data
    corpus = sources.builtin_corpus(cfg.builtin_train, cfg.builtin_dev, cfg.builtin_test, cfg.builtin_seed)
    return binarize.Inputs(corpus.splits, corpus.key)


def _builtin_identity(run: RunConfig) -> dict:
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


def _pairs_fingerprint(pairs: dict[str, PairSource]) -> str | None:
    """The content of file pairs by role (train.src, ...): their paths are in the config already."""
    named = [
        (f"{split}.{side}", p)
        for split, pair in pairs.items()
        for side, p in zip(SIDES, (pair.src, pair.tgt))
    ]
    return fingerprint.files_fingerprint(named) if named else None


def _file_inputs(pairs: dict[str, PairSource]) -> binarize.Inputs:
    key = sources.file_digest([p for pair in pairs.values() for p in (pair.src, pair.tgt)])
    return binarize.Inputs({split: [pair] for split, pair in pairs.items()}, key)


def _files_inputs(run: RunConfig, log: Log) -> binarize.Inputs:
    pairs = _local_pairs(run.data)
    if "train" not in pairs or "dev" not in pairs:
        raise ConfigError("data=files needs data.train_src/train_tgt and data.dev_src/dev_tgt")
    return _file_inputs(pairs)


def _multi30k_root(cfg: DataConfig) -> str:
    if not cfg.root:
        raise ConfigError(
            "data.root must name a folder of Multi30k raw files (data=multi30k reads it from MULTI30K_DIR; "
            "python -m ablate.prepare data=multi30k downloads them)"
        )
    return cfg.root


def _multi30k_inputs(run: RunConfig, log: Log) -> binarize.Inputs:
    cfg = run.data
    return _file_inputs(sources.multi30k_pairs(_multi30k_root(cfg), cfg.src_lang, cfg.tgt_lang))


def _multi30k_fingerprint(run: RunConfig) -> str | None:
    cfg = run.data
    try:
        pairs = sources.multi30k_pairs(cfg.root, cfg.src_lang, cfg.tgt_lang) if cfg.root else {}
    except sources.DataError:  # reported when the corpus is built
        return None
    return _pairs_fingerprint(pairs)


def _multi30k_download(run: RunConfig, log: Log) -> DataConfig:
    """Fetch the raw files into data.root (default <cache>/raw/multi30k) when it is absent or empty."""
    cfg = run.data
    default = Path(cfg.cache_dir) / "raw" / "multi30k"
    root = Path(cfg.root) if cfg.root else default
    langs = (cfg.src_lang, cfg.tgt_lang)
    empty = not root.is_dir() or not any(root.iterdir())
    if empty or (root == default and not wmt14.multi30k_complete(root, langs)):
        wmt14.fetch_multi30k(root, langs, log)
    log(f"train with: data=multi30k data.root={root}")
    return replace(cfg, root=str(root))


def _wmt14_inputs(spec: wmt14.Spec, run: RunConfig, log: Log) -> binarize.Inputs:
    """The release's files (downloaded and verified into data.root, default <cache>/raw/<name>), with
    data.{split}_src/_tgt in place of a split's files. Its Common Crawl part holds undecodable lines:
    dropped and counted, in local replacements too."""
    cfg = run.data
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


def _wmt14_identity(spec: wmt14.Spec, run: RunConfig) -> dict:
    cfg = run.data
    local = _pairs_fingerprint(_local_pairs(cfg))  # none: the key of a corpus prepared before stays
    return {"release": spec.key(cfg.src_lang, cfg.tgt_lang), **({"fingerprint": local} if local else {})}


def wmt14_source(spec: wmt14.Spec) -> Source:
    """The release is pinned by its checksums (spec.key): only local replacement files are fingerprinted."""
    return Source(
        partial(_wmt14_inputs, spec),
        lambda run: _pairs_fingerprint(_local_pairs(run.data)),
        partial(_wmt14_identity, spec),
    )


def _parsing_inputs(cfg: RunConfig, log: Log) -> binarize.Inputs:
    from ablate.data.treebank.corpus import parsing_corpus

    corpus = parsing_corpus(cfg)
    return binarize.Inputs(corpus.splits, corpus.key, write_extras=corpus.write_extras)


def _parsing_fingerprint(run: RunConfig) -> str | None:
    """The treebank's .mrg files of sections 02-23 by (section/name, content), and task_cfg.silver_trees.
    The built-in treebank is generated from the config: nothing to fingerprint."""
    from ablate.data.treebank.wsj import SPLITS as SECTIONS

    cfg = run.task_cfg
    named: list[tuple[str, str | Path]] = []
    if cfg.treebank_dir and not cfg.treebank_builtin:
        root = Path(cfg.treebank_dir).expanduser()
        for section in (s for group in SECTIONS.values() for s in group):
            files = sorted((root / section).glob("*.mrg"), key=lambda p: p.name.lower())
            named += [(f"{section}/{p.name}", p) for p in files]
    if cfg.silver_trees:
        named.append(("silver", cfg.silver_trees))
    return fingerprint.files_fingerprint(named) if named else None


SOURCES: dict[str, Source] = {
    "builtin": Source(_builtin_inputs, identity=_builtin_identity),
    "files": Source(_files_inputs, lambda run: _pairs_fingerprint(_local_pairs(run.data))),
    "multi30k": Source(_multi30k_inputs, _multi30k_fingerprint, download=_multi30k_download),
    "wmt14_en_de": wmt14_source(wmt14.WMT14_EN_DE),
    "wsj": Source(_parsing_inputs, _parsing_fingerprint),  # parsing (6.3): the WSJ treebank as parallel text
    "wsj_semi": Source(_parsing_inputs, _parsing_fingerprint),  # and task_cfg.silver_trees added to training
}


def register_source(name: str, src: Source) -> None:
    """A data source a task brings (ablate.tasks.Task.sources), under its data.name; a name is one source."""
    if SOURCES.get(name, src) is not src:
        raise ConfigError(f"data.name={name!r}: a second data source under a name already taken")
    SOURCES[name] = src


def source(cfg: RunConfig | DataConfig) -> Source:
    data = cfg.data if isinstance(cfg, RunConfig) else cfg
    if data.name not in SOURCES:
        raise ConfigError(
            f"data.name={data.name!r} is not one of {', '.join(SOURCES)} (or of the sources of task=)"
        )
    return SOURCES[data.name]


def data_fingerprint(run: RunConfig | DataConfig) -> str | None:
    """The content of the files a data config reads that the code does not pin, or None when it reads none
    (the built-in corpus, the WMT14 release, the built-in treebank). A prepared folder given as data.root is
    named by its meta.json (less the build's timings). Never an error: a config the builder will reject
    gets None (or a marker for an unreadable file) and the builder says why."""
    run = run_config(run)
    try:
        root = Path(run.data.root) if run.data.root else None
        if root is not None and (root / "meta.json").is_file():
            meta = json.loads((root / "meta.json").read_text(encoding="utf-8"))
            meta.pop("seconds", None)
            return hashlib.sha256(json.dumps(meta, sort_keys=True).encode()).hexdigest()[:16]
        return source(run).fingerprint(run)
    except (ValueError, OSError, AttributeError, TypeError):
        return None


# ----------------------------------------------------------------------------------------------------------
# The prepared corpus


def corpus_cache_key(run: RunConfig | DataConfig) -> str:
    """A cheap key to find a prepared corpus without reading it: the data settings (and the task's own
    keys, where it has any), the folder format and the source's identity (for files: their content
    fingerprint, so an edited file is not served stale and a touched one is not prepared again)."""
    run = run_config(run)
    src = source(run)
    fields = {k: v for k, v in vars(run.data).items() if k not in RUNTIME}
    task_keys = asdict(run.task_cfg) if is_dataclass(run.task_cfg) else dict(run.task_cfg or {})
    for old, (new, default) in RENAMED.items():  # a moved key under its old name: prepared corpora stay
        if new.startswith("task_cfg."):
            value = task_keys.pop(new.removeprefix("task_cfg."), default)
            if old.startswith("data."):
                fields[old.removeprefix("data.")] = value
    if task_keys:
        fields["task_cfg"] = task_keys
    fields["format"] = FORMAT
    if src.identity is not None:
        fields["identity"] = src.identity(run)
    else:
        fp = src.fingerprint(run)
        fields["identity"] = {"fingerprint": fp} if fp else {}
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


def prepare_corpus(run: RunConfig | DataConfig, log: Log = print) -> Prepared:
    """Build (once) and return the prepared corpus for this run's data. A prepared folder given as
    data.root is used as it is (and is an error when incomplete: it is the user's, not ours to rebuild).
    A prepared folder of the cache found incomplete is prepared again, saying which file was missing."""
    run = run_config(run)
    cfg = run.data
    if cfg.root and (Path(cfg.root) / "meta.json").is_file():
        problem = incomplete(Path(cfg.root))
        if problem:
            raise sources.DataError(
                f"{cfg.root}: {problem} in this prepared folder (data.root): prepare it again "
                "(python -m ablate.prepare) or name another data.root"
            )
        log(f"{cfg.root}: already prepared, nothing to do")
        return _said(Prepared(Path(cfg.root)), log)
    key = corpus_cache_key(run)
    out = Path(cfg.cache_dir) / "data" / key
    if out.is_dir() and incomplete(out) is None:  # complete folders never change: read without the lock,
        log(f"{out}: already prepared, nothing to do")  # so that a cache shared read-only serves
        return _said(Prepared(out), log)
    try:
        with doing(f"preparing the corpus in {out.parent}"):
            return _said(_build_locked(run, key, out, log), log)
    except OSError as e:
        if not str(e.filename or "").startswith(str(cfg.cache_dir)):
            raise
        raise sources.DataError(
            f"data.cache_dir={cfg.cache_dir} (default: $ABLATE_CACHE, else ~/.cache/ablate): {e.strerror} "
            f"({e.filename}): the corpus is prepared there; name a folder this user can write"
        ) from None


def _build_locked(run: RunConfig, key: str, out: Path, log: Log) -> Prepared:
    with file_lock(out.parent / f".{key}.lock"):
        problem = incomplete(out) if out.exists() else None
        if out.exists() and problem is None:  # another process prepared it while this one waited
            log(f"{out}: already prepared, nothing to do")
            return Prepared(out)
        if problem:
            log(f"{out}: {problem}; preparing it again")
        for pattern in (f".tmp-{key}-*", f".old-{key}-*"):  # left by an interrupted build (we hold the lock)
            for stale in out.parent.glob(pattern):
                shutil.rmtree(stale, ignore_errors=True)
        t0 = time.perf_counter()
        inputs, st = source(run).inputs(run, log), settings(run.data)
        if inputs.vocab is not None:  # the source's own vocabulary, its size decided by the source
            st = replace(st, model_type=inputs.vocab[0], vocab_size=inputs.vocab[1])
        binarize.build(out, inputs, st, log)
        log(f"prepared in {time.perf_counter() - t0:,.0f} s: {out}")
    return Prepared(out)


def _said(prepared: Prepared, log: Log) -> Prepared:
    """The prepared corpus, after what every run using it must hear (degenerate.few_pairs)."""
    warning = degenerate.few_pairs(int(prepared.meta["splits"]["train"]["pairs"]))
    if warning:
        log(warning)
    return prepared


def load_corpus(run: RunConfig | DataConfig) -> sources.Corpus:
    """The cleaned text of a config's corpus in memory, as the builder sees it (small corpora: inspection,
    tests); training goes through `prepare_corpus`."""
    run = run_config(run)
    cfg = run.data
    inputs = source(run).inputs(run, lambda msg: None)
    splits = {}
    for name, given in inputs.splits.items():
        read = isinstance(given, list)
        splits[name] = sources.read_split(given, name != "train", cfg.max_len_ratio) if read else given
    return sources.Corpus(splits, inputs.corpus_key, cfg.src_lang, cfg.tgt_lang)
