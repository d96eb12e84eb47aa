"""One variations report for every task: a researcher's task (tests/user_task2: digits, CER lower is
better, its paper's CSV and claims) gets the bootstrap of each declared metric from its summed per-sentence
statistics, its paper's figures beside its own with the sign agreement, its claims and the Decisions,
each figure checked against a hand computation."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import scipy.stats
from test_report_table3 import TODAY, _write_run

from ablate.records import staleness
from ablate.report.__main__ import main

USER = Path(__file__).parent / "user_task2"
TASK = "digits_task:DigitsTask"
N_SENT = 40
ERRORS = {"base": 0.12, "wide": 0.09}  # the share of characters each row gets wrong


def _counts(row: str, seed: int) -> np.ndarray:
    """(edit distance, reference characters) per dev sentence: the same references for every run."""
    ref = np.random.default_rng(7).integers(2, 5, N_SENT)
    rng = np.random.default_rng(100 * seed + len(row))
    return np.stack([rng.binomial(ref, ERRORS[row]), ref], axis=1).astype(np.int64)


def _records(results: Path) -> dict[tuple[str, int], np.ndarray]:
    out = {}
    for row in ERRORS:
        for seed in (1, 2, 3):
            folder = _write_run(results, row, seed, task=TASK)
            counts = out[row, seed] = _counts(row, seed)
            with np.load(folder / "dev_sentences.npz") as z:
                arrays = {k: z[k] for k in z.files}
            np.savez(folder / "dev_sentences.npz", **arrays, cer_counts=counts)
            rec = json.loads((folder / "record.json").read_text())
            rec["metrics"]["dev_cer"] = 100.0 * counts[:, 0].sum() / counts[:, 1].sum()
            (folder / "record.json").write_text(json.dumps(rec))
    return out


@pytest.fixture
def digits(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(USER))
    monkeypatch.setattr(staleness, "code_hash", lambda task: TODAY)
    monkeypatch.delenv("ABLATE_RESULTS", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "conf").mkdir()
    return tmp_path, _records(tmp_path / "results")


def _report(fmt: str, out: str, *extra: str) -> int:
    args = ["table3", "--task", TASK, "--results", "results", "--conf", "conf", "--out", out, "--quiet"]
    return main([*args, "--n-boot", "200", "--format", fmt, *extra])


def test_a_researchers_task_gets_the_full_variations_report(digits):
    root, counts = digits
    assert _report("json", "report.json") == 0
    rows = {r["row"]: r for r in json.loads((root / "report.json").read_text())["rows"]}
    cer = {k: 100.0 * c[:, 0].sum() / c[:, 1].sum() for k, c in counts.items()}  # the reduce, by hand
    diff = np.mean([cer["wide", s] for s in (1, 2, 3)]) - np.mean([cer["base", s] for s in (1, 2, 3)])
    boot = rows["wide"]["cer"]["vs_reference"]["bootstrap"]
    # the bootstrap's point estimate is the metric of each run's summed statistics, averaged over seeds
    assert boot["diff"] == pytest.approx(diff, abs=1e-12) and boot["lo"] < diff < boot["hi"]
    assert boot["kind"] == "paired bootstrap over seeds x sentences"
    assert rows["wide"]["ppl"]["vs_reference"]["bootstrap"] is not None  # perplexity's too: nll, tokens
    # the paper's figures beside ours: its Δ from the CSV, and the sign agreement on it
    assert rows["wide"]["cer"]["paper"] == 9.5 and rows["wide"]["cer"]["vs_reference"]["paper_diff"] == -2.5
    assert rows["wide"]["cer"]["vs_reference"]["direction"] == ("agree" if diff < 0 else "opposite")

    assert _report("md", "report.md", "--plots", "plots") == 0
    text = (root / "report.md").read_text()
    assert text.startswith(f"# Variations of task {TASK}: add two numbers")
    assert "rows whose paper dev-CER difference to base is at least 0.1 agree with it in sign" in text
    main_row = next(ln for ln in text.splitlines() if ln.startswith("| wide |") and "| 9.5 |" in ln)
    assert "| 12.0 |" not in main_row and "| -2.5 |" in main_row  # the paper's figure and Δ, as printed
    # By hand: the CER difference's 95% interval by the t on the seed variance pooled over the two rows
    # (4 df) holds zero; a look's alpha is at most 0.05, so its interval holds zero too: the planner can
    # decide neither better nor worse, and the claim "wide better than base" stays undecided.
    wide, base = ([cer[row, s] for s in (1, 2, 3)] for row in ("wide", "base"))
    sd = math.sqrt((np.var(wide, ddof=1) + np.var(base, ddof=1)) / 2)
    half = scipy.stats.t.ppf(0.975, 4) * sd * math.sqrt(2 / 3)
    assert diff - half < 0 < diff + half, (diff, half)
    decision = next(ln for ln in text.splitlines() if ln.startswith("- wide CER: "))
    assert decision.startswith(f"- wide CER: undecided; Δ of the means {diff:+.2f}, "), decision
    claim = next(ln for ln in text.splitlines() if ln.startswith("- (W) **"))
    assert claim.startswith("- (W) **undecided**"), claim
    assert "### CER (dev): difference to our base" in text and "CER: the summed edit distance" in text
    assert {p.name for p in (root / "plots").glob("*.png")} >= {"forest_cer.png", "forest_ppl.png"}
    assert math.isfinite(rows["wide"]["cer"]["mean"])


def test_a_claims_file_that_is_not_one_is_one_line_and_exit_2(digits, tmp_path, monkeypatch, capsys):
    from ablate.report.claims import read_spec
    from ablate.tasks import task_of

    bad = tmp_path / "claims.yaml"
    bad.write_text("claims:\n  - key: W\n    paper: x\n    rule: y\n    expect: {wide: faster}\n")
    monkeypatch.setattr(task_of(TASK), "paper_claims", str(bad))
    read_spec.cache_clear()
    assert _report("md", "report.md") == 2
    err = capsys.readouterr().err.strip().splitlines()
    expect = "wide: 'faster' is not one of worse, better, nearly identical"
    assert err[-1] == f"error: {bad}: claim 1 (W): {expect}"
