"""Killed and preempted runs resume where they were and end with exactly the metrics of an uninterrupted
run (data order, RNG, optimizer, scheduler and step restored)."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ARGS = [
    "scale=tiny",
    "recipe=tiny",
    "logger=none",
    "train.max_steps=40",
    "train.checkpoint_every=5",
    "train.val_every=15",
    "trainer.threads=1",
]


def cmd(tmp, *extra):
    return [
        sys.executable,
        "-m",
        "ablate.run",
        *ARGS,
        f"results_dir={tmp}/results",
        f"data.cache_dir={tmp}/cache",
        *extra,
    ]


def env():
    return dict(os.environ, WANDB_MODE="offline", PYTHONUNBUFFERED="1")


def record(tmp) -> dict:
    (path,) = list(Path(tmp, "results").rglob("record.json"))
    return json.loads(path.read_text())


def curve_step(tmp) -> int:
    paths = list(Path(tmp, "results").rglob("curves.jsonl"))
    if not paths:
        return 0
    rows = [json.loads(r) for r in paths[0].read_text().splitlines() if r.strip()]
    return max((r["step"] for r in rows), default=0)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ref")
    p = subprocess.run(cmd(tmp), cwd=ROOT, env=env(), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    return record(tmp)


def rerun(tmp) -> None:
    """The same command again, to completion."""
    q = subprocess.run(
        cmd(tmp, "train.checkpoint_every=10"),
        cwd=ROOT,
        env=env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert q.returncode == 0, q.stderr[-2000:]


def start_and_interrupt(tmp, sig, at_step: int) -> subprocess.Popen:
    p = subprocess.Popen(
        cmd(tmp, "train.checkpoint_every=10"),
        cwd=ROOT,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.time() + 240
    while curve_step(tmp) < at_step and p.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    p.send_signal(sig)
    p.output = p.communicate(timeout=120)[0]
    return p


# A step drawn anew each test run, the same in every pytest-xdist worker of one run (they collect alike).
DRAWN = random.Random(os.environ.get("PYTEST_XDIST_TESTRUNUID") or os.getpid()).randint(3, 35)


@pytest.mark.slow
@pytest.mark.parametrize("at_step", [DRAWN, 21])
def test_kill_9_then_same_command_gives_identical_metrics(tmp_path, reference, at_step):
    p = start_and_interrupt(tmp_path, signal.SIGKILL, at_step)
    assert p.returncode == -signal.SIGKILL
    assert record(tmp_path)["status"] == "running"  # never a "finished" record from a killed run
    rerun(tmp_path)
    rec = record(tmp_path)
    assert rec["status"] == "finished" and rec["steps"] == reference["steps"] == 40
    for key in ("dev_nll_sum", "dev_tokens", "dev_bleu"):
        assert rec["metrics"][key] == reference["metrics"][key], key
    steps = [
        json.loads(r)["step"] for r in next(Path(tmp_path).rglob("curves.jsonl")).read_text().splitlines()
    ]
    assert steps == sorted(steps)  # rows after the checkpoint were dropped, not duplicated
    rows = [json.loads(r) for r in next(Path(tmp_path).rglob("curves.jsonl")).read_text().splitlines()]
    # training time counts the killed process's training too (TrainClock), not only the resumed one's
    assert rec["train_time_s"] >= max(r.get("time_s", 0) for r in rows)


@pytest.mark.slow
def test_a_truncated_last_checkpoint_resumes_from_the_newest_readable_one(tmp_path, reference):
    """kill -9 can leave last.ckpt cut short (a copy, a disk full): the run goes on from the newest step
    checkpoint that loads, drops the curve rows after it, and still ends with the uninterrupted metrics."""
    p = start_and_interrupt(tmp_path, signal.SIGKILL, 25)
    assert p.returncode == -signal.SIGKILL
    ckpts = next(Path(tmp_path).rglob("checkpoints"))
    last = ckpts / "last.ckpt"
    last.write_bytes(last.read_bytes()[:1000])
    newest = max(int(c.stem[4:]) for c in ckpts.glob("step*.ckpt"))
    q = subprocess.run(cmd(tmp_path, "train.checkpoint_every=10"), cwd=ROOT, env=env(), capture_output=True,
                       text=True, timeout=300)  # fmt: skip
    assert q.returncode == 0, q.stderr[-2000:]
    assert (
        f"step{newest:07d}.ckpt (step {newest})" in q.stdout and "skipped unreadable checkpoint" in q.stdout
    )
    rec = record(tmp_path)
    assert (
        rec["status"] == "finished" and rec["metrics"]["dev_nll_sum"] == reference["metrics"]["dev_nll_sum"]
    )
    rows = [json.loads(r) for r in next(Path(tmp_path).rglob("curves.jsonl")).read_text().splitlines()]
    train_steps = [r["step"] for r in rows if "train_loss" in r or "lr" in r]
    assert train_steps == sorted(set(train_steps))  # no step written twice


@pytest.mark.slow
def test_sigterm_checkpoints_within_seconds_and_resumes_exactly(tmp_path, reference):
    t = time.time()
    p = start_and_interrupt(tmp_path, signal.SIGTERM, 13)
    assert p.returncode == 143, p.output[-3000:]
    assert time.time() - t < 200
    assert "stopped at step" in p.output
    rec = record(tmp_path)  # outside SLURM a stop signal interrupts the run, at the step it stopped at
    assert rec["status"] == "interrupted" and rec["stopped_at_step"] > 0 and "signal" in rec["reason"]
    import torch

    state = torch.load(next(Path(tmp_path).rglob("last.ckpt")), map_location="cpu", weights_only=True)
    assert state["global_step"] >= 13  # written at the signal, not at the last periodic checkpoint (10)
    rerun(tmp_path)
    rec = record(tmp_path)
    assert rec["status"] == "finished"
    assert rec["metrics"]["dev_nll_sum"] == reference["metrics"]["dev_nll_sum"]


def test_curve_time_goes_on_from_the_checkpoint():
    # curves.jsonl's time_s is training wall clock across restarts: the TrainClock callback's state (saved
    # in checkpoints by Lightning) carries the seconds trained so far into the resumed process.
    from ablate.training.callbacks import TrainClock

    before = TrainClock()
    before.t0 = time.perf_counter() - 100.0  # 100 s of training so far
    state = before.state_dict()
    assert 100.0 <= state["time_s"] < 110.0
    after = TrainClock()
    after.load_state_dict(state)
    after.on_train_start(None, None)
    assert 100.0 <= time.perf_counter() - after.t0 < 110.0
    fresh = TrainClock()
    fresh.on_train_start(None, None)
    assert time.perf_counter() - fresh.t0 < 5.0


def test_a_run_without_checkpoints_starts_its_curve_again(tmp_path):
    # a folder whose checkpoints are gone (killed before the first one, or copied without its *.ckpt)
    # trains from step 0: the old curve rows go, or the new ones would be written after them
    from ablate.training.fit import _resume_state

    curves = tmp_path / "curves.jsonl"
    curves.write_text('{"step": 250, "dev_ppl": 9.0}\n')
    assert _resume_state(tmp_path / "checkpoints", curves) is None
    assert not curves.exists()


def test_a_records_times_add_up_over_its_processes(tmp_path):
    """wall_time_s and train_time_s are sums over the run's processes, each kept in `processes` with how
    it ended; a process killed while its record was written counts its training up to the checkpoint the
    next one resumed from (that checkpoint's clock), so the sums hold the curve's clock and wall time less
    training time is never negative."""
    from ablate.training.callbacks import TrainClock
    from ablate.training.fit import ProcessTimes

    rec_path = tmp_path / "record.json"
    rec_path.write_text(
        json.dumps(
            {
                "status": "running",
                "started": "2026-01-01T00:00:00+0000",
                "processes": [
                    {"started": "a", "wall_time_s": 10.0, "train_time_s": 8.0, "ended": "interrupted"},
                    {"started": "b", "wall_time_s": 3.0, "train_time_s": 2.0},  # killed: no word of it
                ],
            }
        )
    )
    times = ProcessTimes(rec_path)
    assert times.earlier["started"] == "2026-01-01T00:00:00+0000"  # the run's first process's
    clock = times.clock = TrainClock()
    clock.load_state_dict({"time_s": 13.0})  # the checkpoint it resumes from: 13 s trained so far
    clock.on_train_start(None, None)
    record = times.into({}, "finished")
    first, killed, mine = record["processes"]
    assert first["train_time_s"] == 8.0 and killed["ended"] == "killed" and mine["ended"] == "finished"
    assert killed["train_time_s"] == 5.0 and killed["wall_time_s"] == 5.0  # 13 s less the first's 8 s
    assert record["train_time_s"] == sum(p["train_time_s"] for p in record["processes"]) >= 13.0
    assert record["wall_time_s"] == sum(p["wall_time_s"] for p in record["processes"])
    assert all(p["wall_time_s"] >= p["train_time_s"] for p in record["processes"])
