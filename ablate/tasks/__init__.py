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

import dataclasses
import functools
import hashlib
import importlib
import importlib.metadata
import json
import modulefinder
import sysconfig
import traceback
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


DIRECTIONS = ("higher", "lower")


class TaskError(ConfigError):
    """A task's declaration or its code refused in one line: what is wrong, and where in the researcher's
    files (a run ends `failed` with it, exit status 2)."""


@dataclass(frozen=True, init=False)
class Metric:
    """A dev figure a task declares: what training logs, the curves hold, the record keeps and the report
    reads, by name. Its direction is `direction="higher"` or `"lower"`, or `higher_is_better` (a bool);
    every field is checked as it is declared (TaskError naming the metric)."""

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

    def __init__(
        self,
        name: str,
        label: str,
        higher_is_better: bool | None = None,
        accumulates: str = "",
        record_key: str = "",
        curve_key: str = "",
        sentence_stats: str | None = None,
        negligible: float = 0.1,
        reduce: Callable[[Mapping[str, np.ndarray]], Any] | None = None,
        *,
        direction: str | None = None,
    ):
        values = dict(name=name, label=label, accumulates=accumulates, record_key=record_key,
                      curve_key=curve_key, sentence_stats=sentence_stats, negligible=negligible,
                      reduce=reduce)  # fmt: skip
        values["higher_is_better"] = _direction(name, higher_is_better, direction)
        for key in ("name", "label", "accumulates", "record_key", "curve_key"):
            if not isinstance(values[key], str) or not values[key]:
                raise TaskError(f"metric {name!r}: {key}={values[key]!r} is not a non-empty string")
        if sentence_stats is not None and not (isinstance(sentence_stats, str) and sentence_stats):
            raise TaskError(f"metric {name!r}: sentence_stats={sentence_stats!r} is not a name or None")
        if reduce is not None and not callable(reduce):
            raise TaskError(f"metric {name!r}: reduce={reduce!r} is not a function of summed statistics")
        if isinstance(negligible, bool) or not isinstance(negligible, int | float) or negligible < 0:
            raise TaskError(f"metric {name!r}: negligible={negligible!r} is not a number at least 0")
        for key, value in values.items():
            object.__setattr__(self, key, value)

    @property
    def direction(self) -> str:
        return "higher" if self.higher_is_better else "lower"


def _direction(name: str, higher_is_better: object, direction: object) -> bool:
    """higher_is_better of a metric declared with either field; anything but a bool or one of DIRECTIONS is
    refused (a string is no bool: "False" would read as higher-is-better)."""
    if direction is not None and direction not in DIRECTIONS:
        raise TaskError(f"metric {name!r}: direction={direction!r} is not 'higher' or 'lower'")
    if higher_is_better is not None and not isinstance(higher_is_better, bool):
        raise TaskError(
            f"metric {name!r}: higher_is_better={higher_is_better!r} is not True or False "
            "(or declare direction='higher' or 'lower')"
        )
    if higher_is_better is None and direction is None:
        raise TaskError(f"metric {name!r}: no direction (declare direction='higher' or 'lower')")
    if higher_is_better is not None and direction is not None and higher_is_better != (direction == "higher"):
        raise TaskError(f"metric {name!r}: direction={direction!r} and higher_is_better={higher_is_better}")
    return higher_is_better if higher_is_better is not None else direction == "higher"


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

    def paper_figures(self) -> dict[str, dict[str, float | None]]:
        """Its paper's dev figures by row, from its `paper_table` (a row's run carries them beside its own:
        `paper_dev_ppl`, ...), in the paper's order; {} where it has none."""
        from ablate.paper import paper_table

        path = self.paper_file("paper_table")
        if path is None:
            return {}
        return {row: {f"paper_dev_{m}": v for m, v in figures.items()}
                for row, figures in paper_table(path).figures.items()}  # fmt: skip

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

    made: dict[str, dict] = {}  # its splits by what names its corpus: made once a process, not per caller

    def given(run) -> dict:
        own = dataclasses.asdict(run.task_cfg) if dataclasses.is_dataclass(run.task_cfg) else run.task_cfg
        key = json.dumps([dataclasses.asdict(run.data), own], sort_keys=True, default=str)
        if key not in made:
            splits = task.splits(run)
            if lacking := [need for need in ("train", "dev") if need not in splits]:
                needed = f"its splits() gives no {lacking[0]} split (train, dev needed)"
                raise ConfigError(f"task={task.name}: {needed}")
            made[key] = splits
        return made[key]

    def identity(run) -> dict:
        code = hashlib.sha256(Path(importlib.import_module(type(task).__module__).__file__).read_bytes())
        helpers = {"helpers": h} if (h := _helpers(task)) else {}  # none: a corpus prepared before stays
        return {"task": task.name, "code": code.hexdigest()[:16], "identity": task.data_identity(run),
                "vocabulary": repr(task.vocabulary), "files": fingerprint(run), **helpers}  # fmt: skip

    def fingerprint(run) -> str | None:
        named = [(f"{name}.{side}", getattr(split, side)) for name, split in given(run).items()
                 if isinstance(split, Files) for side in ("src", "tgt")]  # fmt: skip
        return files_fingerprint(named) if named else None

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


