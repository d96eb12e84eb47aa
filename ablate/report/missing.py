"""The cells of a task's table still to run (missing, failed, interrupted, stale) and the `ablate.run`
commands that run exactly those, as the finished records were launched (their experiment, config folders
and overrides; a record made before these were kept: the recipe, scale and settings it was run with)."""

from __future__ import annotations

import os
import re
import sys
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from ablate.config import (
    DEFAULT_TASK,
    ArchConfig,
    DataConfig,
    DecodeConfig,
    TrainConfig,
    TrainerConfig,
    default_results,
)
from ablate.config.study import Study, current_study
from ablate.jobs.command import (
    CommandError,
    checked_override,
    hydra_value,
    override,
    override_value,
    run_command,
    sweep,
)
from ablate.records.identity import DATA_PATHS, NOT_IDENTITY, TASK_DATA_PATHS, preset_sources
from ablate.records.store import MACHINE_KEYS
from ablate.report.analysis import Analysis
from ablate.report.collect import DEFAULT_CONF_MODEL, Collection, Run

PACKAGE = Path(__file__).resolve().parents[1]  # the ablate package: its tasks' papers are this paper's


def missing_cells(
    an: Analysis,
    rows: list[str] | None = None,
    seeds: list[int] | None = None,
    task: str = DEFAULT_TASK,
    study: Study | None = None,
) -> dict[tuple[str, int], str]:
    """(row, seed) -> 'missing', 'stale' or the unfinished run's status, for the requested rows x seeds
    (default: the study's rows, table_rows). A run whose SLURM job waits to be requeued is listed too:
    running the command while it waits is safe (the run's lock lets one process at a time train it, the
    other skips it)."""
    coll = an.coll
    rows = rows or table_rows(coll, task, study)
    seeds = seeds or coll.seeds() or [1]
    out = {}
    for row in rows:
        by = coll.runs.get(row, {})
        for s in seeds:
            r = by.get(s)
            if r is None:
                out[(row, s)] = "missing"
            elif r.status in ("failed", "interrupted", "cancelled", "preempted", "timed_out"):
                out[(row, s)] = r.status
            elif r.stale and r.status == "finished":  # a running run is left alone
                out[(row, s)] = "stale"
    return out


def table_rows(coll: Collection, task: str = DEFAULT_TASK, study: Study | None = None) -> list[str]:
    """The rows of a task's table in `study` (default: the package's own): the rows of its paper's table
    (Task.paper_table) where that paper is the study's (the package's own study, whose paper is Table 3;
    a task outside the package, whose paper is its own); else the reference row, the rows of the records
    and the study's own row files (those of the row folders the package does not have: the study's
    conf/model, or --conf)."""
    from ablate.tasks import task_of

    study = study or Study()
    if (own := study.paper_file("paper_table")) is not None:
        from ablate.paper import paper_table

        return list(paper_table(own).figures)
    paper_rows = list(task_of(task).paper_figures())
    path = task_of(task).paper_file("paper_table")
    if paper_rows and (study.root is None or not path.resolve().is_relative_to(PACKAGE)):
        return paper_rows
    theirs = {row for row in coll.rows.files if not (DEFAULT_CONF_MODEL / f"{row}.yaml").is_file()}
    wanted = {coll.reference, *coll.runs, *theirs}
    return [row for row in coll.rows.models if row in wanted] + sorted(wanted - set(coll.rows.models))


