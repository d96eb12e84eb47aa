"""A paper's conclusions from its table, each read against our runs through the planner's sequential
procedure (report/decide.py): the same pooled seed variance, the same looks and the alpha each look spent,
so the claims and the Decisions section say one thing about every row. Table 3's (section 6.2) live in
ablate/paper/paper_claims3.yaml; a researcher's task declares its own file (Task.paper_claims) in the same
form (docs/tasks.md).

A claim rests on rows and reads their difference to a reference in one metric (the metric the paper's
table is read by, Analysis.read_by: dev PPL for Table 3; or the claim's own `metric`). Each row expects
**worse** or **better** (decided so against the reference at this look), or **nearly identical** (an
equivalence test within +-`within` of base's mean, at the alpha the row's look spent: TOST, the (1 - 2a)
interval inside the band; not supported when the look's (1 - a) interval lies wholly outside it, on one
side). The reference is base, or with `best_of` the row of those listed with the best mean (a listed row
that is itself the best holds against the claim; the best is picked by its point estimate, so a close
second can lose to it by chance: read the intervals). The verdicts:

- supported: every row the claim rests on is decided, as claimed;
- not supported: at least one row is decided against the claim;
- undecided: neither (a row not yet measured, or undecided at this look).

Pure functions over an Analysis and its looks.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from ablate.paper import PaperError
from ablate.report.analysis import Analysis, RowResult
from ablate.report.decide import Decision, Design, decide_values, read_looks
from ablate.tasks import Metric

SUPPORTED, NOT_SUPPORTED, UNDECIDED = "supported", "not supported", "undecided"
WORSE, BETTER, NEARLY = "worse", "better", "nearly identical"


@dataclass
class Evidence:
    """One row's decision in the claim's metric against its reference (base, or the best of `best_of`)."""

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
    """What every claim reads: the table's figures of one metric by row and seed, and the looks made."""

    an: Analysis
    metric: Metric
    values: dict[str, dict[int, float]]
    design: Design

    @classmethod
    def of(cls, an: Analysis, metric: Metric | None = None) -> Reading:
        metric = metric or an.read_by
        values = {rr.row: dict(rr.values[metric.name]) for rr in an.rows if rr.values[metric.name]}
        coll = an.coll
        looks = read_looks(coll.results_dir) if coll is not None and coll.results_dir else []
        return cls(an, metric, values, Design(metric, (coll.scale if coll is not None else "") or "", looks))

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


def _measured(rr: RowResult | None, metric: Metric) -> bool:
    return rr is not None and len(rr.values[metric.name]) > 0


@dataclass(frozen=True)
class Spec:
    """A paper's claims file: the report's title, the section's heading and note, and each claim as
    declared ({key, paper, rule, expect: {row: worse | better | nearly identical}, and optionally best_of,
    best_name, within, metric})."""

    title: str | None
    heading: str
    note: str | None
    claims: list[dict[str, Any]]


EXPECTS = (WORSE, BETTER, NEARLY)


@lru_cache(maxsize=16)
def read_spec(path: Path) -> Spec:
    """A claims file (YAML), checked: PaperError in one line naming the file and what is wrong."""
    import yaml

    try:
        d = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as e:
        where = getattr(e, "problem_mark", None)
        at = f" line {where.line + 1}" if where is not None else ""
        raise PaperError(f"{path}{at}: cannot read the paper's claims ({type(e).__name__})") from None
    claims = d.get("claims") or [] if isinstance(d, dict) else None
    if not isinstance(claims, list):
        raise PaperError(f"{path}: not a mapping with a list `claims`")
    for i, c in enumerate(claims, 1):
        _check_claim(path, i, c)
    return Spec(d.get("title"), d.get("heading") or "The paper's claims", d.get("note"), claims)


def _check_claim(path: Path, i: int, c: Any) -> None:
    what = f"{path}: claim {i}"
    if not isinstance(c, dict) or not all(isinstance(c.get(k), str) for k in ("key", "paper", "rule")):
        raise PaperError(f"{what}: needs key, paper and rule as text")
    expect = c.get("expect")
    if not isinstance(expect, dict) or not expect:
        raise PaperError(f"{what} ({c['key']}): `expect` maps rows to {', '.join(EXPECTS)}")
    for row, e in expect.items():
        if e not in EXPECTS:
            raise PaperError(f"{what} ({c['key']}): {row}: {e!r} is not one of {', '.join(EXPECTS)}")
    if NEARLY in expect.values() and not isinstance(c.get("within"), int | float):
        raise PaperError(f"{what} ({c['key']}): a nearly identical row needs `within` (a fraction of base)")


def spec_of(an: Analysis) -> Spec | None:
    path = an.task.paper_file("paper_claims") if an.task is not None else None
    return read_spec(path) if path else None


def report_title(an: Analysis) -> str:
    """The report's title: the paper's table it reproduces, else the task's variations."""
    spec = spec_of(an)
    if spec is not None and spec.title:
        return spec.title
    name = an.task.name if an.task is not None else "?"
    label = an.task.label if an.task is not None and an.task.label else "its declared metrics"
    return f"Variations of task {name}: {label}"


