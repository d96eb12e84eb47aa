"""The paper's conclusions from Table 3 (section 6.2), each read against our runs by a stated rule.

Every claim rests on rows and reads their dev-PPL difference (Table 3 is read by dev PPL; lower is
better), with the two 95% intervals the report already computes for it (analysis.Compare: the seed-level
t interval and the hierarchical bootstrap over seeds x dev sentences). A row's difference is *decided*
only when it is measured over at least two seeds per side and every interval it has lies on one side of
zero, the standard the report's bold cells and its "both intervals" reading use; otherwise it is
*undecided*. The verdicts:

- supported: every row the claim rests on is decided, in the claimed direction;
- not supported: at least one row is decided against the claim;
- undecided: neither (a row not yet measured, or an interval that includes zero).

The rules, one per claim:

- (A) heads: the best head setting is the row of base, A1-A4 with the lowest mean dev PPL; single-head
  attention (A1) and the most heads (A4, 32) must each be decided worse than it (the Δ and its intervals
  are the report's own comparison, with the best setting in base's place). A1 or A4 being the best setting
  is against the claim. The best is picked by its point estimate, so a close second can lose to it by
  chance: read the intervals.
- (B) smaller d_k: B1 (d_k 16) and B2 (d_k 32) each decided worse than base.
- (C) size: the rows larger than base (C3 N 8, C5 d_model 1024, C7 d_ff 4096, big) each decided better
  than base, and the smaller ones (C1 N 2, C2 N 4, C4 d_model 256, C6 d_ff 1024) each decided worse.
- (D) dropout: D1 (P_drop 0) decided worse than base.
- (E) learned positions: nearly identical, i.e. every interval of E's Δ lies within ±NEARLY_IDENTICAL of
  base's mean dev PPL; not supported when every interval lies wholly outside that band (on one side).

Pure functions over an Analysis (the A comparison reads the rows' per-sentence files, as analyse does).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ablate import paper
from ablate.report.analysis import PAPER_PPL_EFFECT, Analysis, Compare, RowResult, _compare, _sentences

METRIC = "ppl"
SEEDS_MIN = 2  # per side; one seed per side compares two checkpoints, not two configurations
PAPER_BASE_PPL = paper.table3()["base"].ppl  # 4.92
# E's "nearly identical": within 1% of base's dev PPL. The smallest paper dev-PPL Δ the report counts as an
# effect (PAPER_PPL_EFFECT, 0.05) is 1% of the paper's base (4.92); a fraction, because our perplexities are
# on another vocabulary and scale.
NEARLY_IDENTICAL = round(PAPER_PPL_EFFECT / PAPER_BASE_PPL, 2)

SUPPORTED, NOT_SUPPORTED, UNDECIDED = "supported", "not supported", "undecided"
WORSE, BETTER = +1, -1  # the sign of a dev-PPL Δ

HEADS = ("base", "A1", "A2", "A3", "A4")
LARGER = ("C3", "C5", "C7", "big")
SIZE = ("C1", "C2", "C3", "C4", "C5", "C6", "C7", "big")


@dataclass
class Evidence:
    """One row's dev-PPL Δ against its reference (base, or the best head setting for claim A)."""

    row: str
    against: str
    expect: str  # "worse" | "better" | "nearly identical"
    diff: float | None = None
    t: tuple[float, float] | None = None  # seed-level t interval
    boot: tuple[float, float] | None = None  # hierarchical bootstrap interval
    n_row: int = 0
    n_against: int = 0
    holds: bool | None = None  # True: decided as expected; False: decided against; None: undecided

    def text(self) -> str:
        if self.diff is None:
            return f"{self.row}: not measured against {self.against}"
        if self.row == self.against:
            return f"{self.row} is the best setting itself ({self.n_row} seeds)"
        ivs = [
            f"{k} [{iv[0]:+.2f}, {iv[1]:+.2f}]" for k, iv in (("t", self.t), ("bootstrap", self.boot)) if iv
        ]
        return (
            f"{self.row} {self.diff:+.2f} vs {self.against} ({'; '.join(ivs) or 'no interval'}; "
            f"{self.n_row}/{self.n_against} seeds)"
        )