def unfiled_rows(coll: Collection, rows: list[str], task: str = DEFAULT_TASK) -> dict[str, str]:
    """{row: why} for the rows no row file defines, in the row folders the report read, the package's, or
    the config folders the records were launched with: a command naming them would stop at once (Hydra:
    "Could not find 'model/<row>'")."""
    from ablate.tasks import task_of

    tmpl = coll.template()
    launch = tmpl.rec.get("launch") if tmpl is not None else None
    searched = [str(p) for p in (launch or {}).get("searchpath") or [] if isinstance(launch, dict)]
    folders = [Path(p.removeprefix("file://")) / "model" for p in searched if p.startswith("file://")]
    path = task_of(task).paper_file("paper_table")
    paper = set(task_of(task).paper_figures())
    out = {}
    for row in rows:
        if row in coll.rows.files or any(
            (f / f"{row}.yaml").is_file() for f in [DEFAULT_CONF_MODEL, *folders]
        ):
            continue
        what = f"a row of the paper's table ({path.name})" if row in paper and path else "a row"
        out[row] = f"{what} with no row file (model/{row}.yaml in the study's conf folder)"
    return out


def command_overrides(run: Run | None, results_dir: str | None = None) -> list[str]:
    """The overrides of a command that runs more cells like `run`, as argv words (run_command shell-quotes
    them): those it was launched with (its record's `launch`: its experiment, config folders and every
    override but row, seed, resume and results_dir, each one Hydra parses, else CommandError); for a record
    made before launch was kept, rebuilt from its config (run_overrides)."""
    try:
        return _command_overrides(run, results_dir)
    except CommandError as e:
        assert run is not None
        name = run.rec.get("run_id") or (run.folder.name if "_path" in run.rec else run.row)
        raise CommandError(f"the record of {name}: {e}; no command is printed from it") from None


def _command_overrides(run: Run | None, results_dir: str | None) -> list[str]:
    launch = run.rec.get("launch") if run is not None else None
    if not isinstance(launch, dict) or not isinstance(launch.get("overrides"), list):
        return placeless(run_overrides(run, results_dir, preset_values(run_overrides(run))))
    searched = launch.get("searchpath") or []
    if not isinstance(searched, list) or not all(isinstance(e, str) for e in searched):
        raise CommandError(f"the record's launch.searchpath {searched!r} is not a list of folders")
    typed = [e for e in searched if e not in current_study().searchpath]
    out = [override("hydra.searchpath", typed)] if typed else []  # the study's own is found by its rule
    for o in launch["overrides"]:
        key = checked_override(o).lstrip("+~").split("=", 1)[0]
        if key not in ("model", "seed", "resume", "results_dir") and not key.startswith("model."):
            out.append(o)
    if results_dir and results_dir != default_results():
        out.append(override("results_dir", results_dir))
    return placeless(out)


_SKIP = NOT_IDENTITY | {"data.name"}  # data.name: given as data=<name>


def run_overrides(
    run: Run | None, results_dir: str | None = None, preset: dict[str, Any] | None = None
) -> list[str]:
    """The non-model overrides a record was run with: scale and data presets, then every train/decode/trainer/
    data value that differs from the dataclass default and, where `preset` gives the values the named
    presets compose to (preset_values), from those: the command does not repeat its recipe."""
    out: list[str] = []
    if run is None:
        return out
    preset = preset or {}
    if run.recipe is not None:  # always named: the defaults (recipe=cpu scale=cpu) are not the paper's
        out.append(override("recipe", run.recipe))
    out.append(override("scale", run.scale_name))
    data = run.cfg("data") or {}
    if data.get("name", "builtin") != "builtin":
        out.append(override("data", data["name"]))
    for section, cls in (
        ("base", ArchConfig),
        ("data", DataConfig),
        ("train", TrainConfig),
        ("decode", DecodeConfig),
        ("trainer", TrainerConfig),
    ):
        got = run.cfg(section) or {}
        for f in fields(cls):
            key = f"{section}.{f.name}"
            if key in _SKIP or f.name not in got:
                continue
            default = asdict(cls())[f.name]
            v = got[f.name]
            if isinstance(default, tuple):
                default = list(default)
            if key in preset:
                default = list(preset[key]) if isinstance(preset[key], tuple) else preset[key]
            if v != default:
                out.append(override(key, v))
    out += node_overrides(run, preset)
    if run.rec.get("task", DEFAULT_TASK) != DEFAULT_TASK:
        out.append(override("task", run.rec["task"]))
    if results_dir and results_dir != default_results():
        out.append(override("results_dir", results_dir))
    return out


