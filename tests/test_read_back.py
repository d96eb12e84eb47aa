"""Every file the project reads back (result records, curves) edited by hand or cut short: the reader names
the file and the field, leaves that one out, and builds the rest."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_report_table3 import ARGS, TODAY, make_fixture

from ablate.records import staleness, store
from ablate.report import collect as collect_mod
from ablate.report.__main__ import main

ROOT = Path(__file__).resolve().parents[1]

# (what a hand edit sets, the phrase the refusal names it by)
EDITS = {
    "metric text": (
        {"metrics": {"dev_ppl": "12.5 (approx)"}}, '"metrics"."dev_ppl": "12.5 (approx)" is not a number'
    ),
    "status capitalised": ({"status": "Finished"}, '"status": "Finished" is not one of running, finished'),
    "seed as text": ({"seed": "1"}, '"seed": "1" is not an integer'),
    "steps a fraction": ({"steps": 400.5}, '"steps": 400.5 is not an integer'),
    "tokens/s a boolean": ({"tokens_per_s": True}, '"tokens_per_s": true is not a number'),
    "metrics a list": ({"metrics": [1, 2]}, '"metrics" is a list, not an object'),
    "config a string": ({"config": "base"}, '"config" is a string, not an object'),
    "run id a number": ({"run_id": 7}, '"run_id": 7 is not a string'),
    "no run id": ({"run_id": None}, "missing run_id"),
    "an array": ([], "a JSON list, not an object"),
    "a newer schema": ({"schema_version": 2}, '"schema_version": 2 is not 1, this version\'s'),
    "signature a number": (
        {"metrics": {"dev_bleu_signature": 3}}, '"metrics"."dev_bleu_signature": 3 is not a string'
    ),
}  # fmt: skip


def _edit(path: Path, change) -> None:
    rec = json.loads(path.read_text())
    if isinstance(change, list):
        rec = change
    else:
        for key, value in change.items():
            if isinstance(value, dict) and isinstance(rec.get(key), dict):
                rec[key].update(value)
            elif value is None:
                rec.pop(key)
            else:
                rec[key] = value
    path.write_text(json.dumps(rec))


@pytest.mark.parametrize("name", sorted(EDITS))
def test_a_hand_edited_record_is_left_out_by_name_and_the_table_is_built(name, tmp_path, monkeypatch, capsys):
    change, phrase = EDITS[name]
    make_fixture(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(staleness, "code_hash", lambda task: TODAY)
    edited = next((tmp_path / "results" / "B1").glob("*-s1")) / "record.json"
    _edit(edited, change)
    with pytest.raises(store.RecordError, match="not a result record"):
        store.read_record(edited)
    assert main(["table3", *ARGS, "--no-plots"]) == 0
    err = capsys.readouterr().err
    line = next(ln for ln in err.splitlines() if str(edited.relative_to(tmp_path)) in ln)
    assert line.startswith("warning: skipped ") and phrase in line
    text = (tmp_path / "reports" / "table3.md").read_text()
    b1 = next(ln for ln in text.splitlines() if ln.startswith("| B1 |"))
    assert b1.endswith("| 1 seed; failed s3: CUDA out of memory |"), b1  # s2 alone is finished now
    base = next(ln for ln in text.splitlines() if ln.startswith("| base |"))
    assert "3 seeds" in base


def test_every_committed_record_passes_the_check():
    paths = sorted((ROOT / "reports").rglob("record.json"))
    assert len(paths) >= 60
    assert [p for p in paths if store.record_problem(json.loads(p.read_text()))] == []


def test_curves_with_edited_or_repeated_lines_are_read_once_each(tmp_path, monkeypatch, capsys):
    """A curve line whose step or value is not a number is left out; a line written twice (a run resumed
    after the disk filled) counts once, the later one."""
    make_fixture(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(staleness, "code_hash", lambda task: TODAY)
    folder = next((tmp_path / "results" / "A1").glob("*-s1"))
    lines = (folder / "curves.jsonl").read_text().splitlines()
    extra = [
        json.dumps({"step": "300", "dev_ppl": 3.0}),
        json.dumps({"step": 200, "dev_ppl": "high"}),
        json.dumps({"step": True, "dev_ppl": 3.0}),
        lines[-1],
    ]
    (folder / "curves.jsonl").write_text("\n".join(lines + extra) + "\n")
    run = collect_mod.Run({"_path": str(folder / "record.json"), "files": {"curves": "curves.jsonl"}})
    steps = [c["step"] for c in run.curves()]
    assert steps == [100, 200, 300, 400]
    assert all(isinstance(c.get("dev_ppl", 0.0), float) for c in run.curves())
    assert main(["table3", *ARGS, "--plots", "reports/plots"]) == 0


def _train(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, WANDB_MODE="offline", PYTHONUNBUFFERED="1")
    cmd = [
        sys.executable, "-m", "ablate.run", "recipe=tiny", "scale=tiny", "trainer=cpu", "trainer.threads=1",
        "trainer.progress_bar=false", "logger=none", f"results_dir={tmp_path}/results",
        f"data.cache_dir={tmp_path}/cache", *overrides,
    ]  # fmt: skip
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_the_training_command_names_an_edited_record_in_one_line(tmp_path):
    p = _train(tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    (path,) = (tmp_path / "results").rglob("record.json")
    before = json.loads(path.read_text())
    evaluate = [sys.executable, "-m", "ablate.evaluate", str(path.parent), "--split", "dev"]
    for change, phrase in (EDITS["metric text"], EDITS["status capitalised"], EDITS["a newer schema"]):
        _edit(path, change)
        for p in (_train(tmp_path), subprocess.run(evaluate, cwd=ROOT, capture_output=True, text=True)):
            assert p.returncode == 2, p.stderr[-2000:]
            assert "Traceback" not in p.stderr
            errors = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
            assert len(errors) == 1 and str(path) in errors[0] and phrase in errors[0], p.stderr[-2000:]
        path.write_text(json.dumps(before))
    edited = path.read_text()
    assert json.loads(edited) == before  # the file is left as the user left it
