"""A stop anywhere is invisible in the result: a run stopped in each phase (a training step, a checkpoint
write, a dev pass, the final decode, its own test evaluation) by each kind of stop (Ctrl-C, a stop signal,
kill -9, an exception in the code running then, fixed before the next start), then started again by the
same command, ends with the files of a run nothing stopped: its curve line for line (clock readings
aside), its dev files, its checkpoints' weights, its evaluations and its record (times and the history of
its processes aside). The whole family is enumerated (ablate.control.faults.PHASES x HOWS), each case a few
seconds on the tiny preset; one representative runs in the fast suite, the others under the slow marker."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from ablate.control.faults import HOWS, PHASES, STOP_ENV

ROOT = Path(__file__).resolve().parents[1]
# dev passes at 4, 8, 12 (8 decoded), checkpoints at 4, 8, 12, the last 2 averaged for the test split
ARGS = [
    "scale=tiny", "recipe=tiny", "logger=none", "trainer.threads=1", "trainer.progress_bar=false",
    "train.max_steps=12", "train.val_every=4", "train.decode_every=2", "train.checkpoint_every=4",
    "train.average_last=2",
]  # fmt: skip
# where each phase is stopped: step 6 lies between two checkpoints (the resumed run trains 5-6 again);
# the checkpoint and dev pass of step 8 come after its step, so the resumed run starts at 8
AT = {"step": 6, "checkpoint": 8, "dev": 8, "final": 12, "evaluation": 12}
EXIT = {"SIGINT": 130, "SIGTERM": 143, "SIGKILL": -signal.SIGKILL, "raise": 1}
FAST = {("dev", "SIGINT")}  # a dev pass stopped at a checkpoint's step: the case that lost its dev point
CASES = [
    pytest.param(phase, how, marks=() if (phase, how) in FAST else pytest.mark.slow, id=f"{phase}-{how}")
    for phase in PHASES
    for how in HOWS
]
# what differs between two runs of the same config by nature: the clock
CLOCK = ("time_s",)
RECORD_TIMES = ("started", "finished", "wall_time_s", "train_time_s", "tokens_per_s", "processes")


def run(where: Path, *extra: str, **env_extra: str) -> subprocess.CompletedProcess:
    """The command in `where` (ARGS, then `extra`), its results and data under names relative to it: two
    runs' records say the same paths."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, WANDB_MODE="offline", PYTHONUNBUFFERED="1", PYTHONPATH=path, **env_extra)
    if not env_extra:
        env.pop(STOP_ENV, None)
    cmd = [sys.executable, "-m", "ablate.run", *ARGS, *extra, "results_dir=results", "data.cache_dir=cache"]
    return subprocess.run(
        cmd, cwd=where, env=env, capture_output=True, text=True, timeout=300, start_new_session=True
    )


def run_dir(where: Path) -> Path:
    (record,) = (where / "results").rglob("record.json")
    return record.parent


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("whole")
    p = run(tmp)
    assert p.returncode == 0, p.stderr[-3000:]
    return run_dir(tmp)


def what_it_left(folder: Path) -> dict:
    """Every file of a run folder as the comparison reads it."""
    curves = [json.loads(r) for r in (folder / "curves.jsonl").read_text().splitlines()]
    record = json.loads((folder / "record.json").read_text())
    with np.load(folder / "dev_sentences.npz") as z:
        sentences = {k: z[k].tolist() for k in z.files}
    checkpoints = {
        p.name: torch.load(p, map_location="cpu", weights_only=True)["state_dict"]
        for p in sorted((folder / "checkpoints").iterdir())
    }
    evaluations = {}
    for p in sorted((folder / "evaluations").rglob("*")):
        if p.is_file():
            text = p.read_text()
            if p.suffix == ".json" and p.parent.name == "evaluations":
                text = {k: v for k, v in json.loads(text).items() if k != "made"}
            evaluations[str(p.relative_to(folder))] = text
    return {
        "curves": [{k: v for k, v in r.items() if k not in CLOCK} for r in curves],
        "record": {k: v for k, v in record.items() if k not in RECORD_TIMES},
        "dev.hyp.txt": (folder / "dev.hyp.txt").read_text(),
        "dev_sentences": sentences,
        "checkpoints": checkpoints,
        "evaluations": evaluations,
        "files": sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()),
    }


def assert_same(a: dict, b: dict) -> None:
    for key in ("curves", "record", "dev.hyp.txt", "dev_sentences", "evaluations", "files"):
        assert a[key] == b[key], key
    assert a["checkpoints"].keys() == b["checkpoints"].keys()
    for name, weights in a["checkpoints"].items():
        theirs = b["checkpoints"][name]
        assert weights.keys() == theirs.keys() and all(torch.equal(weights[k], theirs[k]) for k in weights), (
            name
        )


@pytest.mark.parametrize(("phase", "how"), CASES)
def test_a_run_stopped_in_any_phase_resumes_to_the_uninterrupted_runs_files(
    tmp_path, uninterrupted, phase, how
):
    stopped = run(tmp_path, **{STOP_ENV: f"{phase}@{AT[phase]}:{how}"})
    assert "injected fault" in stopped.stdout, stopped.stdout[-2000:] + stopped.stderr[-2000:]
    # a stop signal in the run's own evaluation, after training: the signal's default action, as a kill's
    ends = -signal.SIGTERM if (phase, how) == ("evaluation", "SIGTERM") else EXIT[how]
    assert stopped.returncode == ends, stopped.stderr[-3000:]
    assert "Traceback" not in stopped.stderr, stopped.stderr[-3000:]
    if ends in (EXIT["SIGINT"], EXIT["SIGTERM"]):  # the step it resumes from, not one it trains again
        said = json.loads((run_dir(tmp_path) / "record.json").read_text())
        last = torch.load(
            run_dir(tmp_path) / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True
        )
        assert said["status"] == "interrupted" and said["stopped_at_step"] == last["global_step"]
    again = run(tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    folder = run_dir(tmp_path)
    assert_same(what_it_left(uninterrupted), what_it_left(folder))
    record = json.loads((folder / "record.json").read_text())
    processes = record["processes"]
    assert [p.get("ended") for p in processes][-1] == "finished"
    assert len(processes) == 2
    # the record's times are its processes' sums, and the wall time holds the training time
    assert record["wall_time_s"] == pytest.approx(sum(p["wall_time_s"] for p in processes))
    assert record["train_time_s"] == pytest.approx(sum(p["train_time_s"] for p in processes))
    assert all(p["wall_time_s"] >= p["train_time_s"] >= 0 for p in processes)
