"""The planner's error rates for the design as it runs (docs/planner.md): tables of null rows and rows at
an effect, taken through the looks `--decide-command` makes, each look re-planning the seeds from the data
(report/decide.py: decide_values and next_seeds, the code the report runs), with the seed variance pooled
over the table. Prints, per configuration, the share of null rows decided better or worse (the false-
decision rate, to hold at or below alpha) and the share of effect rows decided in their direction.

    python -m benchmarks.planner_simulation            # the table in docs/planner.md
    python -m benchmarks.planner_simulation --sims 200 # quicker, noisier
"""

from __future__ import annotations

import argparse
import itertools
import math
import time

import numpy as np

from ablate.report.decide import ALPHA, CAP, Design, Look, decide_values, next_seeds
from ablate.tasks import Metric

SD = 1.0  # the seed sd; the metric's delta and the effect are in its units
METRIC = Metric("m", "M", False, "simulated", "m", "m", negligible=0.25 * SD)
EFFECT = 1.5 * SD  # the effect rows' true difference (lower is better: +EFFECT is worse)


def one_table(rng: np.random.Generator, rows: int, seeds: int, looks: int) -> tuple[list[str], list[str]]:
    """(states of the null rows, states of the effect rows) after at most `looks` looks; half the rows
    (rounded down) are null."""
    truth = {"base": 0.0} | {f"r{i}": (0.0 if i < rows // 2 else EFFECT) for i in range(rows)}
    values = {r: {s: rng.normal(mu, SD) for s in range(1, seeds + 1)} for r, mu in truth.items()}
    made: dict[tuple, Look] = {}
    for k in range(looks):
        ds = decide_values(values, Design(METRIC, "sim", list(made.values())))
        if k == looks - 1:
            break
        nxt = next_seeds(ds, "sim", {r: len(v) for r, v in values.items()})
        if nxt is None:
            break
        for lk in nxt.looks:  # record_looks: a look at seeds already looked at is not written twice
            made.setdefault((lk.row, lk.seeds), lk)
        for r in nxt.rows:
            for s in range(len(values[r]) + 1, nxt.seeds + 1):
                values[r][s] = rng.normal(truth[r], SD)
    null = [d.state for d in ds if truth[d.row] == 0.0]
    return null, [d.state for d in ds if truth[d.row] != 0.0]


def rates(rows: int, seeds: int, looks: int, sims: int, seed: int = 0) -> tuple[float, float, int]:
    """(false-decision rate of null rows, power of effect rows, null rows simulated)."""
    rng = np.random.default_rng([seed, rows, seeds, looks])
    false = hit = n_null = n_eff = 0
    for _ in range(sims):
        null, eff = one_table(rng, rows, seeds, looks)
        false += sum(s in ("better", "worse") for s in null)
        hit += sum(s == "worse" for s in eff)
        n_null, n_eff = n_null + len(null), n_eff + len(eff)
    return false / n_null, hit / n_eff, n_null


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=400, help="tables a configuration")
    ap.add_argument("--rows", default="5,10,20")
    ap.add_argument("--seeds", default="2,3,5")
    ap.add_argument("--looks", default="2,3,4,5")
    args = ap.parse_args(argv)
    grid = [list(map(int, v.split(","))) for v in (args.rows, args.seeds, args.looks)]
    print(f"alpha {ALPHA}, cap {CAP} seeds a side, effect {EFFECT / SD:g} sd, delta {METRIC.negligible:g} sd")
    print("| rows | first seeds | looks | null rows | false decisions | +-2 se | power |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    start = time.perf_counter()
    for rows, seeds, looks in itertools.product(*grid):
        false, power, n = rates(rows, seeds, looks, args.sims)
        se = math.sqrt(max(false, 1e-9) * (1 - false) / n)
        print(f"| {rows} | {seeds} | {looks} | {n} | {false:.4f} | {2 * se:.4f} | {power:.3f} |", flush=True)
    print(f"{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
