"""A run's folder: files written whole or not at all, the lock of the process that runs it, its newest
checkpoint. Nothing here knows what a record holds."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any


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


def step_checkpoints(ckpt_dir: Path) -> list[Path]:
    """A run's step checkpoints (`step0001200.ckpt`, ModelCheckpoint's names), oldest first."""
    return sorted((p for p in ckpt_dir.glob("step*.ckpt") if _STEP.fullmatch(p.name)), key=step_of)


def step_of(path: Path) -> int:
    """The step of a step checkpoint, from its name."""
    return int(_STEP.fullmatch(path.name).group(1))


def newest_step(ckpt_dir: Path) -> int | None:
    """The step of a run's newest step checkpoint, or None."""
    found = step_checkpoints(ckpt_dir)
    return step_of(found[-1]) if found else None


_STEP = re.compile(r"step(\d+)\.ckpt")


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")
