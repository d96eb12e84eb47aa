"""The paper's claims (section 6.2) read by rules: on hand-made records where a claim holds, fails and is
undecided, on hand-made intervals at the edges of E's tolerance, and in the committed Multi30k report."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_report_table3 import QUALITY, TODAY, _write_run

from ablate.records import staleness
from ablate.report.__main__ import main
from ablate.report.analysis import Analysis, analyse
from ablate.report.claims import (
    NOT_SUPPORTED,
    SUPPORTED,
    UNDECIDED,
    claims,
    claims_markdown,
)
from ablate.report.collect import collect
from ablate.report.table3 import table3_json, table3_markdown

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf" / "model"


def _analysis(tmp_path, monkeypatch, quality: dict[str, float], seeds=(1, 2, 3)) -> Analysis:
    """Records of base and the given rows (row -> NLL shift per token: > 0 raises dev PPL), three seeds each,
    analysed as the report does."""
    monkeypatch.setattr(staleness, "code_hash", lambda task: TODAY)
    for row, dnll in quality.items():
        monkeypatch.setitem(QUALITY, row, (0.0, dnll))
    for row in ("base", *quality):
        for s in seeds:
            _write_run(tmp_path / "results", row, s)
    return analyse(collect(tmp_path / "results", CONF), n_boot=200)


def _by_key(an: Analysis) -> dict:
    return {c.key: c for c in claims(an)}


def test_claims_hold_where_the_rows_move_as_the_paper_says(tmp_path, monkeypatch):
    an = _analysis(tmp_path, monkeypatch, {"A1": 0.1, "A4": 0.1, "B1": 0.1, "B2": 0.05, "D1": 0.1})
    cl = _by_key(an)
    assert cl["B"].verdict == SUPPORTED and cl["D"].verdict == SUPPORTED
    assert cl["A"].verdict == SUPPORTED and cl["A"].note.startswith("best head setting by its mean: base")
    d1 = cl["D"].evidence[0]
    assert d1.diff == pytest.approx(an.get("D1").cmp["ppl"].diff)  # the same seeds: the same Δ
    assert d1.state == "worse" and d1.look[0] > 0 and d1.ci95[0] > 0 and d1.holds is True
    # rows not measured leave their claims undecided, never supported
    assert cl["C"].verdict == UNDECIDED and cl["E"].verdict == UNDECIDED
    assert "C1: not measured against base" in "\n".join(claims_markdown(an))


def test_a_claim_the_runs_contradict_is_reported_as_not_supported(tmp_path, monkeypatch):
    # D1 (no dropout) better than base; A1 (one head) the best head setting; B1 worse, B2 better
    an = _analysis(tmp_path, monkeypatch, {"A1": -0.1, "A4": 0.1, "B1": 0.1, "B2": -0.1, "D1": -0.1})
    cl = _by_key(an)
    assert cl["D"].verdict == NOT_SUPPORTED and cl["D"].evidence[0].holds is False
    assert cl["D"].evidence[0].look[1] < 0
    # A1 is better than base, but A2 and A3 are not measured: A1 is not shown to be the best setting
    assert cl["A"].verdict == UNDECIDED and cl["A"].note.startswith("best head setting by its mean: A1")
    a1 = cl["A"].evidence[0]
    assert a1.holds is None and [p.state for p in a1.pairs][:1] == ["better"]
    assert [ev.holds for ev in cl["B"].evidence] == [True, False] and cl["B"].verdict == NOT_SUPPORTED
    text = table3_markdown(an)
    section = text.split("## The paper's claims (section 6.2)\n")[1].split("\n## ")[0]
    assert "- (D) **not supported**: Dropout is very helpful" in section
    assert "- (A) **undecided**:" in section and "A1 -0.30 vs A2" not in section
    assert "A1: no such row" not in section and "A2: not measured against" not in section
    summary = text.split("## Summary\n")[1].split("## Table\n")[0]
    assert "claims" not in summary  # the README quotes this block
    got = {c["key"]: c["verdict"] for c in table3_json(an)["claims"]}
    assert got == {"A": UNDECIDED, "B": NOT_SUPPORTED, "C": UNDECIDED, "D": NOT_SUPPORTED, "E": UNDECIDED}


def test_a_difference_whose_intervals_include_zero_is_undecided(tmp_path, monkeypatch):
    an = _analysis(tmp_path, monkeypatch, {"D1": 0.0, "B1": 0.1})  # B2 not run
    cl = _by_key(an)
    d1 = cl["D"].evidence[0]
    assert d1.diff is not None and d1.look[0] < 0 < d1.look[1] and d1.state == "undecided"
    assert d1.holds is None and cl["D"].verdict == UNDECIDED
    assert cl["B"].evidence[0].holds is True and cl["B"].verdict == UNDECIDED  # B2 missing


def test_one_seed_per_side_decides_nothing(tmp_path, monkeypatch):
    an = _analysis(tmp_path, monkeypatch, {"D1": 0.3}, seeds=(1,))
    d = _by_key(an)["D"]
    assert d.evidence[0].state == "not compared"  # no row has two seeds: the seed variance is unknown
    assert d.verdict == UNDECIDED


def test_the_committed_multi30k_records_give_the_claims_the_procedure_gives(tmp_path):
    """The claims section of the committed records as the code renders it: the verdicts of Holm over the
    table's comparisons (docs/planner.md lists how each differs from the per-row reading)."""
    out = tmp_path / "t.md"
    runs = ROOT / "reports" / "table3_multi30k" / "runs"
    args = ["--results", str(runs), "--preset", "multi30k_table3+paper", "--out", str(out), "--no-plots"]
    assert main([*args, "--quiet"]) == 0
    head = "## The paper's claims (section 6.2)\n"
    section = head + out.read_text().split(head)[1].split("\n## ")[0]
    verdicts = {ln[3]: ln.split("**")[1] for ln in section.splitlines() if ln.startswith("- (")}
    assert verdicts == {"A": SUPPORTED, "B": SUPPORTED, "C": UNDECIDED, "D": SUPPORTED, "E": UNDECIDED}


