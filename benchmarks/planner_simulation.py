"""The planner's error rates for the design as it runs (docs/planner.md): tables of null rows and rows at
an effect, taken through the looks `--decide-command` makes, each look re-planning each row's seeds from
the data (report/decide.py: decide_values and next_seeds, the code the report runs), with the seed variance
pooled over the table. Prints, per configuration and per family (`table`: Holm over the table's rows, what
the report runs; `row`: each row at alpha alone, the per-row yardstick): the share of null rows decided
better or worse (per row), the share of tables with any false decision (the family-wise error: a null row
decided better or worse, an effect row decided better or negligible), the false discovery proportion's
mean (FDR), and the share of effect rows decided worse (power).

    python -m benchmarks.planner_simulation                 # the table in docs/planner.md
    python -m benchmarks.planner_simulation --sims 100      # quicker, noisier
"""

from __future__ import annotations

import argparse
import itertools
import math
import time
from dataclasses import dataclass

import numpy as np

from ablate.report.decide import ALPHA, CAP, Design, Look, decide_values, next_seeds
from ablate.tasks import Metric

SD = 1.0  # the seed sd; the metric's delta and the effect are in its units
METRIC = Metric("m", "M", False, "simulated", "m", "m", negligible=0.25 * SD)
EFFECT = 1.5 * SD  # the effect rows' true difference (lower is better: +EFFECT is worse)


def one_table(
    rng: np.random.Generator, rows: int, seeds: int, looks: int, family: str = "table"
) -> tuple[list[str], list[str]]:
    """(states of the null rows, states of the effect rows) after at most `looks` looks; half the rows
    (rounded down) are null."""
    truth = {"base": 0.0} | {f"r{i}": (0.0 if i < rows // 2 else EFFECT) for i in range(rows)}
    values = {r: {s: rng.normal(mu, SD) for s in range(1, seeds + 1)} for r, mu in truth.items()}
    made: dict[tuple, Look] = {}
    for k in range(looks):
        ds = decide_values(values, METRIC, Design("sim", list(made.values()), family=family))
        if k == looks - 1:
            break
        nxt = next_seeds(ds, "sim", {r: len(v) for r, v in values.items()})
        if nxt is None or not nxt.seeds:
            break
        for lk in nxt.looks:  # record_looks: a look at seeds already looked at is not written twice
            made.setdefault((lk.row, lk.seeds), lk)
        for r, n in nxt.seeds.items():
            for s in range(len(values[r]) + 1, n + 1):
                values[r][s] = rng.normal(truth[r], SD)
    null = [d.state for d in ds if truth[d.row] == 0.0]
    return null, [d.state for d in ds if truth[d.row] != 0.0]


@dataclass(frozen=True)
class Rates:
    per_row: float  # null rows decided better or worse, of null rows
    fwer: float  # tables with a false decision
    fdr: float  # mean false share of the decisions better or worse (0 where none)
    power: float  # effect rows decided worse
    null_rows: int
    tables: int


def rates(rows: int, seeds: int, looks: int, sims: int, family: str = "table", seed: int = 0) -> Rates:
    rng = np.random.default_rng([seed, rows, seeds, looks])
    false = hit = n_null = n_eff = any_false = 0
    fdp = 0.0
    for _ in range(sims):
        null, eff = one_table(rng, rows, seeds, looks, family)
        f = sum(s in ("better", "worse") for s in null)
        wrong = sum(s in ("better", "negligible") for s in eff)
        h = sum(s == "worse" for s in eff)
        false, hit, any_false = false + f, hit + h, any_false + bool(f + wrong)
        fdp += (f + wrong) / max(f + wrong + h, 1)
        n_null, n_eff = n_null + len(null), n_eff + len(eff)
    return Rates(false / n_null, any_false / sims, fdp / sims, hit / n_eff, n_null, sims)


def _se(p: float, n: int) -> float:
    return 2 * math.sqrt(max(p, 1e-9) * (1 - p) / n)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=1000, help="tables a configuration")
    ap.add_argument("--rows", default="5,10,20")
    ap.add_argument("--seeds", default="2,3,5")
    ap.add_argument("--looks", default="2,3,4,5")
    ap.add_argument("--families", default="table,row")
    args = ap.parse_args(argv)
    grid = [list(map(int, v.split(","))) for v in (args.rows, args.seeds, args.looks)]
    print(f"alpha {ALPHA}, cap {CAP} seeds a side, effect {EFFECT / SD:g} sd, delta {METRIC.negligible:g} sd")
    print("| rows | first seeds | looks | family | tables | per-row false | FWER | +-2 se | FDR | power |")
    print("|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    start = time.process_time()
    for (rows, seeds, looks), fam in itertools.product(itertools.product(*grid), args.families.split(",")):
        r = rates(rows, seeds, looks, args.sims, fam)
        print(
            f"| {rows} | {seeds} | {looks} | {fam} | {r.tables} | {r.per_row:.4f} | {r.fwer:.3f} | "
            f"{_se(r.fwer, r.tables):.3f} | {r.fdr:.3f} | {r.power:.3f} |",
            flush=True,
        )
    print(f"{time.process_time() - start:.0f} s of CPU")


if __name__ == "__main__":
    main()
