"""Failing sweep members, non-finite losses and concurrent writers (slow: each runs real jobs)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run(tmp, *args, env_extra=None, multirun=False):
    env = dict(os.environ, WANDB_MODE="offline", **(env_extra or {}))
    cmd = [
        sys.executable,
        "-m",
        "ablate.run",
        *(["-m"] if multirun else []),
        "scale=tiny",
        "recipe=tiny",
        "logger=none",
        "trainer.threads=1",
        f"results_dir={tmp}/results",
        f"data.cache_dir={tmp}/cache",
        *args,
    ]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def records(tmp) -> dict[str, dict]:
    out = {}
    for p in Path(tmp, "results").rglob("record.json"):
        rec = json.loads(p.read_text())
        out[rec["row"]] = rec
    return out


@pytest.mark.slow
def test_nan_loss_stops_with_the_step_and_the_sweep_goes_on(tmp_path):
    # Every job hits a NaN at step 5 -> each fails with its reason; the sweep itself carries on.
    p = run(tmp_path, "model=base,D1", multirun=True, env_extra={"ABLATE_FAULT_NAN_AT_STEP": "5"})
    recs = records(tmp_path)
    assert sorted(recs) == ["D1", "base"]
    for rec in recs.values():
        assert rec["status"] == "failed"
        assert "non-finite training loss at step 5" in rec["reason"]
        assert "dev_bleu" not in rec.get("metrics", {})  # never a finished record with NaN metrics
    assert p.stderr.count("non-finite training loss at step 5") == 2
    # Re-running the sweep without the fault runs only what is missing (here: both failed jobs).
    p2 = run(tmp_path, "model=base,D1", multirun=True)
    assert p2.returncode == 0, p2.stderr[-2000:]
    assert all(r["status"] == "finished" for r in records(tmp_path).values())
    p3 = run(tmp_path, "model=base,D1", multirun=True)  # nothing is started for a finished run
    assert "sweep of 2 runs: 2 already finished" in p3.stdout and "already finished:" not in p3.stdout


@pytest.mark.slow
def test_nan_loss_skip_mode_skips_the_batch(tmp_path):
    p = run(tmp_path, "train.on_nonfinite=skip", env_extra={"ABLATE_FAULT_NAN_AT_STEP": "5"})
    assert p.returncode == 0, p.stderr[-2000:]
    assert "non-finite loss, micro-batch skipped" in p.stdout
    rec = records(tmp_path)["base"]
    assert rec["status"] == "finished" and rec["steps"] == 20
    assert rec["metrics"]["dev_ppl"] < 1e6


@pytest.mark.slow
def test_impossible_config_fails_alone_in_a_sweep(tmp_path):
    # d_v = 32 cannot fit d_model 512 with 8 heads: that member fails with a one-line error naming the key,
    # its failure is recorded, and the other member finishes.
    p = run(tmp_path, "model.d_v=32,64", multirun=True)
    assert "error: model.n_heads * model.d_v = 8 * 32 = 256 does not fit model.d_model=512" in p.stderr
    recs = [json.loads(r.read_text()) for r in Path(tmp_path, "results").rglob("record.json")]
    by_dv = {r["config"]["model"]["d_v"]: r for r in recs}
    assert by_dv[64]["status"] == "finished"
    assert by_dv[32]["status"] == "failed" and "model.n_heads * model.d_v" in by_dv[32]["reason"]


@pytest.mark.slow
def test_two_sweeps_at_once_into_one_results_folder(tmp_path):
    """joblib with 2 workers, and a second identical sweep started at the same time: every run is trained
    once, every record is complete and readable, the shared vocabulary is built once; a sweep that left a
    run to the other exits 1 naming it as running."""
    env = dict(os.environ, WANDB_MODE="offline")
    cmd = [
        sys.executable,
        "-m",
        "ablate.run",
        "-m",
        "scale=tiny",
        "recipe=tiny",
        "logger=none",
        "trainer.threads=1",
        "hydra/launcher=joblib_cpu",
        "model=base,A1,B1",
        f"results_dir={tmp_path}/results",
        f"data.cache_dir={tmp_path}/cache",
    ]
    procs = [
        subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=900)[0] for p in procs]
    for p, out in zip(procs, outs):  # a run left to the other sweep did not finish in this one: it says so
        busy = out.count("being run by another process")
        assert p.returncode == (1 if busy else 0), out
        assert not busy or f"{busy} running (" in out.strip().splitlines()[-1], out
    recs = list(Path(tmp_path, "results").rglob("record.json"))
    assert len(recs) == 3
    assert all(json.loads(r.read_text())["status"] == "finished" for r in recs)
    assert len(list(Path(tmp_path, "cache").glob("spm/*/spm.model"))) == 1
    assert len(list(Path(tmp_path, "cache").glob("data/*/meta.json"))) == 1
    skipped = sum(map(_left_to_the_other, outs))
    assert skipped == 3  # each of the three runs was trained by exactly one of the two sweeps
    sweeps = list(Path(tmp_path, "results", ".hydra").glob("multirun-*"))
    assert len(sweeps) == 2  # started in the same second, yet two sweep folders


def _left_to_the_other(out: str) -> int:
    """Runs a sweep did not train: held by the other sweep, found finished by its job, or by its sweeper
    before any job started (counted in the closing line)."""
    import re

    ahead = re.search(r"sweep of \d+ runs?: .*?(\d+) already finished", out.strip().splitlines()[-1])
    return (
        out.count("being run by another process")
        + out.count("already finished:")
        + (int(ahead.group(1)) if ahead else 0)
    )
