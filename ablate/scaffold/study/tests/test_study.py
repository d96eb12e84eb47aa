"""The study's commands, run as its README gives them, from the study's folder in a new process: the
reference row and a row of the study's train at the tiny preset, and the report reads both."""

import os
import subprocess
import sys
from pathlib import Path

STUDY = Path(__file__).resolve().parents[1]


def ablate(*args: str, results: Path) -> str:
    cmd = [sys.executable, "-m", *args]
    env = dict(os.environ, ABLATE_RESULTS=str(results), WANDB_MODE="disabled")
    p = subprocess.run(cmd, cwd=STUDY, env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


def test_the_rows_train_and_the_report_reads_them(tmp_path):
    results = tmp_path / "results"
    preset = ["experiment=__STUDY__", "recipe=tiny", "scale=tiny", "logger=none"]
    out = ablate("ablate.run", "-m", *preset, "model=glob(*)", "seed=1", results=results)
    records = sorted(results.glob("*/*/record.json"))
    rows = {p.parent.parent.name for p in records}
    assert rows == {p.stem for p in (STUDY / "conf" / "model").glob("*.yaml")}, out
    table = ablate("ablate.report", "metrics", "--task", "__MODULE___task:CipherTask", "--results",
                   str(results), "--out", str(tmp_path / "metrics.md"), results=results)  # fmt: skip
    assert all(row in table for row in rows), table
