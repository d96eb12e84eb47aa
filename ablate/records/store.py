"""The result record (one JSON per run) and the run identity. The report reads records, never training code.

Identity: a hash of the resolved config without paths, logging or launcher settings, plus the seed. The run
folder and the W&B run id are named by it, so the same command finds its own run again: skip it when
finished, resume it when interrupted.
"""

from __future__ import annotations

import ast
import contextlib
import fcntl
import functools
import hashlib
import json
import os
import re
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
RECORD_NAME = "record.json"
# running, finished; failed: the code failed (the reason says how); preempted, timed_out: stopped at a
# checkpoint by SLURM, the job waits to be requeued (ablate/cluster/slurm_job.py); cancelled: scancel.
STATUSES = ("running", "finished", "failed", "preempted", "timed_out", "cancelled")

# Keys that do not change what a run computes.
NOT_IDENTITY = {
    "results_dir",
    "sweep_name",
    "resume",
    "logger",
    "experiment",
    "recipe",  # a name: what the recipe sets (base, train, data, decode) is in the identity
    "data.cache_dir",
    "data.num_workers",
    "trainer.progress_bar",
    "trainer.threads",
    "trainer.device_pool",
    "train.max_minutes",
}


# Where a run's data files lie. Where the data source names the files by their content (data.fingerprint),
# their folder is not part of the run: the same files elsewhere (another machine, another checkout) are
# the same run, so committed runs are found finished wherever the data sits.
DATA_PATHS = (
    "data.root",
    "data.train_src",
    "data.train_tgt",
    "data.dev_src",
    "data.dev_tgt",
    "data.test_src",
    "data.test_tgt",
    "data.treebank_dir",
    "data.silver_trees",
)


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
        if key in NOT_IDENTITY or key.split(".")[0] in NOT_IDENTITY:
            continue
        if isinstance(value, tuple):
            value = list(value)
        default = defaults.get(key)
        if isinstance(default, tuple):
            default = list(default)
        if value != default:
            out[key] = value
    # The content of the data files a run reads, which the config names only by path: an edited training
    # or reference file must name a new run, not find the old one finished. Added only for sources that
    # read such files (files, multi30k, wmt14_en_de local files, wsj, wsj_semi): the built-in corpus is
    # generated from config values already here (and the downloaded WMT14 release is pinned by checksums),
    # so their run ids stay what they were. A fingerprint (ablate.data.fingerprint) is the sha256 of the
    # content, recomputed only when a file's size or mtime changed: `touch` alone renames nothing.
    from ablate.data.corpora import data_fingerprint

    fingerprint = data_fingerprint(cfg.data)
    if fingerprint is not None:
        out = {k: v for k, v in out.items() if k not in DATA_PATHS}
        out["data.fingerprint"] = fingerprint
    return out


def run_id(cfg) -> str:
    """'<row>-<12 hex of the config hash>-s<seed>'."""
    blob = json.dumps(identity_dict(cfg), sort_keys=True, default=str)
    digest = hashlib.sha256(blob.encode()).hexdigest()[:12]
    return f"{cfg.model.name}-{digest}-s{cfg.seed}"


def run_dir(cfg) -> Path:
    return Path(cfg.results_dir) / cfg.model.name / run_id(cfg)


@contextlib.contextmanager
def run_lock(folder: Path):
    """A non-blocking exclusive lock beside a run folder, held while a process runs it and released when
    that process ends, even by kill -9. Yields whether this process got it."""
    f = open(folder.parent / f".{folder.name}.lock", "w")
    try:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        f.close()


def is_running(folder: Path) -> bool:
    """Whether a live process holds the run's lock: a record that says `running` without one was left by a
    process that died (its run resumes when its command runs again)."""
    path = folder.parent / f".{folder.name}.lock"
    if not path.is_file():
        return False
    with open(path) as f:
        try:
            fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
    return False


def new_record(cfg, status: str = "running", **fields: Any) -> dict[str, Any]:
    """A run's record as it starts (status running) or as a run rejected before training starts (failed):
    the one place its fields are named. Training adds metrics, files and timings as it goes."""
    from dataclasses import asdict

    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": run_id(cfg),
        "row": cfg.model.name,
        "group": cfg.model.group,
        "seed": cfg.seed,
        "status": status,
        "reason": None,
        "task": cfg.task,
        "sweep": cfg.sweep_name,
        "config": asdict(cfg),
        "metrics": {},
        "files": {},
        "started": now(),
        "machine": machine(),
        "code_files": code_file_hashes(),
        **fields,
    }


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