def _helpers(task: Task) -> dict[str, str]:
    """The modules a task's module imports from its own folder and the study's (and what those import, in
    any function too, as Python's modulefinder reads the code without running it), each by its path there
    and the sha256 of its bytes: an edit to one prepares the corpus again, as it stales the task's records.
    The task's module itself is not among them (its own key)."""
    from ablate.config.study import current_study

    name = type(task).__module__
    file = Path(importlib.import_module(name).__file__).resolve()
    top = file.parents[len(name.split(".")) - (file.name != "__init__.py")]  # where Python imports it from
    inside = [Path(p).resolve() for p in _own_code(task) if Path(p).is_absolute()]
    try:
        study = current_study().root
    except ConfigError:
        study = None
    inside += [study.resolve()] if study is not None else []
    finder = _LocalFinder(str(top), inside)
    try:
        finder.import_hook(name)
    except (ImportError, SyntaxError, OSError):  # the module loaded: what the finder cannot read stays out
        pass
    found = sorted({Path(m.__file__).resolve() for m in finder.modules.values() if m.__file__} - {file})
    return {f.relative_to(top).as_posix(): hashlib.sha256(f.read_bytes()).hexdigest()[:16] for f in found}


class _LocalFinder(modulefinder.ModuleFinder):
    """Python's modulefinder over one folder, following only the modules that lie in `inside`."""

    def __init__(self, top: str, inside: list[Path]):
        super().__init__(path=[top])
        self.inside = inside

    def find_module(self, name, path, parent=None):
        found = super().find_module(name, path, parent)
        where = found[1]
        if where and not any(Path(where).resolve().is_relative_to(d) for d in self.inside):
            if found[0]:
                found[0].close()
            raise ImportError(name)
        return found


_LOADED: dict[str, Task] = {}
# The hooks that run a researcher's code: an exception in one is a TaskError naming the hook and the line
# of the researcher's file it came from (the dev scorer's function too: dev_scorer below).
GUARDED = ("dev_scorer", "stepper", "split_metrics", "sources", "summary", "paper_figures")


def task_of(name: str) -> Task:
    """The task `task=` names: a built-in name, an entry point of the group `ablate.tasks`, or an
    importable `module:Class`; its declarations checked, and for a task outside the package its hooks
    guarded (GUARDED). Its data sources are registered once it loads."""
    if name not in _LOADED:
        task = _load(name)
        task.name = name
        _check(task)
        if name not in BUILTIN:
            _guard(task)
        from ablate.data.corpora import register_source

        for data_name, source in task.sources().items():
            if name not in BUILTIN:
                source = _guarded_source(task, data_name, source)
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
        raise ConfigError(f"task={name}: cannot load it ({type(e).__name__}: {e}{_at(e, ', at ')})") from None
    except Exception as e:  # noqa: BLE001 - the researcher's module: any error it raises, in one line
        raise TaskError(f"task={name}: cannot load it ({_said(e)}{_at(e, ', at ')})") from None
    if not (isinstance(cls, type) and issubclass(cls, Task)):
        raise ConfigError(f"task={name}: {where} is not a subclass of ablate.tasks.Task")
    try:
        return cls()
    except Exception as e:  # noqa: BLE001
        raise TaskError(f"task={name}: {attr}() raised {_said(e)}{_at(e, ' at ')}") from None


def _check(task: Task) -> None:
    """What a task declares, checked as it loads: its metrics are Metric declarations with distinct
    names and record keys, its folders and tables strings."""
    metrics = task.metrics
    if not isinstance(metrics, tuple | list) or not all(isinstance(m, Metric) for m in metrics):
        raise TaskError(f"task={task.name}: metrics={metrics!r} is not a tuple of ablate.tasks.Metric")
    for key in ("name", "record_key", "curve_key"):
        seen = [getattr(m, key) for m in (PPL, *metrics)]
        if twice := sorted({k for k in seen if seen.count(k) > 1}):
            raise TaskError(f"task={task.name}: two metrics with {key} {twice[0]!r} (perplexity's included)")
    if not isinstance(task.own_code, tuple | list) or not all(isinstance(p, str) for p in task.own_code):
        raise TaskError(f"task={task.name}: own_code={task.own_code!r} is not a tuple of folder paths")
    if not isinstance(task.tables, dict):
        raise TaskError(
            f"task={task.name}: tables={task.tables!r} is not a dict of command -> module:function"
        )


