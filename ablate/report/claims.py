"""The paper's conclusions from Table 3 (section 6.2), each read against our runs through the planner's
sequential procedure (report/decide.py): the same pooled seed variance, the same looks and the alpha each
look spent, so the claims and the Decisions section say one thing about every row.

Every claim rests on rows and reads their dev-PPL difference (Table 3 is read by dev PPL; lower is
better). A row holds for the claim when its decision at this look is the claimed direction, holds against
it when the decision is the other direction (or negligible, for a claimed direction), and is undecided
otherwise. The verdicts:

- supported: every row the claim rests on is decided, in the claimed direction;
- not supported: at least one row is decided against the claim;
- undecided: neither (a row not yet measured, or undecided at this look).

The rules, one per claim:

- (A) heads: the best head setting is the row of base, A1-A4 with the lowest mean dev PPL; single-head
  attention (A1) and the most heads (A4, 32) must each be decided worse than it, by the pooled t at the
  alpha the row's look spent (base's own decision where base is the best). A1 or A4 being the best setting
  is against the claim. The best is picked by its point estimate, so a close second can lose to it by
  chance: read the intervals.
- (B) smaller d_k: B1 (d_k 16) and B2 (d_k 32) each decided worse than base.
- (C) size: the rows larger than base (C3 N 8, C5 d_model 1024, C7 d_ff 4096, big) each decided better
  than base, and the smaller ones (C1 N 2, C2 N 4, C4 d_model 256, C6 d_ff 1024) each decided worse.
- (D) dropout: D1 (P_drop 0) decided worse than base.
- (E) learned positions: nearly identical, an equivalence test within +-NEARLY_IDENTICAL of base's mean
  dev PPL at the alpha E's look spent (TOST: the (1 - 2a) interval inside the band); not supported when
  the look's (1 - a) interval lies wholly outside the band, on one side.

Pure functions over an Analysis and its looks.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ablate import paper
from ablate.report.analysis import PAPER_PPL_EFFECT, Analysis, RowResult
from ablate.report.decide import Decision, Design, decide_values, read_looks
from ablate.tasks import PPL

METRIC = "ppl"
PAPER_BASE_PPL = paper.table3()["base"].ppl  # 4.92
# E's "nearly identical": within 1% of base's dev PPL. The smallest paper dev-PPL Δ the report counts as an
# effect (PAPER_PPL_EFFECT, 0.05) is 1% of the paper's base (4.92); a fraction, because our perplexities are
# on another vocabulary and scale.
NEARLY_IDENTICAL = round(PAPER_PPL_EFFECT / PAPER_BASE_PPL, 2)

SUPPORTED, NOT_SUPPORTED, UNDECIDED = "supported", "not supported", "undecided"
WORSE, BETTER = "worse", "better"

HEADS = ("base", "A1", "A2", "A3", "A4")
LARGER = ("C3", "C5", "C7", "big")
SIZE = ("C1", "C2", "C3", "C4", "C5", "C6", "C7", "big")


@dataclass
class Evidence:
    """One row's dev-PPL decision against its reference (base, or the best head setting for claim A)."""

    row: str
    against: str
    expect: str  # "worse" | "better" | "nearly identical"
    diff: float | None = None
    state: str = "not compared"  # the decision's, against `against`
    look: tuple[float, float] | None = None  # the interval at this look's alpha
    ci95: tuple[float, float] | None = None
    alpha: float = 0.0
    seeds: int = 0  # per side, the fewer
    holds: bool | None = None  # True: decided as expected; False: decided against; None: undecided

    def text(self) -> str:
        if self.diff is None:
            return f"{self.row}: not measured against {self.against}"
        if self.row == self.against:
            return f"{self.row} is the best setting itself ({self.seeds} seeds)"
        return (
            f"{self.row} {self.diff:+.2f} vs {self.against}, {self.state} at this look "
            f"([{self.look[0]:+.2f}, {self.look[1]:+.2f}] at alpha {self.alpha:.3g}; 95% "
            f"[{self.ci95[0]:+.2f}, {self.ci95[1]:+.2f}]; {self.seeds} seeds)"
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


@dataclass(frozen=True)
class Reading:
    """What every claim reads: the table's dev PPL by row and seed, and the looks made on it."""

    an: Analysis
    values: dict[str, dict[int, float]]
    design: Design

    @classmethod
    def of(cls, an: Analysis) -> Reading:
        values = {rr.row: dict(rr.values[METRIC]) for rr in an.rows if rr.values[METRIC]}
        coll = an.coll
        looks = read_looks(coll.results_dir) if coll is not None and coll.results_dir else []
        return cls(an, values, Design(PPL, (coll.scale if coll is not None else "") or "", looks))

    def decision(self, row: str, against: str = "base") -> Decision | None:
        if row not in self.values or against not in self.values:
            return None
        values = {"base": self.values[against], row: self.values[row]}
        return decide_values(values, self.design, pool_over=self.values)[0]


def _evidence(d: Decision | None, row: str, against: str, expect: str) -> Evidence:
    ev = Evidence(row, against, expect)
    if d is None or d.diff is None:
        return ev
    ev.diff, ev.state, ev.alpha, ev.seeds = d.diff, d.state, d.alpha, d.seeds
    ev.look, ev.ci95 = (d.lo, d.hi), d.interval(0.05)
    if expect in (WORSE, BETTER) and d.state != "undecided":
        ev.holds = d.state == expect
    return ev


def verdict(evidence: list[Evidence]) -> str:
    """not supported if a row is decided against the claim; supported if every row is decided for it."""
    if any(ev.holds is False for ev in evidence):
        return NOT_SUPPORTED
    if evidence and all(ev.holds for ev in evidence):
        return SUPPORTED
    return UNDECIDED


def _measured(rr: RowResult | None) -> bool:
    return rr is not None and len(rr.values[METRIC]) > 0


def claim_a(rd: Reading) -> Claim:
    cl = Claim(
        "A",
        "Single-head attention is 0.9 BLEU worse than the best setting, and quality also drops off with "
        "too many heads.",
        "A1 (1 head) and A4 (32 heads) each worse than the best head setting (lowest mean dev PPL of base, "
        "A1-A4)",
        list(HEADS),
    )
    an = rd.an
    if not _measured(an.get("base")):
        cl.evidence = [Evidence(r, "base", WORSE) for r in ("A1", "A4")]
        cl.note = "base not measured"
        cl.verdict = verdict(cl.evidence)
        return cl
    best = min((rr for row in HEADS if _measured(rr := an.get(row))), key=lambda rr: rr.summary(METRIC)[0])
    cl.evidence = []
    for row in ("A1", "A4"):
        if row == best.row:  # the row is itself the best setting: against the claim
            ev = Evidence(row, row, WORSE, diff=0.0, holds=False, seeds=len(best.values[METRIC]))
        else:
            ev = _evidence(rd.decision(row, best.row), row, best.row, WORSE)
        cl.evidence.append(ev)
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


def claim_against_base(rd: Reading, key: str) -> Claim:
    """Claims B, C and D: each of their rows' Δ to base decided in the direction the claim expects."""
    paper_words, rule, expect = AGAINST_BASE[key]
    cl = Claim(key, paper_words, rule, list(expect))
    cl.evidence = [_evidence(rd.decision(row), row, "base", sign) for row, sign in expect.items()]
    cl.verdict = verdict(cl.evidence)
    return cl


def claim_e(rd: Reading) -> Claim:
    cl = Claim(
        "E",
        "Learned positional embeddings instead of sinusoids give nearly identical results to the base model.",
        f"E's Δ within ±{NEARLY_IDENTICAL:.0%} of base's dev PPL (equivalence test at E's look)",
        ["E"],
    )
    d = rd.decision("E")
    ev = _evidence(d, "E", "base", "nearly identical")
    base = rd.an.get("base")
    if ev.diff is not None and d.alpha > 0:
        mean = base.summary(METRIC)[0]
        tol = NEARLY_IDENTICAL * mean
        cl.note = f"tolerance ±{tol:.3f} ({NEARLY_IDENTICAL:.0%} of base's {mean:.2f})"
        eq_lo, eq_hi = d.interval(2 * d.alpha)
        if -tol < eq_lo and eq_hi < tol:
            ev.holds = True
        elif d.lo > tol or d.hi < -tol:
            ev.holds = False
        cl.note += (
            f"; equivalence interval (1 - 2 alpha) [{eq_lo:+.2f}, {eq_hi:+.2f}]"
            + {True: " inside it", False: "", None: ": neither inside it nor the look's interval outside"}[
                ev.holds
            ]
        )
    cl.evidence = [ev]
    cl.verdict = verdict(cl.evidence)
    return cl


def claims(an: Analysis) -> list[Claim]:
    """The five claims of section 6.2, each with its rows, evidence and verdict."""
    rd = Reading.of(an)
    return [claim_a(rd), *(claim_against_base(rd, k) for k in AGAINST_BASE), claim_e(rd)]


def claims_data(an: Analysis) -> list[dict[str, Any]]:
    """The claims as plain data (JSON, the W&B dashboard)."""
    return [c.as_dict() for c in claims(an)]


RULES_NOTE = (
    "Each claim of the paper's section 6.2, read by a rule over the dev-PPL Δ of the rows it rests on, "
    "through the planner's procedure (the Decisions below: the pooled seed variance, each row's look and the "
    "alpha it spent). supported: every row decided as claimed; not supported: a row decided against the "
    "claim; undecided: otherwise (a row undecided at this look, or not measured). (A) compares A1 and A4 "
    "with the best head setting by the same test, at the alpha of the row's look; (E) is an equivalence "
    f"test within ±{NEARLY_IDENTICAL:.0%} of base's dev PPL (the paper's smallest effect, {PAPER_PPL_EFFECT} "
    f"of {PAPER_BASE_PPL}) at E's look, not supported when the look's interval lies outside that band."
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
