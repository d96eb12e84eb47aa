"""Evaluations after training, each a fact of its own: kept under its protocol beside the record, never
over it (as MLflow and W&B keep every logged value, and fairseq-generate writes its scores to its own
output, not into the checkpoint).

A protocol is what decides an evaluation's figures beyond the run: the split, the checkpoints averaged
(0: last.ckpt), the step it stopped at (--until-step), the steps of the checkpoints it read, and the
other runs it was searched with as an ensemble (--ensemble). Each evaluation is one file,
`evaluations/<tag>.json`, written whole by the command that made it, and its files (hypotheses, a task's
trees) in a folder of the same name, `evaluations/<tag>/`: never the run's own files (its dev.hyp.txt is
its training run's), never another evaluation's. Another evaluation under the same protocol takes the
next free name (`<tag>-2`), and readers show the newest of each protocol; an evaluation stopped before its
record was written leaves its name to the next one. A run folder's `evaluations.json` (one mapping for
every split, written by earlier versions) is read as it is: its protocol is in it
(`<split>_averaged_checkpoints`, its hypotheses' file names), and nothing rewrites it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import re
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ablate.records.status import FINISHED, SCHEMA_VERSION
from ablate.records.store import RecordError, record_problem

FOLDER = "evaluations"
MERGED = "evaluations.json"  # the older form: read as it is, never written


@dataclass(frozen=True)
class Protocol:
    split: str
    average: int  # checkpoints averaged: 0 reads last.ckpt
    until_step: int | None = None  # only checkpoints up to this step (a point of a curve)
    steps: tuple[int, ...] | None = field(default=None, compare=False)  # None: the file did not say
    # the other runs searched with this one as an ensemble (their run ids), each under the same averaging
    members: tuple[str, ...] = ()

    @property
    def tag(self) -> str:
        """The name its files share: `test`, `test.avg5`, `test.step400.avg1`; an ensemble's adds the count
        of its models and a digest of its members' ids (`test.avg5.ens3-1a2b3c4d`)."""
        if self.until_step is not None:
            tag = f"{self.split}.step{self.until_step}.avg{self.average}"
        else:
            tag = f"{self.split}.avg{self.average}" if self.average else self.split
        if self.members:
            digest = hashlib.sha256(",".join(self.members).encode()).hexdigest()[:8]
            tag += f".ens{len(self.members) + 1}-{digest}"
        return tag

    def describe(self) -> str:
        """One phrase a table's note can carry: what the figure is of."""
        what = f"the mean of the last {self.average} checkpoints" if self.average else "last.ckpt"
        if self.until_step is not None:
            what += f" up to step {self.until_step:,}"
        if self.steps:
            first, last = self.steps[0], self.steps[-1]
            what += f" (step {last:,})" if first == last else f" (steps {first:,}-{last:,})"
        if self.members:
            what += f", an ensemble with {', '.join(self.members)} (each its own {what.split(' (')[0]})"
        return f"{self.split} split, {what}"

    def to_json(self) -> dict[str, Any]:
        return {"split": self.split, "average": self.average, "until_step": self.until_step,
                "steps": None if self.steps is None else list(self.steps),
                **({"members": list(self.members)} if self.members else {})}  # fmt: skip


@dataclass(frozen=True)
class Evaluation:
    protocol: Protocol
    metrics: dict[str, Any]  # split-prefixed, as `ablate.evaluate` prints them: test_bleu, test_f1, ...
    files: dict[str, str]
    path: Path  # the file that holds it
    made: str = ""  # when (ISO time); empty in the older form
    by_run: bool = False  # made by the training run itself (train.average_last): one of its own figures


def write(
    run_dir: Path,
    run_id: str,
    protocol: Protocol,
    metrics: dict,
    files: dict[str, str] | None = None,
    by_run: bool = False,
    texts: dict[str, tuple[str, str]] | None = None,
) -> Path:
    """Keep one evaluation under the next free name for its protocol: its files first, in its own folder
    (`texts`: key -> (suffix, text), each written as `<tag><suffix>`), then its record, written whole
    (`<name>.json`, which readers list), naming them with `files` (key -> a file the caller wrote, from
    the run folder). Two evaluations never take one name, even written at once."""
    from ablate.records.folder import atomic_write_json, atomic_write_text, now

    folder = Path(run_dir) / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    with _claim(folder, protocol.tag) as name:
        files = dict(files or {})
        for key, (suffix, text) in (texts or {}).items():
            atomic_write_text(folder / name / f"{protocol.tag}{suffix}", text)
            files[key] = f"{FOLDER}/{name}/{protocol.tag}{suffix}"  # as a record's: from the run folder
        fact = {
            "schema_version": SCHEMA_VERSION,
            "run_id": run_id,
            "protocol": protocol.to_json(),
            "metrics": metrics,
            "files": files,
            "made": now(),
            "by": "ablate.run" if by_run else "ablate.evaluate",
            "argv": sys.argv[1:],
        }
        atomic_write_json(folder / f"{name}.json", fact)
        return folder / f"{name}.json"


