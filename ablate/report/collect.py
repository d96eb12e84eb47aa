"""Read result records and the row configs they came from; pick one run per (row, seed) cell.

The report depends on the record format (ablate.records.store) and the row YAMLs
(conf/model/<row>.yaml), never on training code. Corrupted records become warnings that name the file.
"""

from __future__ import annotations

import functools
import json
from collections import Counter
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from ablate import paper
from ablate.config import DEFAULT_TASK, ModelConfig, default_results, total_steps
from ablate.config.rows import ordered, resolve_row
from ablate.config.study import DEFAULT_REFERENCE, package_conf
from ablate.records.evaluations import Evaluation, Protocol, newest
from ablate.records.evaluations import read as read_evaluations
from ablate.records.staleness import why_stale
from ablate.records.status import shown
from ablate.records.store import BASELINE, RecordError, find_records, preset_key
from ablate.records.trust import allow, allow_model, record_config

DEFAULT_CONF_MODEL = package_conf() / "model"
_STATUS_RANK = {
    "finished": 0,
    "running": 1,
    "preempted": 2,
    "timed_out": 2,
    "interrupted": 3,
    "cancelled": 4,
    "failed": 5,
}
MODEL_FIELDS = tuple(f.name for f in fields(ModelConfig))


# ------------------------------------------------------------------------------------------------------------
# Row configs


def load_row_model(path: str | Path, folders: list[Path] | None = None) -> ModelConfig:
    """A row file as Hydra composes it (rows.resolve_row: the rows on its defaults list, each from the
    first of its own folder and `folders` that holds it, then its keys), over ModelConfig's structured
    defaults (which are the paper's base)."""
    from omegaconf import OmegaConf

    path = Path(path)

    def load(name: str) -> dict | None:
        f = next(
            (d / f"{name}.yaml" for d in [path.parent, *(folders or [])] if (d / f"{name}.yaml").is_file()),
            None,
        )
        d = OmegaConf.to_container(OmegaConf.load(f), resolve=True) if f is not None else None
        if d is not None and not isinstance(d, dict):
            raise ValueError(f"{f}: a row file must be a mapping")
        return d

    d = resolve_row(path.stem, load)
    d.setdefault("name", path.stem)
    obj = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(ModelConfig), d))
    assert isinstance(obj, ModelConfig)
    return obj


@dataclass
class RowConfigs:
    models: dict[str, ModelConfig]
    source: dict[str, str]  # row -> "yaml" | "paper" (conf/model/<row>.yaml missing: the paper's values)
    errors: list[str] = field(default_factory=list)
    files: dict[str, Path] = field(default_factory=dict)  # row -> its row file (the "yaml" rows)


def row_configs(conf_dir: str | Path | list | None = None) -> RowConfigs:
    """The rows of the row folders `conf_dir` (one folder, or several: the first that holds a row names
    it, as a study's config folder comes before the package's on Hydra's search path; default: the
    package's conf/model), then Table 3's rows that no folder holds, by the paper's values."""
    folders = (
        [Path(d) for d in conf_dir] if isinstance(conf_dir, list) else [Path(conf_dir or DEFAULT_CONF_MODEL)]
    )
    models: dict[str, ModelConfig] = {}
    source: dict[str, str] = {}
    files: dict[str, Path] = {}
    errors: list[str] = []
    for folder in (f for f in folders if f.is_dir()):
        for p in sorted(folder.glob("*.yaml")):
            if p.stem in models:
                continue
            try:
                models[p.stem] = load_row_model(p, folders)
                source[p.stem], files[p.stem] = "yaml", p
            except Exception as e:  # noqa: BLE001 - a broken row file is reported, not fatal
                errors.append(f"{p}: unreadable row config ({e.__class__.__name__}: {e})")
    for row, pr in paper.table3().items():
        if row not in models:
            models[row] = ModelConfig(**pr.model_dict())
            source[row] = "paper"
    order = ordered(models)
    return RowConfigs({r: models[r] for r in order}, {r: source[r] for r in order}, errors, files)


# ------------------------------------------------------------------------------------------------------------
# Runs