@dataclass
class Claim:
    key: str
    paper: str  # the claim in the paper's words (section 6.2)
    rule: str  # the rule, in a line
    rows: list[str]
    verdict: str = UNDECIDED
    evidence: list[Evidence] = field(default_factory=list)
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _evidence(c: Compare | None, row: str, against: str, expect: int) -> Evidence:
    ev = Evidence(row, against, "worse" if expect == WORSE else "better")
    if c is None or c.diff is None:
        return ev
    ev.diff, ev.n_row, ev.n_against = c.diff, c.n_row, c.n_base
    ev.t = (c.ttest.lo, c.ttest.hi) if c.ttest else None
    ev.boot = (c.boot.lo, c.boot.hi) if c.boot else None
    side = _side(ev)
    ev.holds = None if side == 0 else side == expect
    return ev


def _intervals(ev: Evidence) -> list[tuple[float, float]]:
    return [iv for iv in (ev.t, ev.boot) if iv is not None]


def _side(ev: Evidence) -> int:
    """+1 / -1: every interval above / below zero over SEEDS_MIN seeds per side; 0: undecided."""
    ivs = _intervals(ev)
    if not ivs or min(ev.n_row, ev.n_against) < SEEDS_MIN:
        return 0
    if all(lo > 0 for lo, _ in ivs):
        return +1
    if all(hi < 0 for _, hi in ivs):
        return -1
    return 0


def verdict(evidence: list[Evidence]) -> str:
    """not supported if a row is decided against the claim; supported if every row is decided for it."""
    if any(ev.holds is False for ev in evidence):
        return NOT_SUPPORTED
    if evidence and all(ev.holds for ev in evidence):
        return SUPPORTED
    return UNDECIDED


def _vs_base(an: Analysis, row: str, expect: int) -> Evidence:
    rr = an.get(row)
    return _evidence(None if rr is None else rr.cmp.get(METRIC), row, "base", expect)


def _measured(rr: RowResult | None) -> bool:
    return rr is not None and len(rr.values[METRIC]) > 0


def _vs_best(an: Analysis, row: str, best: RowResult) -> Evidence:
    """The row against the best head setting, by the report's own comparison (analysis._compare) with the
    best setting in base's place."""
    rr = an.get(row)
    if best.row == "base" or not _measured(rr):
        return _vs_base(an, row, WORSE)
    if rr is best:  # the row is itself the best setting: against the claim
        ev = Evidence(row, best.row, "worse", diff=0.0, holds=False)
        ev.n_row = ev.n_against = len(rr.values[METRIC])
        return ev
    probe = replace(rr, cmp={})
    _compare(probe, best, _sentences(best), an.n_boot, 0, 1)
    return _evidence(probe.cmp[METRIC], row, best.row, WORSE)


def claim_a(an: Analysis) -> Claim:
    cl = Claim(
        "A",
        "Single-head attention is 0.9 BLEU worse than the best setting, and quality also drops off with "
        "too many heads.",
        "A1 (1 head) and A4 (32 heads) each worse than the best head setting (lowest mean dev PPL of base, "
        "A1-A4)",
        list(HEADS),
    )
    measured = [rr for row in HEADS if _measured(rr := an.get(row))]
    base = an.get("base")
    if not _measured(base):
        cl.evidence = [Evidence(r, "base", "worse") for r in ("A1", "A4")]
        cl.note = "base not measured"
        cl.verdict = verdict(cl.evidence)
        return cl
    best = min(measured, key=lambda rr: rr.summary(METRIC)[0])
    cl.evidence = [_vs_best(an, row, best) for row in ("A1", "A4")]
    cl.note = f"best head setting: {best.row} (dev PPL {best.summary(METRIC)[0]:.2f})"
    cl.verdict = verdict(cl.evidence)
    return cl


