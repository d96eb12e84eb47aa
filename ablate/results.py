"""The result record (one JSON per run) and the run identity. The report reads records, never training code.

Identity: a hash of the resolved config without paths, logging or launcher settings, plus the seed. The run
folder and the W&B run id are named by it, so the same command finds its own run again: skip it when
finished, resume it when interrupted.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
RECORD_NAME = "record.json"
STATUSES = ("running", "finished", "failed")

# Keys that do not change what a run computes.
_NOT_IDENTITY = {
    "results_dir",
    "sweep_name",
    "resume",
    "logger",
    "experiment",
    "data.cache_dir",
    "data.num_workers",
    "trainer.progress_bar",
    "trainer.threads",
    "decode.batch_sentences",
    "train.max_minutes",
}


class RecordError(ValueError):
    pass


def identity_dict(cfg) -> dict[str, Any]:
    """The values that name a run: every config value that differs from the dataclass default, less the
    keys that do not change what a run computes. Only non-defaults count, so that adding a new option (with
    a default) to the config does not rename every existing run."""
    from ablate.config import RunConfig, flat_fields

    defaults = flat_fields(RunConfig())
    out = {}
    for key, value in flat_fields(cfg).items():
        if key in _NOT_IDENTITY or key.split(".")[0] in _NOT_IDENTITY:
            continue
        if isinstance(value, tuple):
            value = list(value)
        default = defaults.get(key)
        if isinstance(default, tuple):
            default = list(default)
        if value != default:
            out[key] = value
    return out


def run_id(cfg) -> str:
    """'<row>-<12 hex of the config hash>-s<seed>'."""
    blob = json.dumps(identity_dict(cfg), sort_keys=True, default=str)
    digest = hashlib.sha256(blob.encode()).hexdigest()[:12]
    return f"{cfg.model.name}-{digest}-s{cfg.seed}"


def run_dir(cfg) -> Path:
    return Path(cfg.results_dir) / cfg.model.name / run_id(cfg)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write to a temporary file in the same folder, fsync, then rename: readers see the old file or the
    whole new one, never a half-written one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n")


def _json_default(o: Any) -> Any:
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, Path):
        return str(o)
    if isinstance(o, tuple | set):
        return list(o)
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


def read_record(path: str | os.PathLike) -> dict[str, Any]:
    path = Path(path)
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RecordError(f"{path}: unreadable result record ({e.__class__.__name__}: {e})") from None
    if not isinstance(rec, dict) or rec.get("status") not in STATUSES or "run_id" not in rec:
        raise RecordError(f"{path}: not a result record (missing status or run_id)")
    return rec


def find_records(results_dir: str | os.PathLike) -> tuple[list[dict[str, Any]], list[str]]:
    """Every record under results_dir; corrupted ones are reported, not fatal."""
    records, errors = [], []
    for p in sorted(Path(results_dir).rglob(RECORD_NAME)):
        if ".old-" in p.parent.name:  # a folder set aside by resume=false
            continue
        try:
            rec = read_record(p)
            rec["_path"] = str(p)
            records.append(rec)
        except RecordError as e:
            errors.append(str(e))
    return records, errors


def git_revision(cwd: str | os.PathLike | None = None) -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=cwd or Path(__file__).parent,
            text=True,
            capture_output=True,
            timeout=5,
        )
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


# The files whose content decides what a run computes (numerics and data); orchestration, logging and
# the report are left out so that editing them does not mark every finished run stale.
CODE_FILES = (
    "model.py",
    "decode.py",
    "loss.py",
    "optim.py",
    "lit.py",
    "data/batching.py",
    "data/dataset.py",
    "data/builtin.py",
    "data/tokenizer.py",
)


def code_hash() -> str:
    """Hash of the result-deciding source files: a record whose code_hash differs from today's is stale."""
    h = hashlib.sha256()
    root = Path(__file__).parent
    for name in CODE_FILES:
        h.update(name.encode())
        h.update((root / name).read_bytes())
    return h.hexdigest()[:12]


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


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")
