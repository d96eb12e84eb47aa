"""Whether a record is current: decided each time a record is read, never written into it.

The rule: **a record is current when no commit since its revision changed code its task runs, other than
the commits listed in `.result-neutral-revs`; a record made from uncommitted code is current only while
that code is byte for byte the same.**

- The code a task runs is every file under `ablate/` except the orchestration packages (`NOT_RESULT`)
  and other tasks' own folders (`ablate.config.TASKS`). A commit's files are classed by the names they
  have now, following git's rename detection, so moving a file keeps its class.
- Each line of `.result-neutral-revs` (git's `.git-blame-ignore-revs` is the precedent) names a commit and
  the tasks whose results it leaves as they were. CI checks every line: a tiny training run at the commit
  and at its parent must give every number equal (tests/test_neutral_revs.py).
- Uncommitted changes to a task's code count as a change since every record.
- Where there is no git history (an installed copy), a record is current while its code hash is today's.
"""

from __future__ import annotations

import functools
import hashlib
import subprocess
from pathlib import Path
from typing import Any

from ablate.config import TASKS
from ablate.tasks import own_code

PACKAGE = Path(__file__).resolve().parents[1]
ROOT = PACKAGE.parent
NEUTRAL_REVS = ROOT / ".result-neutral-revs"

# Orchestration: where a run is run, what is written about it, the report, the commands that start runs.
# None of it decides a figure of a run (the config that does is in the record itself).
NOT_RESULT = (
    "ablate/__init__.py",
    "ablate/cluster/",
    "ablate/jobs/",
    "ablate/records/",
    "ablate/report/",
    "ablate/baseline.py",
    "ablate/evaluate.py",
    "ablate/prepare.py",
    "ablate/run.py",
)


def runs(task: str, path: str) -> bool:
    """Whether a run of `task` may run the file at `path` (relative to the repository)."""
    if not path.startswith("ablate/") or path.startswith(NOT_RESULT) or "__pycache__" in path:
        return False
    others = (p for name in TASKS if name != task for p in own_code(name))
    return not path.startswith(tuple(others))


@functools.cache  # once a process: the code a process runs is the code it loaded
def code_hash(task: str) -> str:
    """One hash of the bytes of every file a run of `task` may run, as they are now."""
    h = hashlib.sha256()
    for path in sorted(p for p in _package_files() if runs(task, p)):
        h.update(path.encode() + b"\0" + hashlib.sha256((ROOT / path).read_bytes()).digest())
    return h.hexdigest()[:12]


def _package_files() -> list[str]:
    return [p.relative_to(ROOT).as_posix() for p in PACKAGE.rglob("*") if p.is_file() and p.suffix != ".pyc"]


def facts(task: str) -> dict[str, Any]:
    """What a new record stores of its code: the revision, the task's files that differ from it, and the
    hash of the code as run."""
    rev = _git("rev-parse", "HEAD")
    return {
        "git": rev.strip() if rev else None,
        "uncommitted": uncommitted(task) if rev else [],
        "code_hash": code_hash(task),
    }


def uncommitted(task: str) -> list[str]:
    """The files of `task`'s code that differ from HEAD's (edited, added or removed)."""
    out = _git("status", "--porcelain", "--untracked-files=all", "--", "ablate") or ""
    paths = [line[3:].split(" -> ")[-1] for line in out.splitlines()]
    return sorted(p for p in paths if runs(task, p))


def why_stale(rec: dict[str, Any]) -> str | None:
    """Why `rec` is stale (one phrase naming what changed), or None where it is current."""
    task = rec.get("task") or "translation"
    if rec.get("code_hash") == code_hash(task):
        return None  # the same bytes
    if rec.get("uncommitted"):
        return f"made from uncommitted code ({', '.join(rec['uncommitted'])}), changed since"
    rev = rec.get("git")
    if not rev:
        return f"code {rec.get('code_hash')} != {code_hash(task)} (the record names no revision)"
    changes = _changes(rev, task)
    if changes is None:
        return f"code changed since (revision {rev[:10]} is not in this repository's history)"
    now = _uncommitted_now(task)
    if now:
        changes = [*changes, f"uncommitted change to {', '.join(now)}"]
    return f"code changed: {'; '.join(changes)}" if changes else None


@functools.cache
def _uncommitted_now(task: str) -> tuple[str, ...]:
    return tuple(uncommitted(task))


@functools.cache
def _changes(rev: str, task: str) -> list[str] | None:
    """The commits since `rev` that changed `task`'s code and are not listed as neutral for it, each as
    '<short sha> (<files>)'; None where `rev` is not in this repository's history."""
    if _git("merge-base", "--is-ancestor", rev, "HEAD") is None:
        return None
    log = _git("log", "-M", "--name-status", "--format=%x00%H", f"{rev}..HEAD")
    neutral = neutral_revs().get(task, set())
    now_name: dict[str, str] = {}  # a path's name at HEAD, learnt walking back through renames
    out = []
    for block in (log or "").split("\0")[1:]:
        sha, *lines = block.strip().splitlines()
        files = []
        for line in lines:
            kind, *paths = line.split("\t")
            if kind.startswith("R"):
                now_name[paths[0]] = now_name.get(paths[1], paths[1])
            files += [now_name.get(p, p) for p in paths]
        touched = sorted({f for f in files if runs(task, f)})
        if touched and sha not in neutral:
            out.append(f"{sha[:10]} ({', '.join(touched)})")
    return out


def neutral_revs(path: Path = NEUTRAL_REVS) -> dict[str, set[str]]:
    """task -> the commits listed as leaving its results unchanged. A line: '<sha> <task>[,<task>] # why'."""
    out: dict[str, set[str]] = {}
    if not path.is_file():
        return out
    for line in path.read_text().splitlines():
        words = line.split("#", 1)[0].split()
        if len(words) == 2:
            for task in words[1].split(","):
                out.setdefault(task, set()).add(words[0])
    return out


def _git(*args: str) -> str | None:
    """git's output in the repository, None where git is missing or says no."""
    try:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return done.stdout