_UMASK = os.umask(0o022)
os.umask(_UMASK)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write to a temporary file in the same folder, fsync, then rename: readers see the old file or the
    whole new one, never a half-written one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp makes it private (0600); the file gets the usual mode
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


# The type of each field a record holds, checked whenever a record is read back: a record edited by hand
# (`"dev_ppl": "12.5 (approx)"`, `"status": "Finished"`) is refused by name and field, before any reader
# formats or sums it. Fields not named here, and None in any field but these two, are left as they are.
REQUIRED_FIELDS = ("run_id", "status")
NUMBER_FIELDS = (
    "schema_version", "seed", "steps", "params", "params_paper_scale", "target_tokens", "tokens_per_s",
    "wall_time_s", "train_time_s", "flops_estimate", "world_size",
)  # fmt: skip
TEXT_FIELDS = (
    "run_id", "row", "group", "task", "sweep", "reason", "code_hash", "started", "finished", "device",
    "precision", "data_hash", "git",
)  # fmt: skip
MAPPING_FIELDS = (
    "config", "metrics", "files", "machine", "model_effective", "batch", "data", "versions", "code_files",
)  # fmt: skip
INTEGER_FIELDS = ("schema_version", "seed", "steps", "params", "params_paper_scale", "target_tokens")


def record_problem(rec: Any) -> str | None:
    """What makes `rec` unusable as a result record (one phrase naming the field), or None."""
    if not isinstance(rec, dict):
        return f"a JSON {type(rec).__name__}, not an object"
    missing = [k for k in REQUIRED_FIELDS if k not in rec]
    if missing:
        return f"missing {', '.join(missing)}"
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


def checkpoint_step(ckpt_dir: Path) -> int | None:
    """The step of a run's newest step checkpoint (`step0001200.ckpt`, ModelCheckpoint's names), or None."""
    steps = [
        int(m.group(1))
        for p in ckpt_dir.glob("step*.ckpt")
        if (m := re.fullmatch(r"step(\d+)\.ckpt", p.name))
    ]
    return max(steps) if steps else None


def read_record(path: str | os.PathLike) -> dict[str, Any]:
    path = Path(path)
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RecordError(f"{path}: unreadable result record ({e.__class__.__name__}: {e})") from None
    problem = record_problem(rec)
    if problem:
        raise RecordError(f"{path}: not a result record ({problem})")
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


# The package's files that do not decide what a run computes: orchestration, logging, the report. Every
# other file counts (a new file does too, unless it is added here), so that editing code that changes
# results marks earlier records stale and editing these does not.
NOT_RESULT_CODE = (
    "__init__.py",
    "devices.py",
    "faults.py",
    "launch.py",
    "plan.py",  # lists what a command would train; trains nothing
    "requeue.py",
    "report/",
    "results.py",
    "rows.py",
    "run.py",
    "slurm.py",
    "sweep.py",
    "tracking.py",
    "train.py",
)


def code_files() -> list[str]:
    root = Path(__file__).parent
    names = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.py"))
    return [
        n for n in names if not any(n == x or n.startswith(x) or n.endswith("/" + x) for x in NOT_RESULT_CODE)
    ]


def code_hash() -> str:
    """Hash of all the result-deciding source files: the code a record was made with, in one word."""
    h = hashlib.sha256()
    root = Path(__file__).parent
    for name in code_files():
        h.update(name.encode())
        h.update((root / name).read_bytes())
    return h.hexdigest()[:12]


# Result code that only one task runs (a translation run never imports the parser: tests/test_staleness.py
# checks it in a real run), so that editing the parser leaves translation records current. Inside a shared
# file, the lines that only parsing runs run are hashed apart from the rest of the file, as its part
# "<file>#parsing" (PARSING_SUFFIX): the config fields that only the parser reads (PARSING_FIELDS: the
# parsing code and the treebank's fingerprint read them), and the blocks under `if <cfg>.task ==
# "parsing"` (with or without `and ...`, without an else). A new parsing option leaves translation
# records current.
PARSING_FIELDS = ("treebank_dir", "treebank_builtin", "silver_trees", "constituent_pairs", "well_formed")
PARSING_FIELDS_FILE = "config.py"
PARSING_SUFFIX = "#parsing"
TASK_ONLY_CODE = {"parsing": ("parsing/",)}


