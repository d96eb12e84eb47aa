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

import math
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from ablate.paper import PaperError
from ablate.report.analysis import Analysis, RowResult, paper_file
from ablate.report.decide import (
    REFERENCE,
    Decision,
    Design,
    Look,
    _iv,
    decide,
    decide_tables,
    looks_made,
    read_looks,
)
from ablate.tasks import Metric

SUPPORTED, NOT_SUPPORTED, UNDECIDED = "supported", "not supported", "undecided"
WORSE, BETTER, NEARLY = "worse", "better", "nearly identical"


@dataclass
class Evidence:
    """One row's decision in the claim's metric against the reference, or (best_of) against each other
    setting the claim lists."""

    row: str
    against: str
    expect: str  # "worse" | "better" | "nearly identical"
    diff: float | None = None
    state: str = "not compared"  # the decision's, against `against`
    look: tuple[float, float] | None = None  # the interval at the deciding look's alpha
    ci95: tuple[float, float] | None = None
    alpha: float = 0.0
    seeds: int = 0  # per side, the fewer
    holds: bool | None = None  # True: decided as expected; False: decided against; None: undecided
    span: float = math.inf  # the metric's range over the table: no wider interval is printed
    missing: str = ""  # why the row cannot be read (a row the study does not have)
    pairs: list[Evidence] = field(default_factory=list)  # best_of: against each other setting

    def text(self) -> str:
        if self.missing:
            return f"{self.row}: {self.missing}"
        if self.pairs:
            each = ", ".join(p.text() for p in self.pairs)
            return f"{self.row} against each other setting: {each}"
        if self.diff is None:
            return f"{self.row}: not measured against {self.against}"
        return (
            f"{self.row} {self.diff:+.2f} vs {self.against}, {self.state} at this look "
            f"({_iv(*self.look, self.span)} at alpha {self.alpha:.3g}; 95% {_iv(*self.ci95, self.span)}; "
            f"{self.seeds} seeds)"
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
    metric: str = ""  # the label of the metric it is read by

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Reading:
    """What every claim reads: the table's figures of one metric by row and seed, the looks made, and the
    table's decisions against the reference (the one verdict the Decisions section gives)."""

    an: Analysis
    metric: Metric
    values: dict[str, dict[int, float]]
    design: Design
    decisions: dict[str, Decision]

    @classmethod
    def of(cls, an: Analysis, metric: Metric | None = None, reference: str = REFERENCE) -> Reading:
        metric = metric or an.read_by
        values = {rr.row: dict(rr.values[metric.name]) for rr in an.rows if rr.values[metric.name]}
        coll = an.coll
        looks = read_looks(coll.results_dir) if coll is not None and coll.results_dir else []
        preset = (coll.scale if coll is not None else "") or ""
        design = Design(preset, looks, reference=reference)
        table = _table_decisions(an, looks, reference)
        ds = {d.row: d for d in table if d.metric.name == metric.name}
        return cls(an, metric, values, design, ds)

    def decision(self, row: str) -> Decision | None:
        return self.decisions.get(row)

    def pairs(self, pairs: list[tuple[str, str]]) -> dict[tuple[str, str], Decision]:
        """The decisions of a claim's own comparisons (row, against another row), a family of their own
        at alpha (Holm), each keyed in looks.jsonl by what it compares."""
        values = {r: v for r, v in self.values.items()}
        for r, o in pairs:
            values.setdefault(r, {})
            values.setdefault(o, {})
        named = [(r, o, self.metric.name) for r, o in pairs]
        ds = decide_tables({self.metric.name: values}, [self.metric], self.design, named)
        return {(d.row, d.against): d for d in ds}


def _table_decisions(an: Analysis, looks, reference: str) -> list[Decision]:
    """The table's decisions (every row against the reference in every metric: the Decisions section's
    family), made once an analysis."""
    cache = an.__dict__.setdefault("_decisions", {})
    if reference not in cache:
        cache[reference] = decide(an.coll, an.metrics, looks, reference=reference) if an.coll else []
    return cache[reference]


def _evidence(d: Decision | None, row: str, against: str, expect: str) -> Evidence:
    ev = Evidence(row, against, expect)
    if d is None or d.diff is None:
        return ev
    ev.diff, ev.state, ev.alpha, ev.seeds, ev.span = d.diff, d.state, d.alpha, d.seeds, d.span
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
    best_name, within, metric}); `metric`, where the file gives it, is every claim's that names none."""

    title: str | None
    heading: str
    note: str | None
    claims: list[dict[str, Any]]
    metric: str | None = None


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
    metric = d.get("metric")
    if metric is not None and not isinstance(metric, str):
        raise PaperError(f"{path}: `metric` names one metric of the task, as text")
    return Spec(d.get("title"), d.get("heading") or "The paper's claims", d.get("note"), claims, metric)


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
    path = paper_file(an.task, "paper_claims", an.reference) if an.task is not None else None
    return read_spec(path) if path else None


