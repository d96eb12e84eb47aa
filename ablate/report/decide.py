"""The ablation planner's decisions: for each row and each metric its task declares, whether the row's
difference to the study's reference row is decided, and how many seeds would decide it (docs/planner.md
states each estimator and the procedure).

- The seed variance is pooled over the rows of the table: s^2 = sum (n_i - 1) s_i^2 / sum (n_i - 1), on
  df = sum (n_i - 1) degrees of freedom (a one-way analysis of variance's within-row mean square). A row's
  difference to the reference, d = mean(row) - mean(reference), has the standard error s sqrt(1/n_row +
  1/n_ref) and its interval the t quantile on df. A row whose own spread is far from the other rows'
  (two-sided F test, p < FLAG_P) is flagged: the pooled variance may not suit it.
- States at a look's alpha a: **better** or **worse** (the (1 - a) interval excludes zero, in the metric's
  direction), **negligible** (TOST at a: the (1 - 2a) interval lies inside +-delta, delta the metric's
  `negligible`), else **undecided**.
- The family: every comparison of the table (FAMILY "table": each row against the reference in every
  metric) or the rows of one metric ("metric"), at family-wise error rate alpha, by Holm's procedure for
  group-sequential tests (Maurer & Bretz 2013, Stat. Biopharm. Res. 5:311, the Holm graph): each
  comparison not yet decided better or worse holds alpha / (the comparisons not yet so decided); a
  comparison so decided passes its share on, and the others are tested again at every look they made
  with the larger share.
- One rule for a look's alpha: within its share s, a comparison's looks spend by the Lan-DeMets
  O'Brien-Fleming function (gsDesign's sfLDOF) a(t) = 2 (2 - 2 Phi(z_{1-s/4} / sqrt(t))), t = seeds a side
  at the look / P, P the most seeds a side any earlier look of the comparison planned or asked for (a first
  look: the fewest seeds whose final look, with what the first leaves, reaches POWER). A look at n >= P
  spends all that is left. A look tests at what a(t) adds to the earlier looks' (a union bound over the
  looks). The seeds a line asks for are the fewest N whose next look, at the alpha this rule gives it
  (a(min(1, N / P)) less what is spent), reaches POWER (exact power, noncentral t; for a difference below
  delta, TOST's one-sided test at delta - |d|), with s the pooled sd on the degrees of freedom the table
  will have. Past `cap` seeds: not decidable within cap.
- Looks are kept in `<results>/looks.jsonl` by `--decide-command`, keyed by what they compare (preset,
  row, against, metric). A comparison decided at a look stays as that look decided it; a look at the seeds a
  comparison still has is read with the figures it recorded.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
from scipy import special as spc

from ablate.jobs.command import run_command, sweep
from ablate.report.collect import Collection
from ablate.tasks import Metric

ALPHA, POWER, CAP = 0.05, 0.8, 20
FLAG_P = 0.01  # a row's spread this unlikely under the pooled variance is flagged
LOOKS = "looks.jsonl"
REFERENCE = "base"
FAMILIES = {
    "table": "every comparison of the table (each row against the reference, in every metric)",
    "metric": "the rows of one metric",
    "row": "each comparison alone (no error rate across the table: the simulation's yardstick)",
}
FAMILY = "table"
STATES = ("better", "worse", "negligible", "undecided")


# ------------------------------------------------------------------------------------------------------------
# Statistics


@dataclass(frozen=True)
class Pool:
    """The seed standard deviation pooled over rows, on its degrees of freedom."""

    sd: float
    df: int


def pooled(groups: Iterable[Sequence[float]]) -> Pool | None:
    """sqrt(sum (n_i - 1) s_i^2 / sum (n_i - 1)) over the groups of two values or more; None without any."""
    ss, df = 0.0, 0
    for g in groups:
        if len(g) >= 2:
            ss += float(np.var(g, ddof=1)) * (len(g) - 1)
            df += len(g) - 1
    return Pool(math.sqrt(ss / df), df) if df else None


def t_quantile(q: float, df: float) -> float:
    """Student's t quantile (scipy.special.stdtrit: scipy.stats.t.ppf without its overhead)."""
    return float(spc.stdtrit(df, q))


