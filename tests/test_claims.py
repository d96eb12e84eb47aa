"""The paper's claims (section 6.2) read by rules: on hand-made records where a claim holds, fails and is
undecided, on hand-made intervals at the edges of E's tolerance, and in the committed Multi30k report."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_report_table3 import QUALITY, TODAY, _write_run

from ablate.records import staleness
from ablate.report import stats
from ablate.report.__main__ import main
from ablate.report.analysis import Analysis, Compare, RowResult, analyse
from ablate.report.claims import (
    NEARLY_IDENTICAL,
    NOT_SUPPORTED,
    SUPPORTED,
    UNDECIDED,
    claim_against_base,
    claim_e,
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
    assert cl["A"].verdict == SUPPORTED and cl["A"].note.startswith("best head setting: base")
    d1 = cl["D"].evidence[0]
    c = an.get("D1").cmp["ppl"]  # the interval quoted is the report's own
    assert (d1.diff, d1.t, d1.boot) == (c.diff, (c.ttest.lo, c.ttest.hi), (c.boot.lo, c.boot.hi))
    assert d1.t[0] > 0 and d1.boot[0] > 0 and d1.holds is True
    # rows not measured leave their claims undecided, never supported
    assert cl["C"].verdict == UNDECIDED and cl["E"].verdict == UNDECIDED
    assert "C1: not measured against base" in "\n".join(claims_markdown(an))


def test_a_claim_the_runs_contradict_is_reported_as_not_supported(tmp_path, monkeypatch):
    # D1 (no dropout) better than base; A1 (one head) the best head setting; B1 worse, B2 better
    an = _analysis(tmp_path, monkeypatch, {"A1": -0.1, "A4": 0.1, "B1": 0.1, "B2": -0.1, "D1": -0.1})
    cl = _by_key(an)
    assert cl["D"].verdict == NOT_SUPPORTED and cl["D"].evidence[0].holds is False
    assert cl["D"].evidence[0].boot[1] < 0
    assert cl["A"].verdict == NOT_SUPPORTED and cl["A"].note.startswith("best head setting: A1")
    assert [ev.holds for ev in cl["B"].evidence] == [True, False] and cl["B"].verdict == NOT_SUPPORTED
    text = table3_markdown(an)
    section = text.split("## The paper's claims (section 6.2)\n")[1].split("\n## ")[0]
    assert "- (D) **not supported**: Dropout is very helpful" in section
    assert (
        "- (A) **not supported**:" in section
        and "A1 is the best setting itself (3 seeds): against" in section
    )
    summary = text.split("## Summary\n")[1].split("## Table\n")[0]
    assert "claims" not in summary  # the README quotes this block
    got = {c["key"]: c["verdict"] for c in table3_json(an)["claims"]}
    assert got == {"A": NOT_SUPPORTED, "B": NOT_SUPPORTED, "C": UNDECIDED, "D": NOT_SUPPORTED, "E": UNDECIDED}


def test_a_difference_whose_intervals_include_zero_is_undecided(tmp_path, monkeypatch):
    an = _analysis(tmp_path, monkeypatch, {"D1": 0.0, "B1": 0.1})  # B2 not run
    cl = _by_key(an)
    d1 = cl["D"].evidence[0]
    assert d1.diff is not None and d1.boot[0] < 0 < d1.boot[1]
    assert d1.holds is None and cl["D"].verdict == UNDECIDED
    assert cl["B"].evidence[0].holds is True and cl["B"].verdict == UNDECIDED  # B2 missing


def test_one_seed_per_side_decides_nothing(tmp_path, monkeypatch):
    an = _analysis(tmp_path, monkeypatch, {"D1": 0.3}, seeds=(1,))
    d = _by_key(an)["D"]
    assert d.evidence[0].boot[0] > 0  # the sentences alone exclude zero: two checkpoints, not two configs
    assert d.verdict == UNDECIDED


def _hand(e_t: tuple[float, float], e_boot: tuple[float, float], base_ppl=5.0, row="E") -> Analysis:
    """base and one row whose dev-PPL Δ has the given t and bootstrap intervals over 2 seeds per side."""

    def rr(row: str, ppl: float, cmp: dict | None = None) -> RowResult:
        return RowResult(row, row, {}, {}, {}, {"ppl": {1: ppl, 2: ppl}}, cmp=cmp or {})

    diff = (e_boot[0] + e_boot[1]) / 2
    c = Compare("ppl", diff=diff, n_row=2, n_base=2)
    c.ttest = stats.TTest("paired t", diff, *e_t, 0.5, 1, 2, 2)
    c.boot = stats.Bootstrap("paired bootstrap over seeds x sentences", diff, *e_boot, 0.5, 200)
    return Analysis([rr("base", base_ppl), rr(row, base_ppl + diff, {"ppl": c})], None, 200, [])


@pytest.mark.parametrize(
    "t, boot, verdict",
    [
        ((0.1, 0.5), (0.1, 0.4), SUPPORTED),
        ((-0.1, 0.5), (0.1, 0.4), UNDECIDED),  # the bootstrap alone excludes zero
        ((0.1, 0.5), (-0.1, 0.4), UNDECIDED),  # the t interval alone
        ((-0.5, -0.1), (-0.4, -0.1), NOT_SUPPORTED),
        ((-0.5, 0.1), (-0.4, -0.1), UNDECIDED),
    ],
)
def test_a_row_counts_only_where_both_intervals_exclude_zero(t, boot, verdict):
    assert claim_against_base(_hand(t, boot, row="D1"), "D").verdict == verdict


@pytest.mark.parametrize(
    "t, boot, verdict",
    [
        ((-0.04, 0.045), (-0.03, 0.03), SUPPORTED),  # both within ±0.05 (1% of 5.0)
        ((-0.04, 0.06), (-0.03, 0.03), UNDECIDED),  # the t interval reaches past the tolerance
        ((0.06, 0.2), (0.07, 0.15), NOT_SUPPORTED),  # both wholly above it
        ((-0.2, 0.3), (0.07, 0.15), UNDECIDED),  # the bootstrap alone is outside
    ],
)
def test_nearly_identical_is_both_intervals_within_the_tolerance(t, boot, verdict):
    assert NEARLY_IDENTICAL == 0.01
    e = claim_e(_hand(t, boot))
    assert e.verdict == verdict and e.note == "tolerance ±0.050 (1% of base's 5.00)"


def test_the_committed_multi30k_report_holds_the_claims_as_the_code_renders_them(tmp_path):
    out = tmp_path / "t.md"
    runs = ROOT / "reports" / "table3_multi30k" / "runs"
    args = ["--results", str(runs), "--preset", "multi30k_table3+paper", "--out", str(out), "--no-plots"]
    assert main([*args, "--quiet"]) == 0
    head = "## The paper's claims (section 6.2)\n"

    def section(text: str) -> str:
        return head + text.split(head)[1].split("\n## ")[0]

    committed = (ROOT / "reports" / "table3_multi30k.md").read_text()
    assert section(out.read_text()) == section(committed)
    verdicts = {ln[3]: ln.split("**")[1] for ln in section(committed).splitlines() if ln.startswith("- (")}
    assert verdicts == {"A": SUPPORTED, "B": SUPPORTED, "C": UNDECIDED, "D": SUPPORTED, "E": UNDECIDED}
