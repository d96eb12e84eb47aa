"""Ctrl-C in the middle of a sweep: one line, exit status 130, the interrupted runs' records say so (the
report shows them interrupted), and the same command resumes them to the end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from terminal import AS_TYPED

from ablate.records.status import CTRL_C as INTERRUPTED

ROOT = Path(__file__).resolve().parents[1]


def _sweep(tmp_path: Path, launcher: str, **env_extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, WANDB_MODE="offline", PYTHONUNBUFFERED="1", **env_extra)
    cmd = [
        sys.executable, "-m", "ablate.run", "-m", "model=base,A1", "recipe=tiny", "scale=tiny", "trainer=cpu",
        "trainer.threads=1", "trainer.progress_bar=false", "logger=none", f"hydra/launcher={launcher}",
        "train.checkpoint_every=2",
        f"results_dir={tmp_path}/results", f"data.cache_dir={tmp_path}/cache",
    ]  # fmt: skip
    # its own session: the injected Ctrl-C reaches this command's processes only, as a terminal's would
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, **AS_TYPED)


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["basic", "joblib_cpu"])
def test_ctrl_c_mid_sweep_is_one_line_and_the_same_command_resumes(tmp_path, launcher):
    p = _sweep(tmp_path, launcher, ABLATE_FAULT_SIGINT_AT_STEP="5")
    assert p.returncode == 130, p.stderr[-3000:]
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    assert p.stderr.strip().splitlines()[-1] == f"[ablate] stopped: {INTERRUPTED}"
    records = [json.loads(r.read_text()) for r in (tmp_path / "results").rglob("record.json")]
    # `interrupted`, never failed; a joblib worker stopped by its parent before its own handler ran says
    # `running` with no reason (the report: interrupted, its process gone)
    said = [(r["status"], r["reason"]) for r in records]
    assert said and all(s in [("interrupted", INTERRUPTED), ("running", None)] for s in said), said
    assert ("interrupted", INTERRUPTED) in said
    assert all(r.get("stopped_at_step") is not None for r in records if r["status"] == "interrupted")
    p = _sweep(tmp_path, launcher)
    assert p.returncode == 0, p.stderr[-3000:]
    records = [json.loads(r.read_text()) for r in (tmp_path / "results").rglob("record.json")]
    assert sorted(r["row"] for r in records) == ["A1", "base"]
    assert all(r["status"] == "finished" and r["steps"] == 20 for r in records)
    assert "resuming from" in p.stdout  # a run the Ctrl-C stopped went on from its checkpoint


@pytest.mark.slow
@pytest.mark.parametrize("at_step", [4, 10])  # between dev evaluations, and on one (train.val_every=5)
def test_ctrl_c_loses_no_curve_point(tmp_path, at_step):
    """Ctrl-C lands before the step's checkpoint: the run resumes from the one before and redoes the step
    and its dev evaluation, so its curve equals an uninterrupted run's, point for point."""

    def run(folder: str, **env_extra: str) -> list[dict]:
        env = dict(os.environ, WANDB_MODE="offline", **env_extra)
        cmd = [
            sys.executable, "-m", "ablate.run", "recipe=tiny", "scale=tiny", "trainer=cpu",
            "trainer.threads=1", "trainer.progress_bar=false", "logger=none", "train.checkpoint_every=2",
            "train.val_every=5",
            f"results_dir={tmp_path}/{folder}", f"data.cache_dir={tmp_path}/cache",
        ]  # fmt: skip
        p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, **AS_TYPED)
        assert p.returncode == (130 if env_extra else 0), p.stderr[-2000:]
        if env_extra:
            return []
        (curves,) = (tmp_path / folder).rglob("curves.jsonl")
        rows = [json.loads(line) for line in curves.read_text().splitlines()]
        return [{k: v for k, v in r.items() if k != "time_s"} for r in rows]  # the clock differs

    run("a", ABLATE_FAULT_SIGINT_AT_STEP=str(at_step))
    interrupted = run("a")
    whole = run("b")
    assert [r["step"] for r in whole if "dev_ppl" in r] == [5, 10, 15, 20, 20]  # then the final evaluation
    assert interrupted == whole
