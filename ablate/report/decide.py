"""The ablation planner's decisions: for each row and each metric its task declares, whether the row's
difference to base is decided, and how many seeds would decide it (docs/planner.md states each estimator).

- The seed variance is pooled over the rows of the table: s^2 = sum (n_i - 1) s_i^2 / sum (n_i - 1), on
  df = sum (n_i - 1) degrees of freedom (a one-way analysis of variance's within-row mean square). A row's
  difference to base, d = mean(row) - mean(base), has the standard error s sqrt(1/n_row + 1/n_base) and
  its interval the t quantile on df: one row's own two or three seeds never carry the decision, so
  differences that happen to agree at two seeds give no zero-width interval. A row whose own spread is far
  from the other rows' (two-sided F test, p < FLAG_P) is flagged: the pooled variance may not suit it.
- States at this look's alpha a: **better** or **worse** (the (1 - a) interval excludes zero, in the
  metric's direction), **negligible** (TOST at a: the (1 - 2a) interval lies inside +-delta, delta the
  metric's `negligible`), else **undecided**. Every line also gives the 95% interval, and an undecided one
  the smallest |d| this look could have decided.
- Looks: the seeds a decision looks at grow, so each look spends part of alpha, by the Lan-DeMets spending
  function of O'Brien-Fleming type, alpha/2 a side (R gsDesign's sfLDOF): a(t) = 2 (2 - 2 Phi(z_{1-alpha/4}
  / sqrt(t))), t = the seeds per side at this look over the most any look of the row planned. The looks
  made are kept in `<results>/looks.jsonl` by `--decide-command`; a look spends what a(t) adds to what
  earlier looks spent (nominally, at its own level: a union bound over the looks). A look keeps what it
  concluded: a row decided at a look stays as that look decided it (difference, interval, alpha), and a
  look at the seeds a row still has is read as it was made, whatever other rows' seeds do to the pool.
- Seeds until decided: per side, the smallest n whose exact power (noncentral t) reaches POWER at the
  alpha left, for the observed difference (two-sided; for a difference below delta, TOST's one-sided test
  at delta - |d|), with s the pooled sd on the degrees of freedom the table will have: the other rows'
  and 2n - 2. Past `cap` seeds: not decidable within cap.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
from scipy import special as spc

from ablate.report.collect import Collection
from ablate.tasks import Metric

ALPHA, POWER, CAP = 0.05, 0.8, 20
FLAG_P = 0.01  # a row's spread this unlikely under the pooled variance is flagged
LOOKS = "looks.jsonl"


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


def spent(alpha: float, t: float) -> float:
    """The Lan-DeMets O'Brien-Fleming spending function, alpha/2 a side (gsDesign's sfLDOF): the two-sided
    alpha spent by information fraction t."""
    t = min(max(t, 1e-9), 1.0)
    return float(4 * spc.ndtr(spc.ndtri(alpha / 4) / math.sqrt(t)))


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
    seeds: int  # per side (the fewer of row and base) at this look
    planned: int  # seeds per side planned at this look
    alpha: float  # alpha this look spent
    # What the look concluded, kept so that a later read shows it as made (None in a line written before
    # looks kept it: that look is read again on today's pooled variance).
    state: str | None = None
    diff: float | None = None
    se: float | None = None
    df: int | None = None
    needed: int | None = None


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
            out.append(Look(**json.loads(line)))
        except (ValueError, TypeError) as e:
            raise LooksError(
                f"{path} line {n}: not a look ({type(e).__name__}); the alpha spent so far is unknown: "
                "restore the line or remove the file and its looks"
            ) from None
    return out


def record_looks(results: Path, looks: list[Look]) -> None:
    """Append the looks a decide command makes (one line each; earlier lines are never rewritten). A look
    at seeds already looked at is that look again: it is not written twice."""
    seen = {(lk.preset, lk.row, lk.metric, lk.seeds) for lk in read_looks(results)}
    new = [lk for lk in looks if (lk.preset, lk.row, lk.metric, lk.seeds) not in seen]
    if new:
        with open(Path(results) / LOOKS, "a", encoding="utf-8") as f:
            f.writelines(json.dumps(asdict(look)) + "\n" for look in new)


# ------------------------------------------------------------------------------------------------------------
# Decisions


@dataclass(frozen=True)
class Decision:
    row: str
    metric: Metric
    state: str  # better | worse | negligible | undecided | not compared
    diff: float | None  # mean(row) - mean(base)
    lo: float | None  # the (1 - alpha) interval of this look
    hi: float | None
    alpha: float  # this look's
    seeds: int  # per side now (the fewer)
    needed: int | None  # seeds per side that would decide it (undecided rows); None: past the cap
    planned: int  # the seeds this look's alpha was spent against
    se: float | None = None  # of diff: pooled sd x sqrt(1/n_row + 1/n_base)
    df: int = 0  # the pooled variance's
    cap: int = CAP
    span: float = math.inf  # the metric's range over the table's runs: no wider interval is printed
    flag: str = ""  # a row whose spread is far from the pool's
    cost_s: float | None = None  # the wall time of the runs `needed` adds, as the records took it
    recorded: bool = False  # as an earlier look recorded it (looks.jsonl), not read again now

    def interval(self, alpha: float) -> tuple[float, float]:
        half = t_quantile(1 - alpha / 2, self.df) * self.se
        return self.diff - half, self.diff + half

    def text(self) -> str:
        m = self.metric
        if self.diff is None:
            return f"{self.row} {m.label}: {self.state}"
        lo95, hi95 = self.interval(0.05)
        where = f"{self.diff:+.2f}, 95% interval {_iv(lo95, hi95, self.span)}"
        look = f"(pooled t on {self.df} df, alpha {self.alpha:.3g} at {self.seeds} seeds)"
        if self.recorded:
            look += f", as {LOOKS} recorded it"
        if self.state != "undecided":
            now = _iv(self.lo, self.hi, self.span)
            out = f"{self.row} {m.label}: {self.state}, {where}; at this look {now} {look}"
        else:
            half = (self.hi - self.lo) / 2
            could = (
                f"decides only |Δ| > {half:.2f}" if half < self.span else "decides no |Δ| this table shows"
            )
            out = f"{self.row} {m.label}: undecided, {where}; {could} at this look {look}"
            if self.needed:
                from ablate.jobs.estimate import duration

                took = f", ~{duration(self.cost_s)} as their records took" if self.cost_s else ""
                out += f"; {self.needed} seeds a side would decide it{took}"
            else:
                out += f"; not decidable within {self.cap} seeds"
        return out + (f"; {self.flag}" if self.flag else "")


def _iv(lo: float, hi: float, span: float) -> str:
    return f"[{lo:+.2f}, {hi:+.2f}]" if hi - lo <= span else f"wider than the table's range ({span:.2f})"


@dataclass(frozen=True)
class Design:
    """What every decision of one metric shares."""

    metric: Metric
    preset: str = ""
    looks: Sequence[Look] = ()
    alpha: float = ALPHA
    power: float = POWER
    cap: int = CAP
    negligible: float | None = None  # the metric's own where None


def decide(
    coll: Collection,
    metrics: Sequence[Metric],
    looks: Sequence[Look] = (),
    alpha: float = ALPHA,
    power: float = POWER,
    cap: int = CAP,
    delta: dict[str, float] | None = None,
    reference: str = "base",
) -> list[Decision]:
    """Every row's decision against `reference` for each metric (see the module's docstring)."""
    delta = delta or {}
    out = []
    for m in metrics:
        values = {row: _values(coll.finished(row), m) for row in coll.runs}
        design = Design(m, coll.scale or "", looks, alpha, power, cap, delta.get(m.name))
        for d in decide_values(values, design, reference=reference):
            out.append(replace(d, cost_s=_cost(coll, d)) if d.needed else d)
    return out


def _values(runs: dict, m: Metric) -> dict[int, float]:
    return {s: v for s, r in runs.items() if (v := r.metric(m.record_key)) is not None}


def decide_values(
    values: Mapping[str, Mapping[int, float]],
    design: Design,
    pool_over: Mapping | None = None,
    reference: str = "base",
) -> list[Decision]:
    """The decisions of one metric over a table {row: {seed: value}} against its row "base", the seed
    variance pooled over `pool_over` (a whole table of which `values` compares a part) or `values`."""
    base = values.get(reference, {})
    table = values if pool_over is None else pool_over
    pool = pooled([list(v.values()) for v in table.values()])
    seen = [v for by in table.values() for v in by.values()]
    span = max(seen) - min(seen) if seen else math.inf
    flags = _flags(table)
    out = []
    for row in (r for r in values if r != reference):
        d = _one(design, row, base, values[row], pool)
        flag = "; ".join(f for f in (flags.get(row), flags.get(reference)) if f)
        out.append(replace(d, span=span or math.inf, flag=flag))
    return out


def _flags(values: Mapping[str, Mapping[int, float]]) -> dict[str, str]:
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


def _one(design: Design, row: str, base: Mapping[int, float], mine: Mapping[int, float], pool) -> Decision:
    m, alpha, cap = design.metric, design.alpha, design.cap
    n = min(len(base), len(mine))
    if n == 0 or pool is None or pool.sd <= 0:
        return Decision(row, m, "not compared", None, None, None, alpha, n, None, n, cap=cap)
    negligible = m.negligible if design.negligible is None else design.negligible
    diff = float(np.mean(list(mine.values())) - np.mean(list(base.values())))
    se = pool.sd * math.sqrt(1 / len(mine) + 1 / len(base))
    other_df = pool.df - max(len(mine) - 1, 0) - max(len(base) - 1, 0)  # rows the command does not train
    before = [lk for lk in design.looks if (lk.preset, lk.row, lk.metric) == (design.preset, row, m.name)]
    if (made := _made(before, n)) is not None:
        return _as_recorded(made, row, m, cap)
    this = [lk for lk in before if lk.seeds == n]  # a look at these seeds: this one, read again
    used = sum(lk.alpha for lk in before if lk.seeds != n)

    def plan(left: float) -> int | None:
        return seeds_for(pool.sd, abs(diff), negligible, left, design.power, cap, other_df)

    if before:  # the largest plan of any look sets the information fraction (a smaller spends faster)
        planned = max(lk.planned for lk in before)
    else:  # a first look: it leaves alpha for one more at least
        planned = max(n + 1, plan(alpha - spent(alpha, n / cap)) or cap)
    if this:
        a = this[0].alpha
    else:
        a = (alpha - used) if n >= planned else max(spent(alpha, n / planned) - used, 0.0)
    d = Decision(row, m, "undecided", diff, diff, diff, a, n, None, planned, se, pool.df, cap)
    if a <= 0:
        return replace(d, lo=-math.inf, hi=math.inf)
    lo, hi = d.interval(a)
    if lo > 0 or hi < 0:
        state = "better" if (lo > 0) == m.higher_is_better else "worse"
    elif -negligible < (eq := d.interval(2 * a))[0] and eq[1] < negligible:
        state = "negligible"
    else:
        state = "undecided"
    needed = None
    if state == "undecided" and (found := plan(alpha - used - a)) is not None:
        needed = max(found, n + 1)
    return replace(d, state=state, lo=lo, hi=hi, needed=needed)


def _made(before: Sequence[Look], n: int) -> Look | None:
    """The look whose verdict stands: the first that decided the row (a sequential test stops there: later
    seeds and a pooled variance that moved with other rows reopen nothing), else the look at these seeds,
    where it kept what it concluded."""
    kept = [lk for lk in before if lk.state is not None]
    decided = sorted((lk for lk in kept if lk.state != "undecided"), key=lambda lk: lk.seeds)
    return decided[0] if decided else next((lk for lk in kept if lk.seeds == n), None)


def _as_recorded(lk: Look, row: str, m: Metric, cap: int) -> Decision:
    d = Decision(row, m, lk.state, lk.diff, None, None, lk.alpha, lk.seeds, lk.needed, lk.planned, lk.se,
                 lk.df, cap, recorded=True)  # fmt: skip
    lo, hi = d.interval(lk.alpha) if lk.alpha > 0 else (-math.inf, math.inf)
    return replace(d, lo=lo, hi=hi)


def _cost(coll: Collection, d: Decision) -> float | None:
    """The wall time of the runs that bring the row and base to `needed` seeds, at the mean wall time of
    each one's finished records (on the machines they ran on)."""
    total = 0.0
    for row in (d.row, "base"):
        runs = coll.finished(row)
        walls = [float(r.rec["wall_time_s"]) for r in runs.values() if r.rec.get("wall_time_s")]
        if not walls:
            return None
        total += max(0, (d.needed or 0) - len(runs)) * sum(walls) / len(walls)
    return total