@dataclass
class Run:
    rec: dict[str, Any]
    stale: list[str] = field(default_factory=list)  # reasons
    evaluations: list[Evaluation] = field(default_factory=list)  # after training, oldest first
    average: int | None = None  # dev figures of `ablate.evaluate --split dev --average N`; None: its own

    @property
    def row(self) -> str:
        return str(self.rec.get("row") or self.cfg("model", {}).get("name") or "?")

    def setting(self, common: frozenset[str] = frozenset()) -> str:
        """The table's row for this record: its row, and the keys its command line varied beyond the
        row (RunConfig.varies), so that each setting of a sweep over non-row keys is a row of its own; a key
        every run of the table was given alike (`common`) is the table's, not a row's."""
        return " ".join([self.row, *(v for v in map(str, self.cfg("varies") or []) if v not in common)])

    @property
    def seed(self) -> int:
        return int(self.rec.get("seed", self.rec.get("config", {}).get("seed", 0)))

    @functools.cached_property
    def status(self) -> str:
        """The status a reader shows (records.status.shown)."""
        return shown(self.rec, self.folder if "_path" in self.rec else None)

    @property
    def metrics(self) -> dict[str, Any]:
        """The run's own figures (its record's, and the test evaluation it made under train.average_last);
        with `average`, its dev figures are those of that protocol's newest evaluation (none where it has
        none: a column never mixes protocols)."""
        own = dict(self.rec.get("metrics") or {})
        for e in newest(self.evaluations).values():
            if e.by_run:
                own.update(e.metrics)
        if self.average is None:
            return own
        ev = self.evaluated(Protocol("dev", self.average))
        return {**{k: v for k, v in own.items() if not k.startswith("dev_")}, **(ev.metrics if ev else {})}

    def evaluated(self, protocol: Protocol) -> Evaluation | None:
        """The newest evaluation under `protocol`, or None."""
        return newest(self.evaluations).get(protocol)

    def evaluated_on(self, split: str) -> dict[Protocol, Evaluation]:
        """The newest evaluation of `split` under each protocol, curve points (--until-step) aside: what a
        table of a split's figures shows, a line each."""
        return {
            p: e for p, e in newest(self.evaluations).items() if p.split == split and p.until_step is None
        }

    @property
    def folder(self) -> Path:
        return Path(self.rec["_path"]).parent

    def cfg(self, key: str, default: Any = None) -> Any:
        return (self.rec.get("config") or {}).get(key, default)

    @property
    def scale_name(self) -> str:
        return str((self.cfg("scale") or {}).get("name", "paper"))

    @property
    def recipe(self) -> str | None:
        return self.cfg("recipe")  # None: a record from before recipes (its scale file held the recipe)

    @property
    def preset(self) -> str:
        """The recipe and scale the run trained under ('cpu' where both are named alike): one table's
        records share it."""
        return preset_key(self.recipe, self.scale_name)

    def metric(self, key: str) -> float | None:
        v = self.metrics.get(key)
        if v is None and key == "dev_ppl" and self.metrics.get("dev_tokens"):
            v = float(np.exp(self.metrics["dev_nll_sum"] / self.metrics["dev_tokens"]))
        return None if v is None else float(v)

    def split_figure(self, key: str) -> tuple[float | None, Evaluation | None]:
        """A figure of a split (`test_bleu`): the run's own (Run.metric), else that of its newest
        evaluation of the whole split by this model alone (`python -m ablate.evaluate RUN --split test`),
        with that evaluation; (None, None) where neither has it."""
        own = self.metric(key)
        if own is not None:
            return own, None
        split = key.split("_", 1)[0]
        for e in reversed(self.evaluations):  # oldest first
            p = e.protocol
            if p.split == split and p.until_step is None and not p.members and _is_number(e.metrics.get(key)):
                return float(e.metrics[key]), e
        return None, None

    def file(self, key: str, default: str) -> Path:
        return self.folder / (self.rec.get("files") or {}).get(key, default)

    def sentences(self) -> dict[str, np.ndarray] | None:
        """The per-sentence statistics of the run's own dev decode, every array of its dev_sentences.npz
        (none under another protocol, none where the arrays disagree on the number of sentences)."""
        p = self.file("dev_sentences", "dev_sentences.npz")
        if self.average is not None or not p.is_file():
            return None
        try:
            with np.load(p) as z:
                out = {k: np.asarray(z[k]) for k in z.files}
        except Exception:  # noqa: BLE001 - a damaged file only loses the bootstrap
            return None
        if not out or len({len(a) if a.ndim else -1 for a in out.values()}) != 1:
            return None
        return out

    def progress(self) -> tuple[int, int | None] | None:
        """(the last step its curves reached, the step count it trains to) for an unfinished run; the
        count comes from its configuration through the function the run itself used (None for a record
        this version cannot read)."""
        steps = [int(c["step"]) for c in self.curves()]
        if not steps:
            return None
        try:
            total = total_steps(record_config(self.rec))
        except Exception:  # noqa: BLE001 - a record of another version: the step alone is shown
            total = None
        return max(steps), total

    def train_seconds(self) -> float | None:
        """Training seconds over every process the run took: the last reading of its training clock in
        curves.jsonl (a resumed run's clock goes on from its checkpoint's), else the record's
        train_time_s (over every process it keeps in `processes`; the last process's in a record that keeps
        none)."""
        clock = [float(c["time_s"]) for c in self.curves() if c.get("time_s") is not None]
        last = self.rec.get("train_time_s")
        return max(clock) if clock else None if last is None else float(last)

    def tokens_per_s(self) -> float | None:
        """Target tokens over the whole run's training seconds (both count every process)."""
        tokens, secs = self.rec.get("target_tokens"), self.train_seconds()
        return None if tokens is None or not secs else float(tokens) / secs

    def curves(self) -> list[dict[str, Any]]:
        return self._curves

    @functools.cached_property
    def _curves(self) -> list[dict[str, Any]]:  # read once a report: fit, cost, progress and plots share it
        """The curve's lines, each (step, train or dev) once, the last written: a line that is not JSON,
        whose step is not an integer or whose values are not numbers (an edit, a cut-short write) is left
        out; a line written again by a resumed run replaces the earlier one."""
        p = self.file("curves", "curves.jsonl")
        out: dict[tuple[int, bool], dict[str, Any]] = {}
        if p.is_file():
            for line in p.read_text(encoding="utf-8", errors="replace").splitlines():
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if not isinstance(obj, dict) or not _is_int(obj.get("step")):
                    continue
                if not all(v is None or _is_number(v) for v in obj.values()):
                    continue
                out[(obj["step"], "dev_ppl" in obj)] = {
                    k: float(v) if k != "step" and v is not None else v for k, v in obj.items()
                }
        return sorted(out.values(), key=lambda c: (c["step"], "dev_ppl" in c))