def _guard(task: Task) -> None:
    """Each hook of GUARDED on this instance: an exception it raises becomes a TaskError in one line with
    its type, message and the researcher's file and line. An error of the package's own (a ConfigError, a
    DataError: one line already) passes as it is."""
    for hook in GUARDED:
        setattr(task, hook, _guarded(task, hook, getattr(task, hook)))


def _guarded(task: Task, what: str, fn: Callable) -> Callable:
    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            if type(e).__module__.split(".")[0] == __name__.split(".")[0]:
                raise  # the package's own error, said in one line already
            raise TaskError(f"task {task.name}: {what} raised {_said(e)}{_at(e, ' at ', task)}") from e

    return call


def _guarded_source(task: Task, data_name: str, source: Any) -> Any:
    """A data source of a task outside the package with each of its functions guarded (_guarded)."""
    if not dataclasses.is_dataclass(source):
        return source
    wrapped = {
        f.name: _guarded(task, f"its data source {data_name!r} ({f.name})", v)
        for f in dataclasses.fields(source)
        if callable(v := getattr(source, f.name))
    }
    return dataclasses.replace(source, **wrapped)


def dev_scorer(task: Task, cfg, prepared, dm) -> Callable[[list[str], list[str]], Scored] | None:
    """The task's dev scorer (Task.dev_scorer), checked: a task that declares metrics and has no scorer
    is refused as it is built; at every dev pass the scorer must give a Scored with each declared
    metric's record key and per-sentence statistics, else the pass is refused in one line naming the
    metric (a run would otherwise train to its end with no figure of it)."""
    score = task.dev_scorer(cfg, prepared, dm)
    if score is None:
        if task.metrics:
            names = ", ".join(f"{m.name!r}" for m in task.metrics)
            raise TaskError(f"task {task.name}: declares metric(s) {names} but no dev_scorer to report them")
        return None

    def checked(hyps: list[str], refs: list[str]) -> Scored:
        scored = score(hyps, refs)
        if not isinstance(scored, Scored):
            raise TaskError(
                f"task {task.name}: its dev scorer returned {type(scored).__name__}, not ablate.tasks.Scored"
            )
        for m in task.metrics:
            if m.record_key not in scored.figures:
                got = ", ".join(sorted(map(str, scored.figures))) or "none"
                raise TaskError(
                    f"task {task.name}: metric {m.name!r}: its dev scorer reported no {m.record_key!r} "
                    f"(its figures: {got})"
                )
            if m.sentence_stats is not None and m.sentence_stats not in scored.sentences:
                got = ", ".join(sorted(map(str, scored.sentences))) or "none"
                raise TaskError(
                    f"task {task.name}: metric {m.name!r}: its dev scorer gave no per-sentence statistics "
                    f"{m.sentence_stats!r} (it gave: {got})"
                )
        return scored

    if task.name in BUILTIN:
        return checked
    return _guarded(task, "its dev scorer", checked)


def _said(e: BaseException) -> str:
    """'<type>: <first line>' (the type alone where the message is empty)."""
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0]}" if lines else type(e).__name__


def _at(e: BaseException, prefix: str, task: Task | None = None) -> str:
    """Where `e` was raised in the researcher's code: the innermost frame of its traceback in the task's
    own folders (where known), else outside the package and Python's own libraries; '' where none is."""
    if isinstance(e, SyntaxError) and e.filename:
        return f"{prefix}{e.filename}:{e.lineno}"
    frames = [(f.filename, f.lineno) for f in traceback.extract_tb(e.__traceback__)]
    theirs = [Path(p).resolve() for p in (_own_code(task) if task else ()) if Path(p).is_absolute()]
    ours = [Path(__file__).resolve().parents[1], *(Path(p).resolve() for p in _libraries())]
    for filename, line in reversed(frames):
        path = Path(filename).resolve()
        if theirs and any(path.is_relative_to(t) for t in theirs):
            return f"{prefix}{filename}:{line}"
        if not theirs and not any(path.is_relative_to(o) for o in ours) and not filename.startswith("<"):
            return f"{prefix}{filename}:{line}"
    return ""


def _libraries() -> set[str]:
    return {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}


def _entry_point(name: str) -> str | None:
    found = [ep for ep in importlib.metadata.entry_points(group=ENTRY_POINTS) if ep.name == name]
    return found[0].value if found else None


def own_code(name: str) -> tuple[str, ...]:
    """The folders only runs of task `name` import: a built-in task's as it declares them; a task outside
    the package, the folder of its module (its records' staleness covers it)."""
    return _own_code(task_of(name))


def _own_code(task: Task) -> tuple[str, ...]:
    if task.name in BUILTIN:
        return tuple(task.own_code)
    module = importlib.import_module(type(task).__module__)
    return (*task.own_code, str(Path(module.__file__).resolve().parent) + "/")