def report_title(an: Analysis) -> str:
    """The report's title: the paper's table it reproduces, else the task's variations."""
    spec = spec_of(an)
    if spec is not None and spec.title:
        return spec.title
    name = an.task.name if an.task is not None else "?"
    label = an.task.label if an.task is not None and an.task.label else "its declared metrics"
    return f"Variations of task {name}: {label}"


def _metric(an: Analysis, c: dict, spec: Spec | None = None) -> Metric:
    """The metric a claim is read by: its own `metric`, else its file's, else the paper table's (read_by)."""
    by_name = {m.name: m for m in an.metrics}
    name = c.get("metric") or (spec.metric if spec is not None else None)
    if name is None:
        return an.read_by
    if name not in by_name:
        raise PaperError(f"claim {c['key']}: metric {name!r} is not one of {', '.join(by_name)}")
    return by_name[name]


def _exists(an: Analysis, row: str) -> bool:
    """A row the study has: a record, a row file, or a row of its paper's table."""
    coll = an.coll
    return an.get(row) is not None or (coll is not None and (row in coll.runs or row in coll.rows.models))


def read_claim(an: Analysis, c: dict, reference: str = REFERENCE, spec: Spec | None = None) -> Claim:
    """One declared claim, its evidence and verdict."""
    metric = _metric(an, c, spec)
    rd = Reading.of(an, metric, reference)
    expect: dict[str, str] = c["expect"]
    cl = Claim(c["key"], c["paper"], c["rule"], list(c.get("best_of") or expect), metric=metric.label)
    unknown = [r for r in dict.fromkeys([*expect, *(c.get("best_of") or [])]) if not _exists(an, r)]
    if c.get("best_of"):
        _against_each(rd, cl, c, expect)
    else:
        cl.evidence = [
            _nearly(rd, cl, row, c["within"], reference)
            if e == NEARLY
            else _evidence(rd.decision(row), row, reference, e)
            for row, e in expect.items()
        ]
    for ev in cl.evidence:
        if ev.row in unknown:
            ev.missing = "no such row in this study (no record, no row file, not in the paper's table)"
    if unknown:
        cl.note = "; ".join(n for n in (f"rows the study does not have: {', '.join(unknown)}", cl.note) if n)
    cl.verdict = verdict(cl.evidence)
    return cl


def _against_each(rd: Reading, cl: Claim, c: dict, expect: dict[str, str]) -> None:
    """Each row against every other setting of `best_of`, not against the one the seeds pick as best (that
    pick favours the best by chance: a winner's curse). A row is worse than the best setting when it is
    decided worse than any other; it is not when it is decided better than (or negligibly apart from)
    every other. The claim's comparisons are a family of their own, at alpha by Holm."""
    m, settings = rd.metric, list(c["best_of"])
    pairs = [(row, other) for row in expect for other in settings if other != row]
    ds = rd.pairs(pairs)
    for row, e in expect.items():
        each = [_evidence(ds.get((row, other)), row, other, e) for other in settings if other != row]
        ev = Evidence(row, "each other setting", e, pairs=each)
        decided = [p.state for p in each if p.state in ("better", "worse", "negligible")]
        if any(p.state == e for p in each):
            ev.holds = True
        elif each and len(decided) == len(each):
            ev.holds = False
        ev.diff = next((p.diff for p in each if p.diff is not None), None)
        cl.evidence.append(ev)
    sign = -1 if m.higher_is_better else 1
    measured = [rr for row in settings if _measured(rr := rd.an.get(row), m)]
    if measured:
        best = min(measured, key=lambda rr: sign * rr.summary(m.name)[0])
        name = c.get("best_name") or "setting"
        cl.note = (
            f"best {name} by its mean: {best.row} (dev {m.label} {best.summary(m.name)[0]:.2f}); each row is "
            f"tested against every other setting, not against the pick (Holm over the claim's {len(pairs)} "
            "comparisons)"
        )
    else:
        cl.note = f"none of {', '.join(settings)} measured"