def _metric(an: Analysis, c: dict) -> Metric:
    by_name = {m.name: m for m in an.metrics}
    if c.get("metric") is None:
        return an.read_by
    if c["metric"] not in by_name:
        raise PaperError(f"claim {c['key']}: metric {c['metric']!r} is not one of {', '.join(by_name)}")
    return by_name[c["metric"]]


def read_claim(an: Analysis, c: dict) -> Claim:
    """One declared claim, its evidence and verdict."""
    rd = Reading.of(an, _metric(an, c))
    expect: dict[str, str] = c["expect"]
    cl = Claim(c["key"], c["paper"], c["rule"], list(c.get("best_of") or expect))
    if c.get("best_of"):
        _against_best(rd, cl, c, expect)
    else:
        cl.evidence = [
            _nearly(rd, cl, row, c["within"]) if e == NEARLY else _evidence(rd.decision(row), row, "base", e)
            for row, e in expect.items()
        ]
    cl.verdict = verdict(cl.evidence)
    return cl


def _against_best(rd: Reading, cl: Claim, c: dict, expect: dict[str, str]) -> None:
    """Each row against the best of `best_of` (the lowest mean where lower is better)."""
    m, an = rd.metric, rd.an
    if not _measured(an.get("base"), m):
        cl.evidence = [Evidence(r, "base", e) for r, e in expect.items()]
        cl.note = "base not measured"
        return
    sign = -1 if m.higher_is_better else 1
    measured = [rr for row in c["best_of"] if _measured(rr := an.get(row), m)]
    best = min(measured, key=lambda rr: sign * rr.summary(m.name)[0])
    for row, e in expect.items():
        if row == best.row:  # the row is itself the best setting: against the claim
            ev = Evidence(row, row, e, diff=0.0, holds=False, seeds=len(best.values[m.name]))
        else:
            ev = _evidence(rd.decision(row, best.row), row, best.row, e)
        cl.evidence.append(ev)
    name = c.get("best_name") or "setting"
    cl.note = f"best {name}: {best.row} (dev {m.label} {best.summary(m.name)[0]:.2f})"


def _nearly(rd: Reading, cl: Claim, row: str, within: float) -> Evidence:
    """`row` nearly identical to base: TOST within +-within x base's mean at the alpha of the row's look."""
    d = rd.decision(row)
    ev = _evidence(d, row, "base", NEARLY)
    base = rd.an.get("base")
    if ev.diff is not None and d.alpha > 0:
        mean = base.summary(rd.metric.name)[0]
        tol = within * abs(mean)
        note = f"tolerance ±{tol:.3f} ({within:.0%} of base's {mean:.2f})"
        eq_lo, eq_hi = d.interval(2 * d.alpha)
        if -tol < eq_lo and eq_hi < tol:
            ev.holds = True
        elif d.lo > tol or d.hi < -tol:
            ev.holds = False
        note += (
            f"; equivalence interval (1 - 2 alpha) [{eq_lo:+.2f}, {eq_hi:+.2f}]"
            + {True: " inside it", False: "", None: ": neither inside it nor the look's interval outside"}[
                ev.holds
            ]
        )
        cl.note = "; ".join(n for n in (cl.note, note) if n)
    return ev


def claims(an: Analysis) -> list[Claim]:
    """The paper's claims (the task's paper_claims; Table 3's for translation), each with its rows,
    evidence and verdict; none where the task declares no claims."""
    spec = spec_of(an)
    return [read_claim(an, c) for c in spec.claims] if spec else []


def claims_data(an: Analysis) -> list[dict[str, Any]]:
    """The claims as plain data (JSON, the W&B dashboard)."""
    return [c.as_dict() for c in claims(an)]


def rules_note(an: Analysis) -> str:
    return (
        f"Each claim of the paper, read by a rule over the dev-{an.read_by.label} Δ of the rows it rests on, "
        "through the planner's procedure (the Decisions below: the pooled seed variance, each row's look "
        "and the alpha it spent). supported: every row decided as claimed; not supported: a row decided "
        "against the claim; undecided: otherwise (a row undecided at this look, or not measured)."
    )


def _mark(ev: Evidence) -> str:
    return {True: "as claimed", False: "against", None: "undecided"}[ev.holds] if ev.diff is not None else ""


def claims_markdown(an: Analysis) -> list[str]:
    """The report's section: one line per claim with its verdict, its rule and each row's Δ and intervals."""
    spec = spec_of(an)
    if spec is None or not spec.claims:
        return []
    lines = [f"## {spec.heading}", "", spec.note or rules_note(an), ""]
    for cl in claims(an):
        rows = "; ".join(ev.text() + (f": {m}" if (m := _mark(ev)) else "") for ev in cl.evidence)
        note = f" {cl.note[0].upper()}{cl.note[1:]}." if cl.note else ""
        lines.append(f"- ({cl.key}) **{cl.verdict}**: {cl.paper} Rule: {cl.rule}.{note} {rows}.")
    return lines + [""]