def seeds_for(
    sd: float, effect: float, negligible: float, alpha: float, power_: float, cap: int, extra_df: int = 0
) -> int | None:
    """Seeds per side that decide a difference of `effect` with `power_` at the alpha left for the final
    look: its sign where it is at least `negligible`, else its equivalence (TOST's one-sided test at
    negligible - effect)."""
    if alpha <= 0:
        return None
    if effect >= negligible:
        return seeds_needed(sd, effect, alpha, power_, cap, extra_df=extra_df)
    return seeds_needed(sd, negligible - effect, alpha, power_, cap, one_sided=True, extra_df=extra_df)


# ------------------------------------------------------------------------------------------------------------
# The command that decides


@dataclass(frozen=True)
class Next:
    """What the decide command trains (its rows, base first, to `seeds` a side), why, and its looks."""

    rows: list[str]
    seeds: int
    why: str
    looks: list[Look] = field(default_factory=list)


def next_seeds(
    decisions: Sequence[Decision],
    preset: str,
    have: Mapping[str, int],
    only: Sequence[str] | None = None,
    reference: str = "base",
) -> Next | None:
    """The rows (of `only`, where given) and the seeds a side that decide the undecided rows, or that
    compare the rows not compared yet (a second seed of base and of each of them); `have` is each row's
    finished seeds. None: nothing more seeds would decide. The look is at every row compared, decided or
    not: the report shows them all, so all were seen, and a decided row's look keeps its alpha when other
    rows' seeds change the pooled variance."""
    mine = [d for d in decisions if only is None or d.row in only]
    looks = looks_made(decisions, preset)
    undecided = [d for d in mine if d.state == "undecided" and d.needed]
    if undecided:
        rows = list(dict.fromkeys(d.row for d in undecided))
        n = max(d.needed for d in undecided)  # a Hydra sweep is a product: rows that need fewer get n too
        return Next([reference, *rows], n, f"{n} seeds a side decide {', '.join(rows)}", looks)
    apart = list(dict.fromkeys(d.row for d in mine if d.state == "not compared"))
    if not apart:
        return None
    thin = [r for r in [reference, *apart] if have.get(r, 0) < 2]
    lacking = [r for r in [reference, *apart] if have.get(r, 0) == 0]
    reason = (
        f"no finished seed of {', '.join(lacking)}"
        if lacking
        else "no row has two seeds, so the seed variance is unknown"
    )
    why = f"not compared: {', '.join(apart)} ({reason}); this brings to two seeds: {', '.join(thin)}"
    return Next([reference, *apart], 2, why, looks)


