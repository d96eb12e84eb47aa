"""benchmarks/gpu_check.py's plumbing, on the CPU (--dry-run): every part it runs on a GPU ends with its
figures in the results file, so that on a lent GPU only the GPU is new."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_gpu_check_runs_dry_on_the_cpu(tmp_path):
    env = dict(os.environ, WANDB_MODE="offline")
    cmd = [sys.executable, "-m", "benchmarks.gpu_check", "--dry-run", "--out", str(tmp_path), "--k", "1", "2"]
    cmd += ["--parts", "tests", "train", "learn", "sweep", "speed", "k"]
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads((tmp_path / "gpu_check.json").read_text())
    assert r["dry_run"] and r["tests"]["exit"] == 0
    assert r["train"]["exit"] == 0 and r["train"]["steps"] == 20 and r["train"]["dev_ppl"] > 1
    learn = r["learn"]
    assert learn["exit"] == 0 and learn["row"] == "base" and learn["dev_ppl"] > 1
    # beside it, every finished CPU seed of the same row in the Multi30k results, read from their records
    finished = [
        f.parent.name
        for f in (ROOT / "reports/table3_multi30k/runs/base").glob("*/record.json")
        if json.loads(f.read_text())["status"] == "finished"
    ]
    assert sorted(learn["cpu_seeds"]) == sorted(finished) and len(finished) >= 3
    assert all(v["steps"] == 7750 for v in learn["cpu_seeds"].values())
    assert r["sweep"]["exit"] == 0
    assert {row: v[0] for row, v in r["sweep"]["rows"].items()} == dict.fromkeys(
        ["A1", "A2", "A3", "A4"], "finished"
    )
    assert all(v[2] == [0] for v in r["sweep"]["rows"].values())  # the made-up device, shared by two jobs
    assert "skipped" in r["speed"]
    assert r["k"]["k=1"]["exit"] == r["k"]["k=2"]["exit"] == 0
    rows = ["A1", "A2", "A3", "A4", "B1", "B2", "C6", "C7"]
    assert r["k"]["same_as_k1"] == {"k=2": dict.fromkeys(rows, True)}


@pytest.mark.slow
def test_a_budget_ends_a_sweep_and_its_workers_and_counts_the_rows_that_finished(tmp_path):
    env = dict(os.environ, WANDB_MODE="offline")
    cmd = [sys.executable, "-m", "benchmarks.gpu_check", "--dry-run", "--out", str(tmp_path), "--parts", "k"]
    cmd += ["--k", "1", "--budget", "15"]
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-3000:]
    k1 = json.loads((tmp_path / "gpu_check.json").read_text())["k"]["k=1"]
    # the budget's timeout ended it (124) before the eight tiny rows were done; no wall-clock bound, so that
    # a busy machine cannot fail it
    assert k1["exit"] == 124 and k1["rows_finished"] == len(k1["row_train_wall_s"]) < 8
    assert k1["rows_per_min"] == k1["rows_finished"] / (k1["wall_s"] / 60)
    left = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True).stdout
    assert not left, f"a worker outlived the budget: {left}"