# claim -> (the paper's words, the rule, {row: the direction the claim expects of its dev-PPL Δ to base})
AGAINST_BASE = {
    "B": (
        "Reducing the attention key size d_k hurts model quality.",
        "B1 (d_k 16) and B2 (d_k 32) each worse than base",
        {"B1": WORSE, "B2": WORSE},
    ),
    "C": (
        "Bigger models are better.",
        "the larger rows (C3, C5, C7, big) each better than base, the smaller (C1, C2, C4, C6) each worse",
        {r: BETTER if r in LARGER else WORSE for r in SIZE},
    ),
    "D": (
        "Dropout is very helpful in avoiding over-fitting.",
        "D1 (P_drop 0) worse than base",
        {"D1": WORSE},
    ),
}


def claim_against_base(an: Analysis, key: str) -> Claim:
    """Claims B, C and D: each of their rows' Δ to base decided in the direction the claim expects."""
    paper_words, rule, expect = AGAINST_BASE[key]
    cl = Claim(key, paper_words, rule, list(expect))
    cl.evidence = [_vs_base(an, row, sign) for row, sign in expect.items()]
    cl.verdict = verdict(cl.evidence)
    return cl


def claim_e(an: Analysis) -> Claim:
    cl = Claim(
        "E",
        "Learned positional embeddings instead of sinusoids give nearly identical results to the base model.",
        f"every interval of E's Δ within ±{NEARLY_IDENTICAL:.0%} of base's dev PPL",
        ["E"],
    )
    ev = _vs_base(an, "E", WORSE)
    ev.expect, ev.holds = "nearly identical", None
    base = an.get("base")
    ivs = _intervals(ev)
    if ev.diff is not None and _measured(base) and ivs and min(ev.n_row, ev.n_against) >= SEEDS_MIN:
        tol = NEARLY_IDENTICAL * base.summary(METRIC)[0]
        cl.note = f"tolerance ±{tol:.3f} ({NEARLY_IDENTICAL:.0%} of base's {base.summary(METRIC)[0]:.2f})"
        if all(-tol <= lo and hi <= tol for lo, hi in ivs):
            ev.holds = True
        elif all(lo > tol for lo, _ in ivs) or all(hi < -tol for _, hi in ivs):
            ev.holds = False
    cl.evidence = [ev]
    cl.verdict = verdict(cl.evidence)
    return cl


def claims(an: Analysis) -> list[Claim]:
    """The five claims of section 6.2, each with its rows, evidence and verdict."""
    return [claim_a(an), *(claim_against_base(an, k) for k in AGAINST_BASE), claim_e(an)]


def claims_data(an: Analysis) -> list[dict[str, Any]]:
    """The claims as plain data (JSON, the W&B dashboard)."""
    return [c.as_dict() for c in claims(an)]


RULES_NOTE = (
    "Each claim of the paper's section 6.2, read by a rule over the dev-PPL Δ of the rows it rests on. A "
    f"row's Δ counts only over at least {SEEDS_MIN} seeds per side with both 95% intervals (seed-level t "
    "and bootstrap, as in the statistics) on one side of zero. supported: every row as claimed; not "
    "supported: a row against the claim; undecided: otherwise (an interval includes zero, or a row is not "
    "measured). (A) compares A1 and A4 with the best head setting by the same test; (E) asks both "
    f"intervals to lie within ±{NEARLY_IDENTICAL:.0%} of base's dev PPL (the paper's smallest effect, "
    f"{PAPER_PPL_EFFECT} of {PAPER_BASE_PPL}), and is not supported when both lie outside it."
)


def _mark(ev: Evidence) -> str:
    return {True: "as claimed", False: "against", None: "undecided"}[ev.holds] if ev.diff is not None else ""


def claims_markdown(an: Analysis) -> list[str]:
    """The report's section: one line per claim with its verdict, its rule and each row's Δ and intervals."""
    lines = ["## The paper's claims (section 6.2)", "", RULES_NOTE, ""]
    for cl in claims(an):
        rows = "; ".join(ev.text() + (f": {m}" if (m := _mark(ev)) else "") for ev in cl.evidence)
        note = f" {cl.note[0].upper()}{cl.note[1:]}." if cl.note else ""
        lines.append(f"- ({cl.key}) **{cl.verdict}**: {cl.paper} Rule: {cl.rule}.{note} {rows}.")
    return lines + [""]
