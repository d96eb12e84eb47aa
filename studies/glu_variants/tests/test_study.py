"""The study's tiny form, run as its README gives it, from the study's folder in a new process: all eight
rows train on the built-in corpus at the tiny preset, and the report reads them beside Shazeer's Table 1
against ReLU, with the gated rows' parameters within 1% of ReLU's."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

STUDY = Path(__file__).resolve().parents[1]
ROWS = ["relu", "gelu", "swish", "glu", "bilinear", "geglu", "swiglu", "reglu"]


def ablate(*args: str, results: Path) -> str:
    env = dict(os.environ, ABLATE_RESULTS=str(results), WANDB_MODE="disabled")
    p = subprocess.run([sys.executable, "-m", *args], cwd=STUDY, env=env, capture_output=True, text=True,
                       timeout=1200)  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


def test_the_eight_rows_train_at_the_tiny_preset_and_the_report_reads_them_beside_the_paper(tmp_path):
    results = tmp_path / "results"
    tiny = ["experiment=glu_variants", "recipe=tiny", "scale=tiny", "data=builtin", "logger=none"]
    ablate("ablate.run", "-m", *tiny, f"results_dir={results}", "trainer.threads=1", results=results)
    assert sorted(p.parent.parent.name for p in results.glob("*/*/record.json")) == sorted(ROWS)
    out = ablate("ablate.report", "--results", str(results), "--out", str(tmp_path / "t.md"), results=results)
    summary = out.split("## Table")[0]
    for row in ROWS:
        assert re.search(rf"^\| {row} \|", summary, re.M), summary
    assert "Δ relu" in summary
    assert "GEGLU and SwiGLU give the best perplexities" in out  # the paper's claims, from study.yaml
    params = {
        p.parent.parent.name: json.loads(p.read_text())["params"] for p in results.glob("*/*/record.json")
    }
    for row in ROWS[3:]:  # the gated rows at 2/3 of d_ff: the parameters of ReLU's
        assert abs(params[row] / params["relu"] - 1) < 0.01, (row, params)
