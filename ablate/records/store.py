"""The result record: one JSON per run, written by the run that made it (its status only through
ablate.records.status), read back with every field's type checked. The report reads records, never
training code.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ablate.config import migrate
from ablate.records.identity import relocate, run_id
from ablate.records.status import SCHEMA_VERSION, STATUSES, schema_problem

RECORD_NAME = "record.json"


class RecordError(ValueError):
    pass


def new_record(cfg, **fields: Any) -> dict[str, Any]:
    """A run's record as it starts, or as a run refused before training: the one place its fields are
    named (its status comes with its first transition). Training adds metrics, files and timings."""
    from dataclasses import asdict

    return _record(run_id(cfg), cfg.model.name, cfg.model.group, cfg.seed, cfg.task, cfg.sweep_name,
                   portable(asdict(cfg)), **fields)  # fmt: skip


# Where a machine keeps what it prepares: not what a run computes (records.identity.NOT_IDENTITY), and the
# writing machine's folder, never a place for another machine (or another user) to write. A new record does
# not name it; one that does (written before) is read without it: a config read back takes this machine's
# cache (config.DEFAULT_CACHE: $ABLATE_CACHE, else ~/.cache/ablate).
MACHINE_KEYS = ("data.cache_dir",)


def portable(config: dict[str, Any]) -> dict[str, Any]:
    """A record's config without the keys that name a machine's own folders (MACHINE_KEYS)."""
    for key in MACHINE_KEYS:
        group, name = key.split(".")
        if isinstance(config.get(group), dict):
            config[group].pop(name, None)
    return config


BASELINE = "baseline"  # the group of a parser that needs no training run (ablate.baseline)


def baseline_record(run_id_: str, row: str, task: str, config: dict[str, Any], **fields: Any) -> dict:
    """The record of a baseline (`python -m ablate.baseline`): a run's fields, its group `baseline`."""
    return _record(run_id_, row, BASELINE, 0, task, None, config, **fields)


def _record(run_id_, row, group, seed, task, sweep, config, **fields: Any) -> dict[str, Any]:
    from ablate.records.folder import now
    from ablate.records.staleness import facts

    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": run_id_,
        "row": row,
        "group": group,
        "seed": seed,
        "status": None,
        "reason": None,
        "task": task,
        "sweep": sweep,
        "config": config,
        "metrics": {},
        "files": {},
        "started": now(),
        "machine": machine(),
        "versions": versions(),
        **facts(task),
        **fields,
    }


def preset_key(recipe: str | None, scale: str) -> str:
    """The preset a record's run trained under, as records are grouped and `--preset` names it: the
    recipe+scale ('multi30k_table3+paper'), one name where both agree; a record from before recipes (no
    recipe) names its scale alone."""
    return scale if recipe in (None, scale) else f"{recipe}+{scale}"


def machine() -> dict[str, Any]:
    """The CPU a run's process ran on, as lscpu names it, with its family and model: the name alone does not
    tell generations apart ('AMD EPYC' is Zen 1 to Zen 5), and speeds compare only on one CPU."""
    import platform

    cpu = platform.processor() or platform.machine()
    try:
        first = Path("/proc/cpuinfo").read_text().split("\n\n")[0]
        info = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in first.splitlines())}
        cpu = f"{info['model name']} (family {info['cpu family']}, model {info['model']})"
    except (OSError, KeyError):  # not Linux, or an architecture whose cpuinfo names other fields
        pass
    return {"cpu": cpu, "cpus": os.cpu_count()}


