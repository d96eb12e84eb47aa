"""Tasks: what differs between experiments on the shared model, training and decoding, as fairseq's
`FairseqTask` does. A task declares its metrics (name, direction, how a split's figure accumulates, its
per-sentence statistics), scores its decoded dev outputs, may restrict the search to what it can write,
says its figures in one line, and names the report tables that show it. Translation (`tasks/translation/`)
and parsing (`tasks/parsing/`, section 6.3, Table 4) are peers; a researcher's own task is a class outside
the package, named by `task=package.module:Class` (docs/tasks.md).

Shared code (training, records, jobs, the report's machinery, the commands) reaches a task only through
`task_of(cfg.task)` and what it declares: it never asks which task it runs.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ablate.config import ConfigError, TaskConfig, schema

# The tasks of the package, by the name `task=` takes; any other value is an importable `module:Class`,
# or the name of an entry point in the group `ablate.tasks` of an installed distribution.
BUILTIN = {
    "translation": "ablate.tasks.translation:TranslationTask",
    "parsing": "ablate.tasks.parsing:ParsingTask",
}
ENTRY_POINTS = "ablate.tasks"


@dataclass(frozen=True)
class Metric:
    """A dev figure a task declares: what training logs, the curves hold, the record keeps and the report
    reads, by name."""

    name: str  # logged as dev/<name>
    label: str  # how a table heads it
    higher_is_better: bool
    accumulates: str  # how a split's figure is made from its sentences (a phrase the report can print)
    record_key: str  # its key in a record's metrics
    curve_key: str  # its key in a dev line of curves.jsonl
    sentence_stats: str | None = None  # its per-sentence statistics in dev_sentences.npz (the bootstrap)
    negligible: float = 0.1  # the largest difference to base that counts as none (the planner's delta)
    # ---- the figure as a function of summed statistics (fairseq's reduce_metrics): sums[name] is the sum
    # over the sentences of dev_sentences.npz's array `name`; with a leading axis of bootstrap replicates,
    # one figure per replicate (so written for arrays: s["counts"][..., 0]). None: no bootstrap of it.
    reduce: Callable[[Mapping[str, np.ndarray]], Any] | None = None


def perplexity(sums: Mapping[str, np.ndarray]):
    """exp of the summed NLL over the summed wordpieces."""
    return np.exp(np.asarray(sums["nll"], float) / np.asarray(sums["tokens"], float))


# Perplexity is every task's: the model's per-wordpiece NLL without label smoothing, token-weighted (the
# shared training computes it; a task declares only what it adds).
PPL = Metric(
    "ppl", "PPL", False, "exp of the summed NLL over the summed wordpieces", "dev_ppl", "dev_ppl", "nll",
    negligible=0.05,  # the paper's dev-PPL differences to base this large count as effects (15 rows)
    reduce=perplexity,
)  # fmt: skip


@dataclass
class Scored:
    """A dev scorer's answer: figures by record key, and per-sentence statistics by name (written to
    dev_sentences.npz beside the per-sentence NLL and token counts)."""

    figures: dict[str, Any]
    sentences: dict[str, np.ndarray] = field(default_factory=dict)


class Task:
    """The hooks of a task. A subclass sets the class attributes and overrides what it needs."""

    name = ""  # as records and `task=` name it (a task outside the package: its `module:Class`)
    label = ""  # one line: what the task is
    metrics: tuple[Metric, ...] = ()  # dev figures beyond perplexity; the first is its headline
    own_code: tuple[str, ...] = ()  # folders only its runs import (repository-relative, or absolute)
    tables: dict[str, str] = {}  # report command -> "module:function" (Collection -> (Table, notes))
    # ---- its own config: a dataclass of its keys (subclassing ablate.tasks.TaskConfig), set as
    # `task_cfg.<key>=` and read as `cfg.task_cfg.<key>`; None: it has none
    config: type[TaskConfig] | None = None
    # ---- its paper beside its results (docs/tasks.md): paths, relative to the folder of the task's module
    # or absolute; None: the report shows its own figures alone
    paper_table: str | None = None  # a CSV of the paper's rows: row_id, <metric name>_dev, ... (ablate.paper)
    paper_claims: str | None = None  # the paper's claims over those rows, declared in YAML (report/claims.py)

    def dev_scorer(self, cfg, prepared, dm) -> Callable[[list[str], list[str]], Scored] | None:
        """A function of the decoded dev outputs and their references giving the task's figures (None:
        perplexity alone)."""
        return None

    def stepper(self, cfg, stepper):
        """The search's view of the model (decode.Stepper); a task may restrict what it can write."""
        return stepper

    def split_metrics(
        self, cfg, prepared, dm, split: str, hyps: list[str], refs: list[str]
    ) -> tuple[dict, dict[str, str]]:
        """Figures of a decoded split (`ablate.evaluate`; keys prefixed by the split), and the text of
        files to write beside its hypotheses, by suffix."""
        return {}, {}

    def sources(self) -> dict[str, Any]:
        """Data sources it brings (data.name -> ablate.data.corpora.Source), registered when it loads; a
        task of the data API (`data_name`, `splits`) brings its own splits under `data_name`."""
        return {self.data_name: _api_source(self)} if self.data_name else {}

    # ---- the data API: its corpus as plain Python; the framework caches, fingerprints, tokenizes, batches
    data_name = ""  # the data.name its splits serve ("": it brings none through this API)
    vocabulary: Vocabulary  # its vocabulary (default: the shared sentencepiece of data.vocab_size)

    def splits(self, cfg) -> dict[str, Pairs | Files]:
        """train, dev (and test): each a list of (source, target) strings, or `Files` of one split."""
        return {}

    def data_identity(self, cfg) -> dict:
        """What decides its splits' content beyond `cfg` and the task's own file (a release, a version)."""
        return {}

    def summary(self, metrics: dict[str, Any]) -> list[str]:
        """Lines for the end of a run: its declared figures."""
        return [
            f"dev {m.label:<6} {metrics[m.record_key]:.2f}" for m in self.metrics if m.record_key in metrics
        ]

    def headline(self) -> Metric:
        return self.metrics[0] if self.metrics else PPL

    def paper_file(self, which: str) -> Path | None:
        """The file of `paper_table` or `paper_claims`, resolved against the task's module folder."""
        given = getattr(self, which)
        if not given:
            return None
        return Path(importlib.import_module(type(self).__module__).__file__).parent / given