def node_overrides(run: Run, preset: dict[str, Any]) -> list[str]:
    """The overrides of a record's optimizer and schedule (config/targets.py nodes; a record of the layout
    before their groups reads as its Adam and schedule, config.migrate) where they differ from what the
    presets compose: the group whose file has the record's class (`schedule=cosine`), then each key."""
    import yaml

    from ablate.config import migrate
    from ablate.config.targets import PAPER

    config = migrate(run.rec.get("config") or {})
    out = []
    for group in ("optim", "schedule"):
        mine, theirs = config.get(group) or PAPER[group], preset.get(group) or PAPER[group]
        if mine.get("_target_") != theirs.get("_target_"):
            files = sorted((DEFAULT_CONF_MODEL.parent / group).glob("*.yaml"))
            named = {p.stem: yaml.safe_load(p.read_text()) for p in files}
            name = next((n for n, v in named.items() if v.get("_target_") == mine.get("_target_")), None)
            out.append(override(group, name) if name else override(f"{group}._target_", mine.get("_target_")))
            theirs = {
                **(named.get(name) or {}),
                **{k: v for k, v in theirs.items() if k in ("warmup_steps", "scale")},
            }
        for key, value in mine.items():
            if key not in ("_target_", "_partial_") and theirs.get(key, object()) != value:
                out.append(override(f"{group}.{key}", value, "" if key in theirs else "+"))
    return out


# ---- A printed command names the data by what names it on every machine, never by one machine's folder
# (nor its cache: data.cache_dir is left out, the command's machine keeps its own):
# a data path the presets read from an environment variable (data=multi30k: data.root from MULTI30K_DIR)
# is left to them; a path inside the current folder is given relative to it; any other as a variable of
# its own (`data.train_src=${oc.env:ABLATE_DATA_TRAIN_SRC}`). The variables not set here are said once.
DATA_PATH_KEYS = (*DATA_PATHS, *TASK_DATA_PATHS)


def placeless(overrides: list[str]) -> list[str]:
    """`overrides` with each data path as every machine can name it (above), each new value in Hydra's
    grammar; a note on stderr for each variable the command reads that this shell does not set."""
    out, unset = [], []
    for o in overrides:
        key_as_given = o.partition("=")[0]
        key = key_as_given.lstrip("+~")
        if key in MACHINE_KEYS:  # where the launching machine kept its cache: this one keeps its own
            continue
        value = override_value(o) if key in DATA_PATH_KEYS else None
        path = os.path.expanduser(value) if isinstance(value, str) else ""
        if not os.path.isabs(path):
            out.append(o)
            continue
        here = Path.cwd().resolve()
        if Path(path).resolve().is_relative_to(here):
            out.append(f"{key_as_given}={hydra_value(Path(path).resolve().relative_to(here).as_posix())}")
            continue
        var = preset_sources(tuple(overrides)).get(key)
        if var is None or not re.fullmatch(r"\w+", var):
            var = "ABLATE_" + re.sub(r"\W", "_", key).upper()
            out.append(f"{key_as_given}=${{oc.env:{var}}}")  # an interpolation: read where the command runs
        if var not in os.environ:
            unset.append((var, key))
    for var, key in dict.fromkeys(unset):
        said = "set it to this machine's copy (records name data by content: the same files, the same runs)"
        print(f"note: the command reads {key} from ${var}, not set here: {said}", file=sys.stderr)
    return out