# Top-level definitions inside result files that decide no result: a command line, a progress bar, the
# logger's settings (whose keys NOT_IDENTITY leaves out of a run's name as well). Their lines are left out
# of their file's hash, so that editing them leaves records current; every other line counts.
NOT_RESULT_DEFS = {
    "callbacks.py": ("StepProgress",),
    "config.py": ("LoggerConfig",),
    "evaluate.py": ("main", "_check_args"),
}


def result_source(name: str, root: Path | None = None) -> bytes:
    """The bytes of result file (or part) `name`, under `root`, the package by default: see _result_parts."""
    return _result_parts(name.partition("#")[0], root).get(name, b"")


def _result_parts(path: str, root: Path | None = None) -> dict[str, bytes]:
    """A result file's hashed parts, read and parsed once: the file less its NOT_RESULT_DEFS definitions
    (decorators included, found by Python's parser), less its parsing lines and less its blank lines; and,
    where it has parsing lines, "<file>#parsing" (PARSING_SUFFIX), those lines only."""
    data = ((root or Path(__file__).parent) / path).read_bytes()
    tree = ast.parse(data)
    lines = data.splitlines(keepends=True)
    parsing = _parsing_lines(tree, path)

    def text(keep: set[int]) -> bytes:
        return b"".join(line for i, line in enumerate(lines) if i in keep and line.strip())

    out = {path: text(set(range(len(lines))) - _def_lines(tree, NOT_RESULT_DEFS.get(path, ())) - parsing)}
    if parsing:
        out[path + PARSING_SUFFIX] = text(parsing)
    return out


def _def_lines(tree: ast.Module, names: tuple[str, ...]) -> set[int]:
    """0-based lines of the top-level definitions named `names`, decorators included."""
    out: set[int] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.name in names:
            start = min([node.lineno] + [d.lineno for d in node.decorator_list])
            out.update(range(start - 1, node.end_lineno or node.lineno))
    return out


def _parsing_lines(tree: ast.Module, path: str) -> set[int]:
    """0-based lines that only parsing runs run: the PARSING_FIELDS (`name: type = default` in a class of
    PARSING_FIELDS_FILE) and the `if <x>.task == "parsing"` blocks."""
    out: set[int] = set()
    for node in ast.walk(tree):
        field = isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) in PARSING_FIELDS
        if (field and path == PARSING_FIELDS_FILE) or (isinstance(node, ast.If) and _parsing_only(node)):
            out.update(range(node.lineno - 1, node.end_lineno or node.lineno))
    return out


def _parsing_only(node: ast.If) -> bool:
    """`if x.task == "parsing":` or `if x.task == "parsing" and ...:`, with no else."""
    test = (
        node.test.values[0]
        if isinstance(node.test, ast.BoolOp) and isinstance(node.test.op, ast.And)
        else node.test
    )
    return (
        not node.orelse
        and isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Attribute)
        and test.left.attr == "task"
        and len(test.ops) == 1
        and isinstance(test.ops[0], ast.Eq)
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value == "parsing"
    )


def _parts(name: str, root: Path | None = None) -> list[str]:
    """A result file's hashed parts: the file, and "<file>#parsing" where it has parsing lines."""
    return list(_result_parts(name, root))


def code_file_hashes() -> dict[str, str]:
    """Each result-deciding file's own hash (of its result_source), stored in every record (`code_files`):
    staleness is decided file by file, over the files the record's task runs."""
    return dict(_file_hashes())


@functools.cache
def _file_hashes() -> tuple[tuple[str, str], ...]:
    # once a process: the code a process runs is the code it loaded (a plan asks for every job it lists)
    parts = (item for name in code_files() for item in _result_parts(name).items())
    return tuple((part, hashlib.sha256(source).hexdigest()[:12]) for part, source in parts)


def task_runs(task: str, name: str) -> bool:
    """Whether a run of `task` runs result file (or part) `name`."""
    for only, prefixes in TASK_ONLY_CODE.items():
        if name.startswith(prefixes) or name.endswith("#" + only):
            return only == task
    return True


def stale_code(rec: dict[str, Any], today: dict[str, str], today_hash: str) -> str | None:
    """Why `rec` is stale by its code (one phrase), or None: a result file its task runs was added, edited
    or removed since. A record without per-file hashes compares the one hash of all result files."""
    files = rec.get("code_files")
    if not files:
        h = rec.get("code_hash")
        return f"code {h} != {today_hash}" if h and h != today_hash else None
    task = rec.get("task") or "translation"
    names = sorted(n for n in set(files) | set(today) if task_runs(task, n) and files.get(n) != today.get(n))
    return f"code changed: {', '.join(names)}" if names else None


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
