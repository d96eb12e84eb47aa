"""The ablation planner's decisions: for each row and each metric its task declares, whether the row's
difference to base is decided, and how many seeds would decide it (docs/planner.md).

- States: **better** or **worse** (the row's difference to base has a two-sided (1 - a) t interval that
  excludes zero, in the metric's direction), **negligible** (the equivalence test TOST at a: the (1 - 2a)
  interval lies inside +-delta, delta the metric's `negligible`), else **undecided**. The t interval is the
  paired t over shared seeds where every seed of the row has base's, else Welch's.
- Looks: the seeds a decision looks at grow, so each look spends part of alpha, by the Lan-DeMets spending
  function of O'Brien-Fleming's bounds: a(t) = 2 - 2 Phi(z_{1-alpha/2} / sqrt(t)), t = the seeds per side
  at this look over the seeds planned. The looks made (the seeds at each, the alpha spent) are kept in
  `<results>/looks.jsonl` by `--decide-command`; a look spends what a(t) adds to what earlier looks spent,
  so however often the rows are tested again, the chance of a false decision stays at most alpha.
- Seeds until decided: per side, for power 0.8 at the alpha of the last look, with the seed variance
  pooled over the rows of the table (each row's variance about its own mean): the smallest n with
  n >= 2 s^2 (t_{1-a/2, 2n-2} + t_{power, 2n-2})^2 / d^2, d the observed difference (for a row whose
  difference is below delta: n for TOST, with (delta - |d|) and t_{1-a}); the normal quantiles alone
  undercount at a few seeds. Past `cap` seeds: not decidable within cap.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from scipy import stats as sps

from ablate.report import stats
from ablate.report.collect import Collection
from ablate.tasks import Metric

ALPHA, POWER, CAP = 0.05, 0.8, 20
LOOKS = "looks.jsonl"


# ------------------------------------------------------------------------------------------------------------
# Statistics


def pooled_sd(groups: Iterable[Sequence[float]]) -> float | None:
    """sqrt(sum (n_i - 1) s_i^2 / sum (n_i - 1)) over the groups of two values or more."""
    ss, df = 0.0, 0
    for g in groups:
        if len(g) >= 2:
            ss += statistics.variance(g) * (len(g) - 1)
            df += len(g) - 1
    return math.sqrt(ss / df) if df else None


def seeds_needed(
    sd: float,
    effect: float,
    alpha: float,
    power: float,
    cap: int,
    one_sided: bool = False,
    paired: bool = False,
) -> int | None:
    """Seeds per side for a two-sample t-test (two-sided; one-sided for each half of TOST) to find
    `effect` with `power` at `alpha`: the smallest n >= 2 with n >= 2 sd^2 (t_a + t_power)^2 / effect^2 on
    2n - 2 degrees of freedom (n - 1 where the seeds are paired: the variance of a difference is the same,
    2 sd^2 for independent seeds, its degrees of freedom are the pairs'). None past `cap`."""
    if effect <= 0:
        return None
    q = 1 - alpha if one_sided else 1 - alpha / 2
    for n in range(2, cap + 1):
        df = n - 1 if paired else 2 * n - 2
        if n >= 2 * sd**2 * (sps.t.ppf(q, df) + sps.t.ppf(power, df)) ** 2 / effect**2:
            return n
    return None


def t_interval(
    base: dict[int, float], row: dict[int, float], alpha: float
) -> tuple[float, float, float, str] | None:
    """(difference row - base, lo, hi, test) at level 1 - alpha: paired t over shared seeds where every seed
    of the row has base's, else Welch's; None below two seeds a side."""
    t = stats.against_base(base, row, conf=1 - alpha)
    return None if t is None else (t.diff, t.lo, t.hi, t.kind)


def tost(
    base: dict[int, float], row: dict[int, float], delta: float, alpha: float
) -> tuple[float, float, bool] | None:
    """Two one-sided tests at alpha: the (1 - 2 alpha) interval of the difference, and whether it lies in
    (-delta, delta)."""
    found = t_interval(base, row, 2 * alpha)
    if found is None:
        return None
    _, lo, hi, _ = found
    return lo, hi, -delta < lo and hi < delta


def spent(alpha: float, t: float) -> float:
    """O'Brien-Fleming's spending function (Lan & DeMets 1983): the alpha spent by information fraction t."""
    t = min(max(t, 1e-9), 1.0)
    return float(2 - 2 * sps.norm.cdf(sps.norm.ppf(1 - alpha / 2) / math.sqrt(t)))


# ------------------------------------------------------------------------------------------------------------
# Looks and decisions


@dataclass(frozen=True)
class Look:
    preset: str
    row: str
    metric: str
    seeds: int  # per side (the fewer of row and base) at this look
    planned: int  # seeds per side planned at this look
    alpha: float  # alpha this look spent


class LooksError(ValueError):
    """looks.jsonl holds a line that is not a look: the alpha spent so far is unknown."""


def read_looks(results: Path) -> list[Look]:
    """The looks made so far on the records of `results` (LooksError names a line that is not one)."""
    path = Path(results) / LOOKS
    if not path.is_file():
        return []
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


@dataclass(frozen=True)
class Decision:
    row: str
    metric: Metric
    state: str  # better | worse | negligible | undecided | not compared
    diff: float | None
    lo: float | None
    hi: float | None
    test: str
    alpha: float  # this look's
    seeds: int  # per side now
    needed: int | None  # seeds per side that would decide it (undecided rows); None: past the cap
    planned: int  # the seeds this look's alpha was spent against
    cost_s: float | None = None  # the wall time of the runs `needed` adds, as the records took it

    def text(self) -> str:
        m = self.metric
        if self.diff is None:
            return f"{self.row} {m.label}: {self.state}"
        where = f"{self.diff:+.2f} [{self.lo:+.2f}, {self.hi:+.2f}] ({self.test}, alpha {self.alpha:.3g})"
        more = ""
        if self.state == "undecided":
            more = f"; not decidable within {CAP} seeds"
            if self.needed:
                from ablate.jobs.estimate import duration

                took = f", ~{duration(self.cost_s)} as their records took" if self.cost_s else ""
                more = f"; {self.needed} seeds a side would decide it{took}"
        return f"{self.row} {m.label}: {self.state}, {where} at {self.seeds} seeds{more}"


def decide(
    coll: Collection,
    metrics: Sequence[Metric],
    looks: list[Look] = (),
    alpha: float = ALPHA,
    power: float = POWER,
    cap: int = CAP,
    delta: dict[str, float] | None = None,
) -> list[Decision]:
    """Every row's decision against base for each metric (see the module's docstring)."""
    delta = delta or {}
    base = coll.finished("base")
    out = []
    for m in metrics:
        values = {row: _values(coll.finished(row), m) for row in coll.runs}
        sd = pooled_sd([list(v.values()) for v in values.values()])
        for row in (r for r in coll.runs if r != "base"):
            d = _one(row, m, _values(base, m), values[row], sd, looks, coll.scale, alpha, power, cap, delta)
            out.append(replace(d, cost_s=_cost(coll, d)) if d.needed else d)
    return out


def _values(runs: dict, m: Metric) -> dict[int, float]:
    return {s: v for s, r in runs.items() if (v := r.metric(m.record_key)) is not None}


def _one(row, m, base, mine, sd, looks, preset, alpha, power, cap, delta) -> Decision:
    n = min(len(base), len(mine))
    negligible = delta.get(m.name, m.negligible)
    found = t_interval(base, mine, alpha)
    if found is None or sd is None:
        return Decision(row, m, "not compared", None, None, None, "", alpha, n, None, n)
    before = [lk for lk in looks if (lk.preset, lk.row, lk.metric) == (preset, row, m.name)]
    this = [lk for lk in before if lk.seeds == n]  # a look at these seeds: this one, read again
    used = sum(lk.alpha for lk in before if lk.seeds != n)
    effect = abs(found[0])
    if before:  # the largest plan of any look sets the information fraction (a smaller spends faster)
        planned = max(lk.planned for lk in before)
    else:  # a first look: it leaves alpha for one more at least
        guess = seeds_for(sd, effect, negligible, alpha, power, cap, alpha - spent(alpha, n / cap))
        planned = max(n + 1, guess or cap)
    if this:
        a = this[0].alpha
    else:
        a = (alpha - used) if n >= planned else max(spent(alpha, n / planned) - used, 0.0)
    if a <= 0:
        return Decision(row, m, "undecided", *found[:3], found[3], 0.0, n, None, planned)
    diff, lo, hi, test = t_interval(base, mine, a)
    good = m.higher_is_better
    if lo > 0 or hi < 0:
        state = "better" if (lo > 0) == good else "worse"
    elif (eq := tost(base, mine, negligible, a)) and eq[2]:
        state = "negligible"
    else:
        state = "undecided"
    needed = None
    if state == "undecided":
        needed = seeds_for(sd, abs(diff), negligible, alpha, power, cap, alpha - used - a)
        needed = None if needed is None else max(needed, n + 1)
    return Decision(row, m, state, diff, lo, hi, test, a, n, needed, planned)


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
    sd: float, effect: float, negligible: float, alpha: float, power: float, cap: int, left: float
) -> int | None:
    """Seeds per side that decide a difference of `effect` with `power` at the alpha `left` for the
    final look: its sign where it is at least `negligible`, else its equivalence (TOST, one-sided)."""
    if left <= 0:
        return None
    if effect >= negligible:  # the decide command trains the same seeds for the row and base: pairs
        return seeds_needed(sd, effect, left, power, cap, paired=True)
    return seeds_needed(sd, negligible - effect, left, power, cap, one_sided=True, paired=True)