def _run(rec: dict[str, Any], average: int | None, warnings: list[str]) -> Run:
    """A record as the report reads it, with its evaluations (one that cannot be read is a warning)."""
    run = Run(rec, average=average)
    try:
        run.evaluations = read_evaluations(run.folder, str(rec["run_id"]))
    except RecordError as e:
        warnings.append(f"skipped {e}")
    return run


@dataclass
class Collection:
    runs: dict[str, dict[int, Run]]  # row -> seed -> the chosen run
    rows: RowConfigs
    warnings: list[str]
    scale: str | None  # the preset (Run.preset) of the chosen runs
    base_effective: dict[str, Any] | None
    scale_cfg: dict[str, Any] | None
    excluded: list[str]  # one line per group of records left out (other preset, other task)
    results_dir: Path
    read: int = 0  # records read (readable ones)
    chosen_because: str = ""  # why this preset: given, or the newest sweep's
    average: int | None = None  # dev figures of evaluations that averaged this many checkpoints
    # finished records of baselines of this task (`python -m ablate.baseline`): no preset, no seed
    baselines: list[Run] = field(default_factory=list)
    # every record of the task and preset, before one is chosen per (row, seed): a table whose rows are
    # recipes (Table 4: experiments of one model row) groups these itself
    every: list[Run] = field(default_factory=list)
    duplicates: int = 0  # records of `every` not chosen for their (row, seed) cell
    reference: str = DEFAULT_REFERENCE  # the row every other is compared against (the study's; --reference)
    common: tuple[str, ...] = ()  # the keys beyond its row that every run was given alike (Run.setting)

    def left_out(self, cells: bool = True) -> list[str]:
        """What a table leaves out, a line a group: a table of cells also every duplicate of a cell."""
        dup = [f"{self.duplicates} older or unfinished duplicate record(s) of a (row, seed) cell"]
        return self.excluded + (dup if cells and self.duplicates else [])

    def seeds(self) -> list[int]:
        return sorted({s for by_seed in self.runs.values() for s in by_seed})

    def finished(self, row: str) -> dict[int, Run]:
        return {s: r for s, r in sorted(self.runs.get(row, {}).items()) if r.status == "finished"}

    def template(self) -> Run | None:
        """A run whose non-model config stands for all (the reference's newest finished, else any)."""
        cand = [r for by in self.runs.values() for r in by.values()]
        if not cand:
            return None
        cand.sort(key=lambda r: (r.row != self.reference, _STATUS_RANK[r.status], _neg_time(r)))
        return cand[0]


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _neg_time(r: Run) -> str:
    # newest first when sorting ascending: invert the ISO timestamp's characters
    t = str(r.rec.get("finished") or r.rec.get("started") or "")
    return "".join(chr(0x10FFFF - ord(c)) for c in t)


