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
    cmd += ["--parts", "tests", "train", "sweep", "speed", "k"]
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads((tmp_path / "gpu_check.json").read_text())
    assert r["dry_run"] and r["tests"]["exit"] == 0
    assert r["train"]["exit"] == 0 and r["train"]["steps"] == 20 and r["train"]["dev_ppl"] > 1
    assert r["sweep"]["exit"] == 0
    assert {row: v[0] for row, v in r["sweep"]["rows"].items()} == dict.fromkeys(
        ["A1", "A2", "A3", "A4"], "finished"
    )
    assert all(v[2] == [0] for v in r["sweep"]["rows"].values())  # the made-up device, shared by two jobs
    assert "skipped" in r["speed"]
    assert r["k"]["k=1"]["exit"] == r["k"]["k=2"]["exit"] == 0 and r["k"]["same_as_k1"] == {"k=2": True}