def looks_made(decisions: Sequence[Decision], preset: str) -> list[Look]:
    """The look at every row compared, with what it concluded (a look already recorded is not made again)."""
    ok = [d for d in decisions if d.state != "not compared" and d.alpha > 0 and not d.recorded]
    return [_look(preset, d) for d in ok]


def _look(preset: str, d: Decision) -> Look:
    """The look a decision makes, with what it concluded."""
    made = {"state": d.state, "diff": d.diff, "se": d.se, "df": d.df, "needed": d.needed}
    return Look(preset, d.row, d.metric.name, d.seeds, d.needed or d.planned, d.alpha, **made)


def decide_command(
    coll: Collection,
    decisions: list[Decision],
    overrides: list[str],
    only: Sequence[str] | None = None,
    reference: str = "base",
) -> tuple[str, list[Look], str] | None:
    """The one `python -m ablate.run` that trains what `next_seeds` asks (the sweep skips the seeds already
    finished; the same seeds for every row: pairs), the looks it makes and why, or None."""
    have = {row: len(coll.finished(row)) for row in coll.runs}
    nxt = next_seeds(decisions, coll.scale or "", have, only, reference)
    if nxt is None:
        return None
    order = list(coll.runs)
    rows = sorted(set(nxt.rows) - {reference}, key=lambda r: order.index(r) if r in order else len(order))
    seeds = sorted({s for row in [reference, *rows] for s in coll.finished(row)})
    while len(seeds) < nxt.seeds:
        seeds.append(max(seeds, default=0) + 1)
    cmd = [
        "python -m ablate.run -m",
        f"model={','.join([reference, *rows])}",
        f"seed={','.join(map(str, seeds))}",
    ]
    return " ".join([*cmd, *overrides]), nxt.looks, nxt.why