def stale_reasons(run: Run, rows: RowConfigs) -> list[str]:
    code = why_stale(run.rec)
    out = [code] if code else []
    model = rows.models.get(run.row)
    rec_model = run.cfg("model") or {}
    if model is not None and rows.source.get(run.row) == "yaml" and rec_model:
        now = asdict(model)
        diff = sorted(k for k in MODEL_FIELDS if k in rec_model and k in now and _ne(rec_model[k], now[k]))
        if diff:
            out.append("config " + ", ".join(f"{k}={rec_model[k]}->{now[k]}" for k in diff))
    return out


def _ne(a: Any, b: Any) -> bool:
    if isinstance(a, int | float) and isinstance(b, int | float):
        return abs(float(a) - float(b)) > 1e-12
    return a != b


class SelectionError(ValueError):
    """The records asked for (--sweep, --preset) are not there, or the default choice is ambiguous: the
    report refuses in one line instead of writing an empty or a guessed table."""


def _select(
    runs: list[Run], task: str, preset: str | None, sweep: str | None, excluded: list[str], reference: str
):
    """The records of one table: this task, this sweep (if given), one preset (by default the newest
    sweep's). What is left out gets a line in `excluded`; returns (runs, preset, why that preset)."""
    other_task = [r for r in runs if r.rec.get("task", DEFAULT_TASK) != task]
    if other_task:
        excluded.append(f"{len(other_task)} record(s) of another task")
    runs = [r for r in runs if r.rec.get("task", DEFAULT_TASK) == task]
    if sweep is not None:
        n = len(runs)
        sweeps = sorted({str(r.rec.get("sweep")) for r in runs if r.rec.get("sweep")})
        runs = [r for r in runs if r.rec.get("sweep") == sweep]
        if not runs:
            raise SelectionError(
                f"--sweep {sweep}: no {task} records of this sweep (sweeps: {', '.join(sweeps) or 'none'})"
            )
        if n - len(runs):
            excluded.append(f"{n - len(runs)} record(s) of other sweeps than {sweep!r}")
    presets = Counter(r.preset for r in runs)
    why = "given with --preset"
    if preset is not None and presets and preset not in presets:
        raise SelectionError(
            f"--preset {preset}: no {task} records of this preset "
            f"(presets: {', '.join(f'{p} ({n})' for p, n in sorted(presets.items()))})"
        )
    if preset is None and presets:
        preset, why = default_preset(runs, reference)
    if preset is not None:
        for name, n in sorted(presets.items()):
            if name != preset:
                excluded.append(f"{n} record(s) of preset {name!r} (use --preset {name} to see them)")
        runs = [r for r in runs if r.preset == preset]
    return runs, preset, why