def power(sd: float, effect: float, alpha: float, n, df, one_sided: bool = False) -> np.ndarray:
    """Exact power of the pooled two-sample t test with n seeds a side on df degrees of freedom, for a
    true difference `effect`: P(T > c) (+ P(T < -c) two-sided), T noncentral t, ncp = effect / (sd
    sqrt(2 / n))."""
    n, df = np.asarray(n, float), np.asarray(df, float)
    ncp = effect / (sd * np.sqrt(2.0 / n))
    c = spc.stdtrit(df, 1 - alpha if one_sided else 1 - alpha / 2)
    up = 1.0 - spc.nctdtr(df, ncp, c)
    return up if one_sided else up + spc.nctdtr(df, ncp, -c)


def seeds_needed(
    sd: float,
    effect: float,
    alpha: float,
    power_: float,
    cap: int,
    one_sided: bool = False,
    extra_df: int = 0,
) -> int | None:
    """The smallest n in 2..cap seeds a side whose power (see `power`, on 2n - 2 + extra_df degrees of
    freedom) reaches `power_`; None past `cap`."""
    if effect <= 0 or sd <= 0 or alpha <= 0:
        return None
    n = np.arange(2, cap + 1)
    ok = np.nonzero(power(sd, effect, alpha, n, 2 * n - 2 + extra_df, one_sided) >= power_)[0]
    return int(n[ok[0]]) if ok.size else None


def spent(alpha: float, t):
    """The Lan-DeMets O'Brien-Fleming spending function, alpha/2 a side (gsDesign's sfLDOF): the two-sided
    alpha spent by information fraction t (a number or an array)."""
    t = np.clip(t, 1e-9, 1.0)
    out = 4 * spc.ndtr(spc.ndtri(alpha / 4) / np.sqrt(t))
    return float(out) if np.ndim(out) == 0 else out


def spread_p(values: Sequence[float], others: Pool | None) -> float | None:
    """Two-sided p of the F test of a row's seed variance against the other rows' pooled variance."""
    if len(values) < 2 or others is None or others.sd <= 0:
        return None
    f = float(np.var(values, ddof=1)) / others.sd**2
    lower = float(spc.fdtr(len(values) - 1, others.df, f))
    return min(1.0, 2 * min(lower, 1 - lower))


# ------------------------------------------------------------------------------------------------------------
# Looks


@dataclass(frozen=True)
class Look:
    preset: str
    row: str
    metric: str
    seeds: int  # per side (the fewer of the two rows) at this look
    planned: int  # P: the seeds a side this look's alpha was spent against
    alpha: float  # the alpha this look tested at
    # What the look concluded, kept so that a later read shows it as made (None in a line written before
    # looks kept it: that look is read again on today's pooled variance).
    state: str | None = None
    diff: float | None = None
    se: float | None = None
    df: int | None = None
    needed: int | None = None  # the seeds a side it asked for
    against: str = REFERENCE  # the row it compares with (a line without it: base, as every look was then)

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.preset, self.row, self.against, self.metric)


class LooksError(ValueError):
    """looks.jsonl cannot be read as looks: the alpha spent so far is unknown."""


def read_looks(results: Path) -> list[Look]:
    """The looks made so far on the records of `results` (LooksError names what is not one)."""
    path = Path(results) / LOOKS
    if not path.exists():
        return []
    if not path.is_file():
        raise LooksError(
            f"{path}: not a file; the alpha spent so far is unknown: put the looks file back in its place"
        )
    out = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        try:
            look = Look(**json.loads(line))
        except (ValueError, TypeError) as e:
            raise LooksError(
                f"{path} line {n}: not a look ({type(e).__name__}); the alpha spent so far is unknown: "
                "restore the line or remove the file and its looks"
            ) from None
        if problem := _bad(look):
            raise LooksError(
                f"{path} line {n}: {problem}; the alpha spent so far is unknown: restore the line or remove "
                "the file and its looks"
            )
        out.append(look)
    return out


