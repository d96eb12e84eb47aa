"""Multi-device jobs inside a Hydra multirun: each job its own process group, each recorded once, and a
failing rank fails only its own job (issue: ranks of different jobs must never pair up)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def multirun(tmp_path, *overrides, env_extra=None):
    env = dict(os.environ, WANDB_MODE="offline", **(env_extra or {}))
    cmd = [
        sys.executable,
        "-m",
        "ablate.run",
        "-m",
        "scale=tiny",
        "recipe=tiny",
        "logger=none",
        "trainer.accelerator=cpu",
        "trainer.devices=2",
        "train.max_tokens=512",  # 2 devices x 512 = train.batch_tokens (1,024): the step holds what it says
        f"results_dir={tmp_path}/results",
        f"data.cache_dir={tmp_path}/cache",
        *overrides,
    ]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def records(tmp_path):
    out = {}
    for p in (tmp_path / "results").rglob("record.json"):
        rec = json.loads(p.read_text())
        assert rec["run_id"] not in out, "a job was recorded twice"
        out[rec["run_id"]] = rec
    return out


@pytest.mark.slow
def test_two_jobs_two_processes_each(tmp_path):
    p = multirun(tmp_path, "model=base,A1")
    assert p.returncode == 0, p.stderr[-3000:]
    recs = records(tmp_path)
    assert sorted(r["row"] for r in recs.values()) == ["A1", "base"]
    for r in recs.values():
        assert r["status"] == "finished" and r["world_size"] == 2
        # 2 devices x 1 micro-batch of 512 each: global batch_tokens 1024 -> accumulate 1
        assert r["steps"] == 20 and r["batch"] == {"devices": 2, "accumulate": 1, "max_tokens_per_step": 1024}
    assert p.stdout.count("worker processes") == 2


@pytest.mark.slow
def test_a_failing_rank_fails_its_job_and_the_next_job_runs(tmp_path):
    # Rank 1 of every job raises at start-up: both jobs must fail cleanly (no hang, no pairing).
    p = multirun(tmp_path, "model=base,A1", env_extra={"ABLATE_FAULT_RANK": "1"})
    recs = records(tmp_path)
    assert sorted(r["row"] for r in recs.values()) == ["A1", "base"]
    assert all(r["status"] == "failed" and "rank 1 exited" in r["reason"] for r in recs.values())
    assert "rank 1 exited" in p.stderr
    # The same sweep without the fault: both jobs now run and finish (failed ones are re-run).
    p2 = multirun(tmp_path, "model=base,A1")
    assert p2.returncode == 0, p2.stderr[-3000:]
    assert all(r["status"] == "finished" for r in records(tmp_path).values())
