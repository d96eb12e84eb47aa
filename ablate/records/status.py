"""A record's status, and the one place it changes: named transitions, each checked against the status
the record has on disk, so that no writer can finish a run twice or revive a finished one.

    start      (no record) | running | failed | interrupted | preempted | timed_out | cancelled -> running
    reject     (no record) -> failed           the config or the data refused before training
    finish     running -> finished
    fail       running -> failed               the code failed; `reason` says how
    interrupt  running -> interrupted          Ctrl-C, or a stop signal outside SLURM
    preempt    running -> preempted            SLURM requeues the job (preemption, `scontrol requeue`)
    time_out   running -> timed_out            the time limit: requeued, or not where it trained nothing
    cancel     running | preempted | timed_out -> cancelled      `scancel`, also of a job waiting to requeue

`start` from `running` is a run resumed after its process died (kill -9, a lost node): it holds the
run's lock, so no live process is running it. A record that says `running` with no live process holding
its lock is shown as interrupted (`shown`). Every other write of a record (facts added while it runs) is
`update`, which keeps the status.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ablate.records.folder import atomic_write_json, is_running, now

RUNNING, FINISHED, FAILED = "running", "finished", "failed"
INTERRUPTED, PREEMPTED, TIMED_OUT, CANCELLED = "interrupted", "preempted", "timed_out", "cancelled"
STATUSES = (RUNNING, FINISHED, FAILED, INTERRUPTED, PREEMPTED, TIMED_OUT, CANCELLED)
STOPPED = (INTERRUPTED, PREEMPTED, TIMED_OUT, CANCELLED)  # stopped at a checkpoint: the run resumes
WAITING = (PREEMPTED, TIMED_OUT)  # a SLURM job waiting to be requeued

TRANSITIONS: dict[str, tuple[frozenset, str]] = {
    "start": (frozenset({None, RUNNING, FAILED, *STOPPED}), RUNNING),
    "reject": (frozenset({None}), FAILED),
    "finish": (frozenset({RUNNING}), FINISHED),
    "fail": (frozenset({RUNNING}), FAILED),
    "interrupt": (frozenset({RUNNING}), INTERRUPTED),
    "preempt": (frozenset({RUNNING}), PREEMPTED),
    "time_out": (frozenset({RUNNING}), TIMED_OUT),
    "cancel": (frozenset({RUNNING, *WAITING}), CANCELLED),
}

SCHEMA_VERSION = 1  # of the records this version writes and reads; another is refused by every reader


def schema_problem(version: Any) -> str:
    return f'"schema_version": {json.dumps(version)} is not {SCHEMA_VERSION}, this version\'s'


CTRL_C = "interrupted by Ctrl-C; the same command resumes it from its last checkpoint"


class IllegalTransition(RuntimeError):
    pass


def on_disk(path: Path) -> str | None:
    """The status of the record at `path`, None where there is none; a record of another schema version
    raises its one line (no transition writes over it)."""
    try:
        rec = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    if (version := rec.get("schema_version", SCHEMA_VERSION)) != SCHEMA_VERSION:
        raise ValueError(f"{path}: not a result record ({schema_problem(version)})")
    return rec["status"]


def transition(path: Path, name: str, rec: dict[str, Any], reason: str | None = None, **fields) -> dict:
    """Write `rec` (with `fields`) at `path` moved by transition `name`; return what was written. Raises
    IllegalTransition where the record on disk is not in a state `name` leaves from."""
    sources, to = TRANSITIONS[name]
    was = on_disk(path)
    if was not in sources:
        raise IllegalTransition(f"{path}: {name} ({was or 'no record'} -> {to}) is not a transition")
    new = {**rec, **fields, "status": to, "reason": reason}
    if to == RUNNING:
        for key in ("finished", "traceback", "stopped_at_step"):
            new.pop(key, None)
    else:
        new.setdefault("finished", now())
    atomic_write_json(path, new)
    return new


def update(path: Path, rec: dict[str, Any]) -> None:
    """Write facts into a running record; its status stays what it is on disk."""
    was = on_disk(path)
    if was != RUNNING or rec["status"] != RUNNING:
        raise IllegalTransition(f"{path}: a record is updated only while running (it says {was})")
    atomic_write_json(path, rec)


def settle(path: Path, name: str, reason: str, **fields) -> dict | None:
    """`name` where the record at `path` is in a state it leaves from (a launcher learning how a job
    ended); a record in any other state already tells how its run ended, and is left as it is."""
    try:
        rec = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):  # no record yet, or one the user edited: left as it is
        return None
    if not isinstance(rec, dict) or rec.get("status") not in TRANSITIONS[name][0]:
        return None
    return transition(path, name, rec, reason, **fields)


def shown(rec: dict[str, Any], folder: Path | None) -> str:
    """The status a reader shows: a record left `running` by a process that died is interrupted."""
    status = rec["status"]
    if status == RUNNING and folder is not None and not is_running(folder):
        return INTERRUPTED
    return status