# ---- the data API's types, and the source it makes of a task (ablate.data prepares it)
Pairs = list[tuple[str, str]]  # one split: (source sentence, target sentence), one pair a line when written


@dataclass(frozen=True)
class Files:
    """One split as two line-aligned text files (.gz allowed): their content names the corpus."""

    src: str
    tgt: str


@dataclass(frozen=True)
class Vocabulary:
    """The pieces a task's text is cut into. `shared()`: the shared sentencepiece model (data.vocab_size,
    data.spm_model_type); `characters()`: one piece per character, its size decided from the training text
    (its distinct characters, the space included, and the 4 special pieces); `subwords(n)`: a sentencepiece
    model of the task's own, n pieces."""

    kind: str = "shared"
    size: int | None = None
    model_type: str = "bpe"

    @classmethod
    def shared(cls) -> Vocabulary:
        return cls()

    @classmethod
    def characters(cls) -> Vocabulary:
        return cls("characters", model_type="char")

    @classmethod
    def subwords(cls, size: int, model_type: str = "bpe") -> Vocabulary:
        return cls("subwords", size, model_type)

    def decide(self, train: list[tuple[str, str]], where: str) -> tuple[str, int] | None:
        """(model type, size) of its own vocabulary for this training text (None: the shared one), or a
        one-line refusal naming `where`."""
        from ablate.config import MIN_VOCAB

        if self.kind == "shared":
            return None
        if self.kind == "characters":
            chars = {c for s, t in train for c in s + t}
            return "char", len(chars | {" "}) + 4
        if self.kind == "subwords" and isinstance(self.size, int) and self.size >= MIN_VOCAB:
            return self.model_type, self.size
        raise ConfigError(f"{where}: {self} is not a vocabulary (shared(), characters(), subwords(n >= 8))")


Task.vocabulary = Vocabulary()