def default_preset(runs: list[Run], reference: str = DEFAULT_REFERENCE) -> tuple[str, str]:
    """(preset, why): the preset of the newest sweep (the sweep of the most recently started record; the
    newest single run where that has no sweep); in a sweep over presets, the one of most of its finished
    runs of the reference row, else of most of its records. Raises SelectionError where that is a tie."""
    dated = [r for r in runs if r.rec.get("started")]
    if dated:
        newest = max(dated, key=lambda r: str(r.rec["started"]))
        sweep = newest.rec.get("sweep")
        if sweep:
            members = [r for r in runs if r.rec.get("sweep") == sweep]
            what = f"the newest sweep, {sweep}: {len(members)} record(s)"
        else:
            members = [r for r in dated if r.rec["started"] == newest.rec["started"]]
            what = f"the newest run, {newest.rec['run_id']}"
    else:
        members, what = runs, "no record says when it started: all records"
    base = Counter(r.preset for r in members if r.row == reference and r.status == "finished")
    counts = (base or Counter(r.preset for r in members)).most_common()
    if len(counts) > 1 and counts[0][1] == counts[1][1]:
        tied = sorted(p for p, n in counts if n == counts[0][1])
        runs_of = f"{reference} runs" if base else "records"
        _ambiguous(runs, f"{what}, with as many {runs_of} of {' as of '.join(tied)}")
    if len(counts) > 1:
        what += f", most {f'finished {reference} runs' if base else 'records'} of this preset"
    return counts[0][0], what


def _ambiguous(runs: list[Run], why: str) -> None:
    counts = Counter(r.preset for r in runs)
    raise SelectionError(
        f"which preset? {why}: choose one with --preset "
        f"({', '.join(f'{p}: {n} record(s)' for p, n in sorted(counts.items()))})"
    )


def _one_per_cell(
    runs: list[Run], rows: RowConfigs, common: frozenset[str]
) -> tuple[dict[str, dict[int, Run]], int]:
    """One record per (setting, seed): finished before running before failed, then the newest; and how
    many were not chosen. A setting is a row and the keys a command line varied with it (Run.setting)."""
    chosen: dict[str, dict[int, Run]] = {}
    dup = 0
    for r in sorted(runs, key=lambda r: (_STATUS_RANK[r.status], _neg_time(r))):
        by_seed = chosen.setdefault(r.setting(common), {})
        if r.seed in by_seed:
            dup += 1
            continue
        r.stale = stale_reasons(r, rows)
        by_seed[r.seed] = r
    return chosen, dup


def collect(
    results_dir: str | Path | None = None,
    conf_dir: str | Path | None = None,
    task: str = DEFAULT_TASK,
    preset: str | None = None,
    sweep: str | None = None,
    average: int | None = None,
    reference: str = DEFAULT_REFERENCE,
) -> Collection:
    """The records of one table, compared against row `reference`; with `average`, dev figures of the
    evaluations that averaged the last `average` checkpoints (Run.metrics)."""
    results_dir = Path(results_dir or default_results())
    warnings: list[str] = []
    rows = row_configs(conf_dir)
    allow("task", task)  # the report's own task and row files: what reading its records may import
    for model in rows.models.values():
        allow_model(model)
    if not results_dir.exists():
        warnings.append(f"{results_dir}: no such folder (no records)")
        records, errors = [], []
    else:
        records, errors = find_records(results_dir)
    warnings += [f"skipped {e}" for e in errors]
    warnings += rows.errors
    excluded: list[str] = []

    every = [_run(r, average, warnings) for r in records]
    baselines = [r for r in every if r.rec.get("group") == BASELINE and r.rec.get("task") == task]
    every = [r for r in every if r.rec.get("group") != BASELINE]
    runs, preset, why = _select(every, task, preset, sweep, excluded, reference)
    given = [frozenset(map(str, r.cfg("varies") or [])) for r in runs]
    common = frozenset.intersection(*given) if given else frozenset()  # names the table, not a row
    chosen, duplicates = _one_per_cell(runs, rows, common)
    chosen = {row: dict(sorted(chosen[row].items())) for row in ordered(chosen)}
    base = next(iter(chosen.get(reference, {}).values()), None)
    tmpl = base or next((r for by in chosen.values() for r in by.values()), None)
    return Collection(
        runs=chosen,
        rows=rows,
        warnings=warnings,
        scale=preset,
        base_effective=(base.rec.get("model_effective") if base else None),
        scale_cfg=(tmpl.cfg("scale") if tmpl else None),
        excluded=excluded,
        duplicates=duplicates,
        results_dir=results_dir,
        read=len(records),
        chosen_because=why,
        average=average,
        baselines=[r for r in baselines if r.status == "finished"],
        every=runs,
        reference=reference,
        common=tuple(sorted(common)),
    )