# The type of each field a record holds, checked whenever a record is read back: a record edited by hand
# (`"dev_ppl": "12.5 (approx)"`, `"status": "Finished"`) is refused by name and field, before any reader
# formats or sums it. Fields not named here, and None in any field but these two, are left as they are.
REQUIRED_FIELDS = ("run_id", "status")
NUMBER_FIELDS = (
    "schema_version", "seed", "steps", "params", "params_paper_scale", "target_tokens", "tokens_per_s",
    "wall_time_s", "train_time_s", "flops_estimate", "world_size", "stopped_at_step",
)  # fmt: skip
TEXT_FIELDS = (
    "run_id", "row", "group", "task", "sweep", "reason", "code_hash", "started", "finished", "device",
    "precision", "data_hash", "git",
)  # fmt: skip
MAPPING_FIELDS = (
    "config", "metrics", "files", "machine", "model_effective", "batch", "data", "versions", "code_files",
)  # fmt: skip
INTEGER_FIELDS = (
    "schema_version", "seed", "steps", "params", "params_paper_scale", "target_tokens", "stopped_at_step",
)  # fmt: skip


def record_problem(rec: Any) -> str | None:
    """What makes `rec` unusable as a result record (one phrase naming the field), or None."""
    if not isinstance(rec, dict):
        return f"a JSON {type(rec).__name__}, not an object"
    missing = [k for k in REQUIRED_FIELDS if k not in rec]
    if missing:
        return f"missing {', '.join(missing)}"
    if (version := rec.get("schema_version", SCHEMA_VERSION)) != SCHEMA_VERSION:  # never read as ours
        return schema_problem(version)
    if rec["status"] not in STATUSES:
        return f'"status": {json.dumps(rec["status"])} is not one of {", ".join(STATUSES)}'
    for key, value in rec.items():
        if key in MAPPING_FIELDS and value is not None and not isinstance(value, dict):
            return f'"{key}" is a {_json_type(value)}, not an object'
        if key in NUMBER_FIELDS and value is not None and not _is_number(value, key in INTEGER_FIELDS):
            return (
                f'"{key}": {json.dumps(value)} is not {"an integer" if key in INTEGER_FIELDS else "a number"}'
            )
        if (
            key in TEXT_FIELDS
            and (value is not None or key in REQUIRED_FIELDS)
            and not isinstance(value, str)
        ):
            return f'"{key}": {json.dumps(value)} is not a string'
    for key, value in (rec.get("metrics") or {}).items():
        text = key.endswith("_signature")
        if value is not None and not (isinstance(value, str) if text else _is_number(value, False)):
            return f'"metrics"."{key}": {json.dumps(value)} is not {"a string" if text else "a number"}'
    return None


def _is_number(value: Any, integer: bool) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int) if integer else isinstance(value, int | float)


def _json_type(value: Any) -> str:
    return {list: "list", str: "string", bool: "boolean"}.get(type(value), "number")


def read_record(path: str | os.PathLike) -> dict[str, Any]:
    path = Path(path)
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RecordError(f"{path}: unreadable result record ({e.__class__.__name__}: {e})") from None
    problem = record_problem(rec)
    if problem:
        raise RecordError(f"{path}: not a result record ({problem})")
    if isinstance(rec.get("config"), dict):  # read in the current layout; the file keeps what it was written
        rec["config"] = relocate(portable(migrate(rec["config"])), rec["run_id"])
    return rec


def find_records(results_dir: str | os.PathLike) -> tuple[list[dict[str, Any]], list[str]]:
    """Every record under results_dir; corrupted ones are reported, not fatal."""
    records, errors = [], []
    for p in sorted(Path(results_dir).rglob(RECORD_NAME)):
        if ".old-" in p.parent.name:  # a folder set aside by resume=false
            continue
        if "wandb" in p.relative_to(results_dir).parts[:-1]:  # the copy a W&B run holds of its record
            continue
        try:
            rec = read_record(p)
            rec["_path"] = str(p)
            records.append(rec)
        except RecordError as e:
            errors.append(str(e))
    return records, errors


def versions() -> dict[str, str]:
    import importlib.metadata as md
    import platform

    out = {"python": platform.python_version()}
    for pkg in ("torch", "pytorch-lightning", "hydra-core", "sacrebleu", "sentencepiece", "wandb", "ablate"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    return out