def _count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def _finite(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _bad(lk: Look) -> str | None:
    """What makes a parsed line no look: a field of the wrong kind, a number that is not finite, a state
    that is not one of STATES."""
    for name in ("preset", "row", "metric", "against"):
        if not isinstance(getattr(lk, name), str):
            return f"{name} {getattr(lk, name)!r} is not text"
    for name in ("seeds", "planned"):
        if not _count(getattr(lk, name)):
            return f"{name} {getattr(lk, name)!r} is not a count of seeds"
    if not _finite(lk.alpha) or not 0 <= lk.alpha <= 1:
        return f"alpha {lk.alpha!r} is not a level in [0, 1]"
    if lk.state is None:
        return None
    if lk.state not in STATES:
        return f"state {lk.state!r} is not one of {', '.join(STATES)}"
    for name in ("diff", "se"):
        if not _finite(getattr(lk, name)):
            return f"{name} {getattr(lk, name)!r} is not a finite number (state {lk.state})"
    if not _count(lk.df):
        return f"df {lk.df!r} is not a count of degrees of freedom"
    if lk.needed is not None and not _count(lk.needed):
        return f"needed {lk.needed!r} is not a count of seeds"
    return None


def record_looks(results: Path, looks: list[Look]) -> int:
    """Append the looks a decide command makes (one line each; earlier lines are never rewritten), under the
    file's lock (records.folder.run_lock): a second command at once waits, then reads what the first wrote.
    A look at seeds already looked at is that look again: it is not written twice. Returns how many new
    looks a folder that cannot be written (a read-only copy of a table) did not keep: it is left as it is."""
    from ablate.records.folder import run_lock

    def unseen() -> list[Look]:
        seen = {(*lk.key, lk.seeds) for lk in read_looks(results)}
        return [lk for lk in looks if (*lk.key, lk.seeds) not in seen]

    path = Path(results) / LOOKS
    while True:
        if not (new := unseen()):  # nothing to keep: no lock taken (a read-only folder stays as it is)
            return 0
        try:
            with run_lock(path) as mine:
                if mine:
                    if new := unseen():  # what another command wrote meanwhile counts
                        with open(path, "a", encoding="utf-8") as f:
                            f.write("".join(json.dumps(asdict(lk)) + "\n" for lk in new))
                    return 0
        except OSError:  # read-only, or not ours to write: the evidence is not touched
            return len(new)
        time.sleep(0.02)


# ------------------------------------------------------------------------------------------------------------
# Decisions


@dataclass(frozen=True)
class Decision:
    row: str
    metric: Metric
    state: str  # better | worse | negligible | undecided | not compared
    diff: float | None  # mean(row) - mean(against) now: the difference of the means the tables show
    lo: float | None  # the interval at `alpha` of the look that decides it (or of this look)
    hi: float | None
    alpha: float  # that look's
    seeds: int  # per side now (the fewer)
    needed: int | None  # seeds a side that would decide it (undecided); None: past the cap
    planned: int  # P: the seeds a side that look's alpha was spent against
    se: float | None = None  # of diff now: pooled sd x sqrt(1/n_row + 1/n_against)
    df: int = 0  # the pooled variance's now
    cap: int = CAP
    span: float = math.inf  # the metric's range over the table's runs: no wider interval is printed
    flag: str = ""  # a row whose spread is far from the pool's
    cost_s: float | None = None  # the wall time of the runs `needed` adds, as the records took it
    recorded: bool = False  # the deciding look's figures are those looks.jsonl recorded
    against: str = REFERENCE
    share: float = ALPHA  # this comparison's share of the family's alpha (Holm) when it was tested
    family: int = 1  # comparisons in its family
    look_seeds: int = 0  # seeds a side at the look that decides it (or this look)
    look_diff: float | None = None  # the difference at that look, its standard error and df
    look_se: float | None = None
    look_df: int = 0
    why: str = ""  # not compared: why
    next_alpha: float | None = None  # the alpha the look at `needed` seeds would test at

    def interval(self, alpha: float) -> tuple[float, float]:
        """The (1 - alpha) interval of the difference of the means now."""
        half = t_quantile(1 - alpha / 2, self.df) * self.se
        return self.diff - half, self.diff + half

    def look_interval(self, alpha: float) -> tuple[float, float]:
        """The (1 - alpha) interval of the difference at the look that decides it (or this look)."""
        half = t_quantile(1 - alpha / 2, self.look_df) * self.look_se
        return self.look_diff - half, self.look_diff + half

    def text(self) -> str:
        m, vs = self.metric, "" if self.against == REFERENCE else f" against {self.against}"
        if self.diff is None or self.state == "not compared":
            return f"{self.row}{vs} {m.label}: not compared ({self.why or 'nothing to compare'})"
        lo95, hi95 = self.interval(0.05)
        now = f"Δ of the means {self.diff:+.2f}, 95% interval {_iv(lo95, hi95, self.span)}"
        how = (
            f"pooled t on {self.look_df or self.df} df, alpha {self.alpha:.3g} at {self.look_seeds} of "
            f"{self.planned} planned seeds a side, from a share {self.share:.3g} of alpha {ALPHA:g} over "
            f"{self.family} comparisons (Holm)"
        )
        look = _iv(self.lo, self.hi, self.span)
        if self.state != "undecided":
            at = f"decided at {self.look_seeds} seeds a side"
            if self.recorded:
                at += f" as {LOOKS} recorded it"
            if self.look_diff is not None and (self.recorded or self.look_seeds != self.seeds):
                at += f" (Δ then {self.look_diff:+.2f})"
            out = f"{self.row}{vs} {m.label}: {self.state}; {now}; {at}: {look} ({how})"
        else:
            half = (self.hi - self.lo) / 2
            could = (
                f"decides only |Δ| > {half:.2f}" if half < self.span else "decides no |Δ| this table shows"
            )
            out = f"{self.row}{vs} {m.label}: undecided; {now}; this look {could} ({how})"
            if self.needed:
                from ablate.jobs.estimate import duration

                took = f", ~{duration(self.cost_s)} as their records took" if self.cost_s else ""
                out += f"; {self.needed} seeds a side would decide it (at alpha {self.next_alpha:.3g}){took}"
            else:
                out += f"; not decidable within {self.cap} seeds"
        return out + (f"; {self.flag}" if self.flag else "")


def _iv(lo: float, hi: float, span: float) -> str:
    return f"[{lo:+.2f}, {hi:+.2f}]" if hi - lo <= span else f"wider than the table's range ({span:.2f})"


@dataclass(frozen=True)
class Design:
    """What every decision of a table shares."""

    preset: str = ""
    looks: Sequence[Look] = ()
    alpha: float = ALPHA
    power: float = POWER
    cap: int = CAP
    delta: Mapping[str, float] = field(default_factory=dict)  # a metric's negligible, where not its own
    family: str = FAMILY
    reference: str = REFERENCE


Values = Mapping[str, Mapping[int, float]]  # {row: {seed: value}} of one metric


def decide(
    coll: Collection,
    metrics: Sequence[Metric],
    looks: Sequence[Look] = (),
    alpha: float = ALPHA,
    power: float = POWER,
    cap: int = CAP,
    delta: dict[str, float] | None = None,
    reference: str = REFERENCE,
    family: str = FAMILY,
) -> list[Decision]:
    """Every row's decision against the reference for each metric (see the module's docstring): the one
    verdict the Decisions, the tables' bold cells, the plots and the claims read."""
    tables = {m.name: {row: _values(coll.finished(row), m) for row in coll.runs} for m in metrics}
    design = Design(coll.scale or "", looks, alpha, power, cap, delta or {}, family, reference)
    out = decide_tables(tables, metrics, design)
    return [replace(d, cost_s=_cost(coll, d, reference)) if d.needed else d for d in out]


def verdicts(decisions: Iterable[Decision]) -> dict[tuple[str, str], str]:
    """{(row, metric name): state} of the comparisons against the reference: what a cell's bold, a plot's
    colour and a claim read."""
    return {(d.row, d.metric.name): d.state for d in decisions}


def _values(runs: dict, m: Metric) -> dict[int, float]:
    return {s: v for s, r in runs.items() if (v := r.metric(m.record_key)) is not None}


def decide_values(values: Values, metric: Metric, design: Design = Design()) -> list[Decision]:
    """The decisions of one metric's table {row: {seed: value}}, each row against the reference."""
    return decide_tables({metric.name: values}, [metric], design)


def decide_tables(
    tables: Mapping[str, Values],
    metrics: Sequence[Metric],
    design: Design,
    pairs: Sequence[tuple[str, str, str]] | None = None,
) -> list[Decision]:
    """The decisions of `pairs` (row, against, metric name; by default every row against the reference in
    every metric), the seed variance of each metric pooled over its whole table, at the family-wise
    alpha of the design's family."""
    by_name = {m.name: m for m in metrics}
    if pairs is None:
        ref = design.reference
        pairs = [(row, ref, m.name) for m in metrics for row in tables[m.name] if row != ref]
    shared = {name: _Table.of(tables[name]) for name in {p[2] for p in pairs}}
    cmps = [_prepare(shared[name], row, vs, by_name[name], design) for row, vs, name in pairs]
    if design.family == "metric":
        fams = [[c for c in cmps if c.metric.name == m.name] for m in metrics]
    elif design.family == "table":
        fams = [cmps]
    elif design.family == "row":
        fams = [[c] for c in cmps]
    else:
        raise ValueError(f"family {design.family!r}: one of {', '.join(FAMILIES)}")
    done = {id(c): d for fam in fams for c, d in zip(fam, _holm(fam, design), strict=True)}
    return [done[id(c)] for c in cmps]


@dataclass(frozen=True)
class _Table:
    """What the comparisons of one metric share: its values, pooled variance, range and flags."""

    values: Values
    pool: Pool | None
    span: float
    flags: dict[str, str]

    @classmethod
    def of(cls, values: Values) -> _Table:
        pool = pooled([list(v.values()) for v in values.values()])
        seen = [v for by in values.values() for v in by.values()]
        span = (max(seen) - min(seen)) if seen else math.inf
        return cls(values, pool, span or math.inf, _flags(values))


@dataclass(frozen=True)
class _Cmp:
    """One comparison, prepared: its figures now, its looks, and why it is not compared."""

    row: str
    against: str
    metric: Metric
    n: int
    diff: float | None
    se: float | None
    df: int
    sd: float
    other_df: int  # of the rows the command does not train
    negligible: float
    why: str
    earlier: tuple[Look, ...]  # its looks at other seeds, by seeds
    this: Look | None  # its look at these seeds
    stands: Look | None  # the first look that decided it
    span: float
    flag: str


def _prepare(tab: _Table, row: str, vs: str, m: Metric, design: Design) -> _Cmp:
    mine, ref = tab.values.get(row, {}), tab.values.get(vs, {})
    n, pool = min(len(mine), len(ref)), tab.pool
    negligible = design.delta.get(m.name, m.negligible)
    key = (design.preset, row, vs, m.name)
    before = sorted((lk for lk in design.looks if lk.key == key), key=lambda lk: lk.seeds)
    flag = "; ".join(f for f in (tab.flags.get(row), tab.flags.get(vs)) if f)
    common = dict(row=row, against=vs, metric=m, n=n, negligible=negligible, span=tab.span, flag=flag)
    lacking = [r for r, v in ((vs, ref), (row, mine)) if not v]
    why = ""
    if lacking:
        why = f"no finished seed of {' or '.join(lacking)} with {m.label}"
    elif pool is None:
        why = "no row has two seeds, so the seed variance is unknown"
    elif pool.sd <= 0:
        why = f"no seed variance: every seed of every row gives the same {m.label}"
    if why:
        return _Cmp(**common, diff=None, se=None, df=0, sd=0.0, other_df=0, why=why, earlier=(), this=None,
                    stands=None)  # fmt: skip
    diff = float(np.mean(list(mine.values())) - np.mean(list(ref.values())))
    se = pool.sd * math.sqrt(1 / len(mine) + 1 / len(ref))
    other_df = pool.df - max(len(mine) - 1, 0) - max(len(ref) - 1, 0)
    kept = [lk for lk in before if lk.state is not None]
    decided = [lk for lk in kept if lk.state != "undecided"]
    this = next((lk for lk in before if lk.seeds == n), None)
    return _Cmp(**common, diff=diff, se=se, df=pool.df, sd=pool.sd, other_df=other_df, why="",
                earlier=tuple(lk for lk in before if lk.seeds != n), this=this,
                stands=decided[0] if decided else None)  # fmt: skip


def _holm(cmps: Sequence[_Cmp], design: Design) -> list[Decision]:
    """Holm's procedure over the family's group-sequential tests (Maurer & Bretz 2013): each comparison
    not decided better or worse holds alpha / their number; a decision passes its share to the rest, which
    are tested again (at every look they made) with theirs, until none is newly decided."""
    out: dict[int, Decision] = {}
    while True:
        open_ = [c for c in cmps if id(c) not in out]
        share = design.alpha / max(len(open_), 1)
        trial = {id(c): _test(c, share, design) for c in open_}
        new = {k: d for k, d in trial.items() if d.state in ("better", "worse")}
        out.update(new)
        if not new:
            out.update(trial)
            return [replace(out[id(c)], family=len(cmps)) for c in cmps]


def _decided(
    d: float, se: float, df: int, a: float, m: Metric, negligible: float
) -> tuple[str, float, float]:
    """(state, lo, hi) of a difference d (se, df) tested at alpha a."""
    if a <= 0:
        return "undecided", -math.inf, math.inf
    half = t_quantile(1 - a / 2, df) * se
    lo, hi = d - half, d + half
    if lo > 0 or hi < 0:
        return ("better" if (lo > 0) == m.higher_is_better else "worse"), lo, hi
    eq = t_quantile(1 - a, df) * se
    if -negligible < d - eq and d + eq < negligible:
        return "negligible", lo, hi
    return "undecided", lo, hi


def _test(c: _Cmp, share: float, design: Design) -> Decision:
    """The comparison's group-sequential test at `share`: its earlier looks, each at what the spending
    adds by its plan, then this look (module docstring: one rule for a look's alpha)."""
    m = c.metric
    d0 = Decision(c.row, m, "not compared", c.diff, None, None, 0.0, c.n, None, c.n, c.se, c.df, design.cap,
                  c.span, c.flag, against=c.against, share=share, look_seeds=c.n, why=c.why)  # fmt: skip
    if c.why:
        return d0
    if c.stands is not None:
        return _as_recorded(d0, c.stands, c.stands.alpha)
    used, plan = 0.0, 0
    for lk in c.earlier:  # each earlier look spends at the plan it had; one that kept its figures is tested
        plan = max(plan, lk.planned)
        now = max(used, spent(share, lk.seeds / plan))
        if lk.state is not None and lk.seeds < c.n:
            state, _, _ = _decided(lk.diff, lk.se, lk.df, now - used, m, c.negligible)
            if state in ("better", "worse"):  # its share grew since (Holm): that look decides it now
                return _as_recorded(d0, replace(lk, state=state), now - used)
        used, plan = now, max(plan, lk.needed or 0)
    if c.this is not None:
        plan = max(plan, c.this.planned)
    elif not plan:
        plan = _first_plan(c, share, design)
    a = share - used if c.n >= plan else max(spent(share, c.n / plan) - used, 0.0)
    figs = (
        (c.this.diff, c.this.se, c.this.df) if c.this is not None and c.this.state else (c.diff, c.se, c.df)
    )
    state, lo, hi = _decided(*figs, a, m, c.negligible)
    d = replace(d0, state=state, lo=lo, hi=hi, alpha=a, planned=plan, look_diff=figs[0], look_se=figs[1],
                look_df=figs[2],
                recorded=c.this is not None and c.this.state is not None)  # fmt: skip
    if state != "undecided":
        return d
    needed, next_alpha = _needed(c, share, plan, used + a, design)
    return replace(d, needed=needed, next_alpha=next_alpha)


def _as_recorded(d0: Decision, lk: Look, alpha: float) -> Decision:
    """The decision a look made, as it recorded its figures, at `alpha`."""
    half = t_quantile(1 - alpha / 2, lk.df) * lk.se if alpha > 0 else math.inf
    figs = {"look_diff": lk.diff, "look_se": lk.se, "look_df": lk.df, "look_seeds": lk.seeds}
    return replace(d0, state=lk.state, lo=lk.diff - half, hi=lk.diff + half, alpha=alpha, planned=lk.planned,
                   recorded=True, **figs)  # fmt: skip


def _level(share: float, n: np.ndarray, plan: int, used: float) -> np.ndarray:
    """The alpha a look at n seeds a side tests at, after `used`: a(min(1, n / max(plan, n))) less used, all
    that is left at n >= plan."""
    return np.where(n >= plan, share - used, spent(share, np.minimum(1.0, n / plan)) - used)


def _reaches(c: _Cmp, n: np.ndarray, level: np.ndarray, design: Design) -> np.ndarray:
    """Whether a look at n seeds a side, at `level`, decides the observed difference with the design's
    power: its sign where it is at least negligible, else its equivalence (TOST's one-sided test)."""
    effect = abs(c.diff)
    ok = level > 0
    lv = np.where(ok, level, 0.5)
    df = 2 * n - 2 + c.other_df
    if effect >= c.negligible:
        p = power(c.sd, effect, lv, n, df) if effect > 0 else np.zeros(n.shape)
    else:
        p = power(c.sd, c.negligible - effect, lv, n, df, one_sided=True)
    return ok & (p >= design.power)


def _first_plan(c: _Cmp, share: float, design: Design) -> int:
    """P of a first look: the fewest N (more than it has) whose look at N, with all this look leaves,
    reaches the power; the cap where none does."""
    n = np.arange(c.n + 1, design.cap + 1)
    if not n.size:
        return max(c.n, design.cap)
    ok = np.nonzero(_reaches(c, n, share - spent(share, c.n / n), design))[0]
    return int(n[ok[0]]) if ok.size else design.cap


def _needed(c: _Cmp, share: float, plan: int, used: float, design: Design) -> tuple[int | None, float | None]:
    """The fewest seeds a side whose next look, at the alpha the rule gives it, reaches the power."""
    n = np.arange(c.n + 1, design.cap + 1)
    level = _level(share, n, plan, used)
    ok = np.nonzero(_reaches(c, n, level, design))[0]
    return (int(n[ok[0]]), float(level[ok[0]])) if ok.size else (None, None)


def _flags(values: Values) -> dict[str, str]:
    """Each row whose spread is far from the other rows' pooled spread (spread_p below FLAG_P), in words."""
    own = {
        r: (float(np.var(list(v.values()), ddof=1)) * (len(v) - 1), len(v) - 1)
        for r, v in values.items()
        if len(v) >= 2
    }
    ss, df = sum(x for x, _ in own.values()), sum(n for _, n in own.values())
    out = {}
    for row, (ss_i, df_i) in own.items():
        rest = Pool(math.sqrt((ss - ss_i) / (df - df_i)), df - df_i) if df > df_i else None
        p = spread_p(list(values[row].values()), rest)
        if p is not None and p < FLAG_P:
            sd = math.sqrt(ss_i / df_i)
            out[row] = (
                f"{row}'s seeds spread sd {sd:.2f} against the other rows' {rest.sd:.2f} (F test p {p:.2g})"
            )
    return out


def _cost(coll: Collection, d: Decision, reference: str) -> float | None:
    """The wall time of the runs that bring the row and the reference to `needed` seeds, at the mean wall
    time of each one's finished records (on the machines they ran on)."""
    total = 0.0
    for row in (d.row, reference):
        runs = coll.finished(row)
        walls = [float(r.rec["wall_time_s"]) for r in runs.values() if r.rec.get("wall_time_s")]
        if not walls:
            return None
        total += max(0, (d.needed or 0) - len(runs)) * sum(walls) / len(walls)
    return total


# ------------------------------------------------------------------------------------------------------------
# The command that decides


@dataclass(frozen=True)
class Next:
    """What the decide command trains (each row's seeds a side to reach, the reference's the most any
    comparison asks), why, and its looks."""

    seeds: dict[str, int]
    why: str
    looks: list[Look] = field(default_factory=list)


def next_seeds(
    decisions: Sequence[Decision],
    preset: str,
    have: Mapping[str, int],
    only: Sequence[str] | None = None,
    reference: str = REFERENCE,
) -> Next | None:
    """The seeds a side each row (of `only`, where given) and the reference need: for an undecided row the
    seeds its decision asks for, for a row not compared two (where seeds are what it lacks); `have` is each
    row's finished seeds. None: nothing more seeds would decide. The look is at every comparison made,
    decided or not: the report shows them all, so all were seen."""
    mine = [d for d in decisions if d.against == reference and (only is None or d.row in only)]
    looks = looks_made(decisions, preset)
    need: dict[str, int] = {}
    undecided = [d for d in mine if d.state == "undecided" and d.needed]
    for d in undecided:
        need[d.row] = max(need.get(d.row, 0), d.needed)
    if need:
        need = {reference: max(need.values())} | need
        rows = ", ".join(f"{r} {n}" for r, n in need.items())
        return Next(need, f"seeds a side that decide them: {rows}", looks)
    short = [d for d in mine if d.state == "not compared" and "seed" in d.why and "variance:" not in d.why]
    apart = list(dict.fromkeys(d.row for d in short))
    if not apart:
        unseen = {d.why for d in mine if d.state == "not compared"}
        return Next({}, "; ".join(sorted(unseen)), looks) if unseen else None
    thin = [r for r in [reference, *apart] if have.get(r, 0) < 2]
    lacking = [r for r in [reference, *apart] if have.get(r, 0) == 0]
    reason = (
        f"no finished seed of {', '.join(lacking)}"
        if lacking
        else "no row has two seeds, so the seed variance is unknown"
    )
    why = f"not compared: {', '.join(apart)} ({reason}); this brings to two seeds: {', '.join(thin)}"
    return Next({r: 2 for r in thin}, why, looks)


def looks_made(decisions: Sequence[Decision], preset: str) -> list[Look]:
    """The look at every comparison made, with what it concluded (a look already recorded is not made
    again: a decided comparison's recorded look, or the look at these seeds)."""
    ok = [d for d in decisions if d.state != "not compared" and d.alpha > 0 and not d.recorded]
    return [_look(preset, d) for d in ok if d.look_seeds == d.seeds]


def _look(preset: str, d: Decision) -> Look:
    """The look a decision makes, with what it concluded."""
    made = {"state": d.state, "diff": d.diff, "se": d.se, "df": d.df, "needed": d.needed}
    return Look(preset, d.row, d.metric.name, d.seeds, d.planned, d.alpha, **made, against=d.against)


def _to_add(have: Iterable[int], target: int) -> list[int]:
    """The seeds that bring a row holding `have` to `target`: the smallest numbers it lacks (so rows and the
    reference share seed numbers: pairs)."""
    have, out, s = set(have), [], 1
    while len(have) + len(out) < target:
        if s not in have:
            out.append(s)
        s += 1
    return out


def decide_command(
    coll: Collection,
    decisions: list[Decision],
    overrides: list[str],
    only: Sequence[str] | None = None,
    reference: str = REFERENCE,
) -> tuple[str, list[Look], str] | None:
    """The `python -m ablate.run` commands that train exactly the seeds `next_seeds` asks of each row, one
    command a distinct list of seeds (a Hydra sweep is a product of rows and seeds), each printed by
    run_command (`overrides`: argv words, shell-quoted there), the looks they make, and why with what they
    cost: the plan's estimate of each of those runs (ablate.jobs.plan); or None."""
    have = {row: len(coll.finished(row)) for row in coll.runs}
    nxt = next_seeds(decisions, coll.scale or "", have, only, reference)
    if nxt is None:
        return None
    if not nxt.seeds:
        return "", nxt.looks, f"nothing to train: {nxt.why}"
    order = [reference, *coll.runs]
    groups: dict[tuple[int, ...], list[str]] = {}
    for row in sorted(nxt.seeds, key=lambda r: order.index(r) if r in order else len(order)):
        add = tuple(_to_add(coll.finished(row), nxt.seeds[row]))
        if add:
            groups.setdefault(add, []).append(row)
    cmds = [
        run_command([sweep("model", rows), sweep("seed", seeds), *overrides], multirun=True)
        for seeds, rows in sorted(groups.items(), key=lambda g: (-len(g[0]), g[0]))
    ]
    runs = [(row, s) for seeds, rows in groups.items() for row in rows for s in seeds]
    cost = _plan_cost(coll, runs, overrides)
    return "\n".join(cmds), nxt.looks, f"{nxt.why}; {len(runs)} runs in {len(cmds)} command(s):\n{cost}"


def _plan_cost(coll: Collection, runs: list[tuple[str, int]], overrides: list[str]) -> str:
    """The plan's closing line for exactly `runs` (row, seed), one at a time: each run's estimate as `--plan`
    makes it (ablate.jobs.plan.run_estimate, from the row's own record's config at that seed), and the one
    calibration command that gives the runs of unknown time one."""
    from ablate.jobs import plan

    outcomes = []
    for row, seed in runs:
        o = {"status": plan.TO_TRAIN, "estimate_s": None}
        try:
            cfg = _config(coll, row, seed, overrides)
            o["estimate_s"] = plan.run_estimate(cfg).seconds
            if o["estimate_s"] is None:
                o["calibration"] = plan.calibration(cfg, [*overrides, f"model={row}", f"seed={seed}"])
        except Exception:  # noqa: BLE001 - a record whose config no longer reads: its time is unknown
            pass
        outcomes.append(o)
    text, _ = plan.summary(outcomes, parallel=1, how="the runs one after another; `--plan` on each command "
                           "gives its wall time at its launcher's parallelism")  # fmt: skip
    return text.replace("\n[plan] ", "\n").removeprefix("[plan] ")


def _config(coll: Collection, row: str, seed: int, overrides: Sequence[str] = ()):
    """The config a printed command's run of `row` at `seed` would have: its own newest record's (else the
    template's), at this seed, into this results folder, with the threads the command gives (a record's
    threads are not part of its identity, so the printed command does not repeat them)."""
    from ablate.config.schema import RunConfig
    from ablate.records.trust import record_config

    if not coll.runs.get(row):
        raise ValueError(f"{row}: no record to take its config from")
    cfg = record_config(list(coll.runs[row].values())[-1].rec)  # ForeignRecord: code not this study's
    given = dict(o.split("=", 1) for o in overrides if o.startswith("trainer.threads="))
    threads = given.get("trainer.threads")
    cfg.trainer.threads = RunConfig().trainer.threads if threads in (None, "null") else int(threads)
    cfg.seed, cfg.results_dir = seed, str(coll.results_dir)
    return cfg