def _api_source(task: Task):
    """The data source of a task's `splits`: its pairs or files as the builder's inputs, named by the task,
    its own keys, its `data_identity`, its vocabulary and the text of its file (an edit prepares it again)."""
    from ablate.data.binarize import Inputs
    from ablate.data.corpora import Source
    from ablate.data.fingerprint import files_fingerprint
    from ablate.data.sources import PairSource, Split, read_split

    def given(run) -> dict:
        splits = task.splits(run)
        for need in ("train", "dev"):
            if need not in splits:
                raise ConfigError(f"task={task.name}: its splits() gives no {need} split (train, dev needed)")
        return splits

    def identity(run) -> dict:
        code = hashlib.sha256(Path(importlib.import_module(type(task).__module__).__file__).read_bytes())
        return {"task": task.name, "code": code.hexdigest()[:16], "identity": task.data_identity(run),
                "vocabulary": repr(task.vocabulary), "files": fingerprint(run)}  # fmt: skip

    def fingerprint(run) -> str | None:
        named = [(f"{name}.{side}", getattr(split, side)) for name, split in given(run).items()
                 if isinstance(split, Files) for side in ("src", "tgt")]  # fmt: skip
        return files_fingerprint(named, run.data.cache_dir) if named else None

    def inputs(run, log) -> Inputs:
        splits = {}
        for name, split in given(run).items():
            if isinstance(split, Files):
                splits[name] = [PairSource(Path(split.src), Path(split.tgt))]
            else:
                splits[name] = Split([s for s, _ in split], [t for _, t in split])
        train = splits["train"]
        read = train if isinstance(train, Split) else read_split(train, False)
        text = list(zip(read.src, read.tgt))
        vocab = task.vocabulary.decide(text, f"task={task.name} vocabulary")
        if vocab is not None:
            log(
                f"vocabulary: the task's own, {vocab[0]}, {vocab[1]:,} pieces (its 4 special pieces included)"
            )
        key = hashlib.sha256(json.dumps(identity(run), sort_keys=True, default=str).encode()).hexdigest()[:16]
        return Inputs(splits, key, vocab=vocab)

    return Source(inputs, fingerprint, identity)


_LOADED: dict[str, Task] = {}


def task_of(name: str) -> Task:
    """The task `task=` names: a built-in name, an entry point of the group `ablate.tasks`, or an
    importable `module:Class`. Its data sources are registered once it loads."""
    if name not in _LOADED:
        task = _load(name)
        task.name = name
        from ablate.data.corpora import register_source

        for data_name, source in task.sources().items():
            register_source(data_name, source)
        _LOADED[name] = task
    return _LOADED[name]


# ---- a task's own config: typed where a config is read (ablate.config.to_dataclass), by the task it names
schema.task_config_class = lambda name: task_of(name).config


def _load(name: str) -> Task:
    where = BUILTIN.get(name) or _entry_point(name) or name
    module, _, attr = where.partition(":")
    if not attr:
        raise ConfigError(f"task={name}: not a task ({', '.join(BUILTIN)}, or an importable module:Class)")
    try:
        cls = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"task={name}: cannot load it ({type(e).__name__}: {e})") from None
    if not (isinstance(cls, type) and issubclass(cls, Task)):
        raise ConfigError(f"task={name}: {where} is not a subclass of ablate.tasks.Task")
    return cls()


def _entry_point(name: str) -> str | None:
    found = [ep for ep in importlib.metadata.entry_points(group=ENTRY_POINTS) if ep.name == name]
    return found[0].value if found else None


def own_code(name: str) -> tuple[str, ...]:
    """The folders only runs of task `name` import: a built-in task's as it declares them; a task outside
    the package, the folder of its module (its records' staleness covers it)."""
    task = task_of(name)
    if name in BUILTIN:
        return task.own_code
    module = importlib.import_module(type(task).__module__)
    return (*task.own_code, str(Path(module.__file__).resolve().parent) + "/")


def table(command: str, task: str | None = None) -> tuple[str, Callable] | None:
    """(task, its table function) of report table `command`: the one `task` declares, or without a task
    the built-in task's that declares it; None where none does."""
    for name in [task] if task is not None else BUILTIN:
        if command in task_of(name).tables:
            module, _, fn = task_of(name).tables[command].partition(":")
            return name, getattr(importlib.import_module(module), fn)
    return None