def _nearly(rd: Reading, cl: Claim, row: str, within: float, reference: str) -> Evidence:
    """`row` nearly identical to the reference: TOST within +-within x the reference's mean at the alpha of
    the row's deciding look (its figures at that look)."""
    d = rd.decision(row)
    ev = _evidence(d, row, reference, NEARLY)
    ref = rd.an.get(reference)
    if ev.diff is not None and d.alpha > 0 and ref is not None:
        mean = ref.summary(rd.metric.name)[0]
        tol = within * abs(mean)
        note = f"tolerance ±{tol:.3f} ({within:.0%} of {reference}'s {mean:.2f})"
        eq_lo, eq_hi = d.look_interval(2 * d.alpha)
        if -tol < eq_lo and eq_hi < tol:
            ev.holds = True
        elif d.lo > tol or d.hi < -tol:
            ev.holds = False
        note += (
            f"; equivalence interval (1 - 2 alpha) {_iv(eq_lo, eq_hi, d.span)}"
            + {True: " inside it", False: "", None: ": neither inside it nor the look's interval outside"}[
                ev.holds
            ]
        )
        cl.note = "; ".join(n for n in (cl.note, note) if n)
    return ev


def claims(an: Analysis, reference: str | None = None) -> list[Claim]:
    """The paper's claims (the task's paper_claims; Table 3's for translation), each with its rows,
    evidence and verdict; none where the task declares no claims."""
    reference = reference or an.reference
    spec = spec_of(an)
    return [read_claim(an, c, reference, spec) for c in spec.claims] if spec else []


def pair_looks(an: Analysis, reference: str | None = None) -> list[Look]:
    """The looks a decide command makes at the claims' own comparisons (a row against another setting of
    `best_of`), beside the table's: each keyed by the two rows it compares. A comparison with the
    reference is the table's, recorded with it."""
    reference = reference or an.reference
    spec = spec_of(an)
    out: list[Look] = []
    for c in spec.claims if spec else []:
        if not c.get("best_of"):
            continue
        rd = Reading.of(an, _metric(an, c, spec), reference)
        pairs = [(r, o) for r in c["expect"] for o in c["best_of"] if o not in (r, reference)]
        out += looks_made(list(rd.pairs(pairs).values()), rd.design.preset)
    return out


def claims_data(an: Analysis, reference: str | None = None) -> list[dict[str, Any]]:
    """The claims as plain data (JSON, the W&B dashboard)."""
    reference = reference or an.reference
    return [c.as_dict() for c in claims(an, reference)]


def rules_note(an: Analysis, reference: str = REFERENCE) -> str:
    return (
        f"Each claim of the paper, read by a rule over the dev Δ (against {reference}) of the rows it rests "
        "on, in the metric its line names, through the planner's procedure (the Decisions below: the pooled "
        "seed variance, each row's looks and the alpha its share of the table's family gives it). "
        "supported: every row decided as claimed; not supported: a row decided against the claim; "
        "undecided: otherwise (a row undecided at this look, or not measured)."
    )


def _mark(ev: Evidence) -> str:
    if ev.missing or (ev.diff is None and not ev.pairs):
        return ""
    return {True: "as claimed", False: "against", None: "undecided"}[ev.holds]


def claims_markdown(an: Analysis, reference: str | None = None) -> list[str]:
    """The report's section: one line per claim with its verdict, its rule, the metric it is read by and
    each row's Δ and intervals."""
    reference = reference or an.reference
    spec = spec_of(an)
    if spec is None or not spec.claims:
        return []
    lines = [f"## {spec.heading}", "", spec.note or rules_note(an, reference), ""]
    for cl in claims(an, reference):
        rows = "; ".join(ev.text() + (f": {m}" if (m := _mark(ev)) else "") for ev in cl.evidence)
        note = f" {cl.note[0].upper()}{cl.note[1:]}." if cl.note else ""
        lines.append(
            f"- ({cl.key}) **{cl.verdict}**: {cl.paper} Rule: {cl.rule} (dev {cl.metric}).{note} {rows}."
        )
    return lines + [""]