def test_the_claims_and_the_decisions_say_one_thing_of_every_row():
    """Every row a claim reads against base has the state the Decisions section gives it (the table's
    family: every metric), and so have the bold cells (Compare.verdict)."""
    from ablate.report.decide import decide, read_looks
    from ablate.tasks import PPL, task_of

    runs = ROOT / "reports" / "table3_multi30k" / "runs"
    coll = collect(runs, CONF, preset="multi30k_table3+paper")
    ds = decide(coll, [*task_of("translation").metrics, PPL], read_looks(runs))
    states = {d.row: d.state for d in ds if d.metric.name == "ppl"}
    an = analyse(coll, n_boot=20)
    read = [ev for cl in claims(an) for ev in cl.evidence if ev.against == "base"]
    assert len(read) >= 12 and all(ev.state == states[ev.row] for ev in read)
    assert all(an.get(r).cmp["ppl"].verdict == st for r, st in states.items())
    assert {ev.row: ev.holds for ev in read}["C3"] is None and states["C7"] == "undecided"


def test_a_claim_that_names_no_row_of_the_study_says_so(tmp_path, monkeypatch):
    """A claim over a row the study does not have is undecided and says which (not silently undecided);
    a best_of claim whose settings are unmeasured reads as undecided, without a traceback."""
    from ablate.report import claims as claims_mod

    an = _analysis(tmp_path, monkeypatch, {"D1": 0.1})
    spec = claims_mod.Spec(None, "Claims", None, [
        {"key": "X", "paper": "p.", "rule": "r", "expect": {"wide": "worse"}},
        {"key": "Y", "paper": "p.", "rule": "r", "expect": {"A1": "worse"}, "best_of": ["A1", "A2", "A3"]},
    ])  # fmt: skip
    monkeypatch.setattr(claims_mod, "spec_of", lambda an: spec)
    x, y = claims(an)
    assert x.verdict == UNDECIDED and "rows the study does not have: wide" in x.note
    assert "wide: no such row in this study" in "\n".join(claims_markdown(an))
    assert y.verdict == UNDECIDED and y.note == "none of A1, A2, A3 measured"


def test_a_claims_line_names_its_metric_and_keeps_intervals_within_the_metrics_range(tmp_path, monkeypatch):
    """The section's header names no metric (a claim may read another than the paper table's); each line
    names the metric it is read by; an interval wider than the metric's range over the table is said so,
    as in the Decisions."""
    from ablate.report import claims as claims_mod
    from ablate.report.claims import Evidence

    an = _analysis(tmp_path, monkeypatch, {"D1": 0.1})
    spec = claims_mod.Spec(None, "Claims", None, [
        {"key": "X", "paper": "p.", "rule": "r", "expect": {"D1": "worse"}, "metric": "bleu"},
        {"key": "Y", "paper": "p.", "rule": "r", "expect": {"D1": "worse"}},
    ])  # fmt: skip
    monkeypatch.setattr(claims_mod, "spec_of", lambda an: spec)
    lines = claims_markdown(an)
    assert "dev-PPL" not in lines[2] and "BLEU" not in lines[2]
    x, y = (ln for ln in lines if ln.startswith("- ("))
    assert "Rule: r (dev BLEU)." in x and "Rule: r (dev PPL)." in y
    wide = Evidence("D1", "base", "worse", 0.5, "undecided", (-5108.5, 5107.6), (-20.0, 21.0), 1e-9, 2,
                    span=7.2)  # fmt: skip
    assert "wider than the table's range (7.20) at alpha" in wide.text() and "5108" not in wide.text()