WRITING = ".writing"  # in an evaluation's folder while its writer holds it (flock): gone once it is kept


@contextlib.contextmanager
def _claim(folder: Path, tag: str) -> Iterator[str]:
    """The first name of `tag` (`<tag>`, `<tag>-2`, ...) with no kept evaluation and no live writer: its
    folder made (os.mkdir makes one folder once) or, where a stopped writer left it, taken over (its lock
    is free); held under a lock while the evaluation is written; emptied and freed if writing fails."""
    for n in range(1, 10_000):
        name = tag if n == 1 else f"{tag}-{n}"
        if (folder / f"{name}.json").exists():
            continue
        own = folder / name
        try:
            own.mkdir()
        except FileExistsError:
            if not (own / WRITING).is_file():  # its writer is between mkdir and its lock, or it is kept
                continue
        lock = open(own / WRITING, "a")  # noqa: SIM115 - held across the yield
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # a live writer holds it
            lock.close()
            continue
        if (folder / f"{name}.json").exists():  # kept meanwhile by the writer whose lock was just freed
            lock.close()
            continue
        for old in own.iterdir():  # a stopped writer's files
            if old.name != WRITING:
                old.unlink() if old.is_file() else shutil.rmtree(old)
        try:
            yield name
        except BaseException:
            shutil.rmtree(own, ignore_errors=True)
            raise
        finally:
            (own / WRITING).unlink(missing_ok=True)
            lock.close()
        return
    raise OSError(f"{folder}: 10,000 evaluations under protocol {tag}")


def read(run_dir: Path, run_id: str) -> list[Evaluation]:
    """Every evaluation of a run, oldest first; a file that cannot be one is refused by name
    (RecordError)."""
    run_dir = Path(run_dir)
    out = _read_merged(run_dir / MERGED, run_id) if (run_dir / MERGED).is_file() else []
    folder = run_dir / FOLDER
    if folder.is_dir():
        facts = [_read_one(p, run_id) for p in folder.glob("*.json") if not p.name.startswith(".")]
        out += sorted(facts, key=lambda e: (e.made, _index(e.path)))
    return out


def newest(evaluations: list[Evaluation]) -> dict[Protocol, Evaluation]:
    """The newest evaluation of each protocol (split, checkpoints averaged, until step)."""
    return {e.protocol: e for e in evaluations}


def _index(path: Path) -> int:
    m = re.search(r"-(\d+)$", path.stem)
    return int(m.group(1)) if m else 1


def _read_one(path: Path, run_id: str) -> Evaluation:
    obj = _load(path)
    try:
        p = obj["protocol"]
        protocol = Protocol(
            str(p["split"]),
            int(p["average"]),
            None if p.get("until_step") is None else int(p["until_step"]),
            None if p.get("steps") is None else tuple(int(s) for s in p["steps"]),
            tuple(str(m) for m in p.get("members") or ()),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise RecordError(f"{path}: not an evaluation (its protocol: {e.__class__.__name__}: {e})") from None
    _check(path, obj, run_id)
    return Evaluation(
        protocol,
        obj.get("metrics") or {},
        obj.get("files") or {},
        path,
        str(obj.get("made", "")),
        obj.get("by") == "ablate.run",
    )


def _read_merged(path: Path, run_id: str) -> list[Evaluation]:
    """The older form: one mapping of every split's figures; each split's protocol read from its
    `<split>_averaged_checkpoints` and its hypotheses' file name (`test.avg5.hyp.txt`; `test.hyp.txt`
    for last.ckpt)."""
    obj = _load(path)
    _check(path, obj, run_id)
    metrics, files = obj.get("metrics") or {}, obj.get("files") or {}
    out = []
    for key in sorted(k for k in metrics if k.endswith("_averaged_checkpoints")):
        split = key.removesuffix("_averaged_checkpoints")
        hyp = str(files.get(f"{split}_hyp", ""))
        average = int(metrics[key]) if f"{split}.avg" in hyp else 0
        prefix = f"{split}_"
        out.append(
            Evaluation(
                Protocol(split, average),
                {k: v for k, v in metrics.items() if k.startswith(prefix)},
                {k: v for k, v in files.items() if k.startswith(prefix)},
                path,
            )
        )
    return out


def _load(path: Path) -> dict[str, Any]:
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RecordError(f"{path}: unreadable evaluation ({e.__class__.__name__}: {e})") from None
    if not isinstance(obj, dict):
        raise RecordError(f"{path}: not an evaluation (a JSON {type(obj).__name__}, not an object)")
    return obj


def _check(path: Path, obj: dict[str, Any], run_id: str) -> None:
    """Its fields typed as a record's are (store.record_problem), its schema this version's, its run this
    folder's."""
    typed = {k: obj[k] for k in ("schema_version", "metrics", "files") if k in obj}
    fields = {"run_id": run_id, "status": FINISHED, **typed}
    if problem := record_problem(fields):
        raise RecordError(f"{path}: not an evaluation of a run ({problem})")
    if obj.get("run_id", run_id) != run_id:
        raise RecordError(f"{path}: an evaluation of run {obj['run_id']}, not of {run_id}")