def missing_commands(
    an: Analysis,
    rows: list[str] | None = None,
    seeds: list[int] | None = None,
    results_dir: str | None = None,
    task: str = DEFAULT_TASK,
    study: Study | None = None,
) -> list[str]:
    """One `python -m ablate.run -m` per set of rows needing the same seeds: exactly the missing, failed or
    stale cells (stale ones are rerun with resume=false) of the study's rows (table_rows); a row no file
    defines, or that the preset cannot hold, is a line on stderr instead."""
    cells = missing_cells(an, rows, seeds, task, study)
    tmpl = an.coll.template()
    over = command_overrides(tmpl, results_dir)
    if tmpl is None and (experiment := study_experiment(study or current_study())) is not None:
        over.insert(0, override("experiment", experiment))  # no record yet: the study's own presets
    wanted = list(dict.fromkeys(row for row, _ in cells))
    refused = unfiled_rows(an.coll, wanted, task)
    refused |= refused_rows(an, tmpl, sorted(set(wanted) - set(refused)))
    for row, why in refused.items():
        print(f"skipped {row}: {why}", file=sys.stderr)
    cells = {cell: why for cell, why in cells.items() if cell[0] not in refused}
    out = []
    for rerun in (False, True):
        need: dict[str, list[int]] = {}
        for (row, s), why in cells.items():
            if (why == "stale") == rerun:
                need.setdefault(row, []).append(s)
        by_seeds: dict[tuple[int, ...], list[str]] = {}
        for row, ss in need.items():
            by_seeds.setdefault(tuple(sorted(ss)), []).append(row)
        for ss, rs in by_seeds.items():
            words = [sweep("model", rs), sweep("seed", ss), *over]
            out.append(run_command([*words, *(["resume=false"] if rerun else [])], multirun=True))
    return out


def study_experiment(study: Study) -> str | None:
    """The experiment a command of `study` composes when no record says how it ran: the one named as the
    study (the scaffold writes it), else the study's only experiment file (None: neither)."""
    found = sorted((study.conf / "experiment").glob("*.yaml")) if study.conf is not None else []
    names = [p.stem for p in found]
    return study.name if study.name in names else names[0] if len(names) == 1 else None


def preset_values(overrides: list[str]) -> dict[str, Any]:
    """{dotted key: value} of the config that `python -m ablate.run <overrides>` composes with the presets
    it names (recipe, scale, data), for the keys a command may repeat; {} where it does not compose."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from ablate.config import flat_fields, register_configs, to_dataclass

    presets = [o for o in overrides if o.split("=", 1)[0] in ("recipe", "scale", "data", "task")]
    if GlobalHydra.instance().is_initialized():
        return {}  # inside another Hydra application: the dataclass defaults serve
    register_configs()
    try:
        with initialize_config_dir(str(DEFAULT_CONF_MODEL.parent), version_base="1.3"):
            cfg = to_dataclass(compose("config", overrides=[*presets, "logger=none"]))
    except Exception:  # noqa: BLE001 - a preset this checkout does not have: compare with the defaults
        return {}
    return flat_fields(cfg)


def refused_rows(an: Analysis, tmpl: Run | None, rows: list[str]) -> dict[str, str]:
    """{row: reason} for the rows that the template run's preset cannot hold in their meaning (a run of
    them would stop at once: config.validate), judged only where base itself passes under that config."""
    from ablate.config import ConfigError, ModelConfig, to_dataclass, validate
    from ablate.records.trust import foreign

    if tmpl is None or foreign(tmpl.rec) is not None:  # its config's task would be imported to type it
        return {}
    config = {k: v for k, v in (tmpl.rec.get("config") or {}).items() if k not in ("model", "sweep_name")}

    def problem(model: ModelConfig) -> str | None:
        try:
            validate(to_dataclass({**config, "model": asdict(model)}))
        except (ConfigError, ValueError) as e:
            return str(e).splitlines()[0]
        except Exception:  # noqa: BLE001 - a record of another version: no judgement
            return None
        return None

    if problem(ModelConfig()) is not None:
        return {}
    models = an.coll.rows.models
    return {row: why for row in rows if row in models and (why := problem(models[row])) is not None}