def decide_command(
    coll: Collection, decisions: list[Decision], overrides: list[str], only: Sequence[str] | None = None
) -> tuple[str, list[Look]] | None:
    """The one `python -m ablate.run` that trains the seeds the undecided rows (of `only`, where given:
    one claim's rows) need, with base's beside them (the sweep skips the seeds already finished), and the
    looks it makes. The look is at every row compared, decided or not: the report shows them all, so all
    were seen, and a decided row's look keeps its alpha when other rows' seeds change the pooled variance."""
    undecided = [d for d in decisions if d.state == "undecided" and d.needed]
    chosen = [d for d in undecided if only is None or d.row in only]
    if not chosen:
        return None
    rows = sorted({d.row for d in chosen}, key=list(coll.runs).index)
    n = max(d.needed for d in chosen)  # a Hydra sweep is a product: rows that need fewer get n too
    seeds = sorted({s for row in ["base", *rows] for s in coll.finished(row)})
    while len(seeds) < n:
        seeds.append(max(seeds, default=0) + 1)
    cmd = [
        "python -m ablate.run -m",
        f"model={','.join(['base', *rows])}",
        f"seed={','.join(map(str, seeds))}",
    ]
    looks = [  # every row was seen, decided ones and those past the cap too: each spent its alpha
        Look(coll.scale or "", d.row, d.metric.name, d.seeds, d.needed or d.planned, d.alpha)
        for d in decisions
        if d.state != "not compared" and d.alpha > 0
    ]
    return " ".join([*cmd, *overrides]), looks
