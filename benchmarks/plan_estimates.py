"""How good the plan's estimates are on records already made: each record's wall time and training time
estimated from the other records alone (leave one out), as `--plan` would have estimated it before that
run (ablate.jobs.estimate), beside what the record says it took.

    python benchmarks/plan_estimates.py reports/table3_multi30k/runs

Prints one line a record and the median and worst relative error by basis.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from ablate.jobs.estimate import estimate, speed_ratios, timing
from ablate.records.store import find_records


def main(folder: str) -> None:
    records, _ = find_records(Path(folder))
    timings = [(r, t) for r in records if (t := timing(r)) is not None]
    errors: dict[str, list[tuple[float, float]]] = {}
    for rec, t in timings:
        others = [o for r, o in timings if r is not rec]
        est = estimate(t.row, t.preset, t.machine, int(rec["steps"]), t.params, others, "(none)")
        if est.seconds is None:
            print(f"{rec['run_id']:28s} unknown")
            continue
        train_est = est.seconds - _outside(est, t, others)
        wall_err = est.seconds / float(rec["wall_time_s"]) - 1
        train_err = train_est / float(rec["train_time_s"]) - 1
        errors.setdefault(est.basis, []).append((wall_err, train_err))
        errs = f"wall {wall_err:+7.1%}  train {train_err:+7.1%}"
        print(f"{rec['run_id']:28s} {est.basis:8s} {errs}  {t.machine}")
    for basis, errs in sorted(errors.items()):
        for i, what in enumerate(("wall time", "train time")):
            e = [abs(x[i]) for x in errs]
            median, worst = statistics.median(e), max(e)
            print(f"{basis}: {len(e)} records, {what}: median |error| {median:.1%}, worst {worst:.1%}")


def _outside(est, t, others) -> float:
    """The part of an estimate outside training (the median over the records it came from, each x its
    machine's speed ratio for a ratio estimate)."""
    pool = [o for o in others if o.preset == t.preset]
    if est.basis == "ratio":
        ratios = speed_ratios(pool, t.machine)
        return statistics.median(
            o.outside_s * ratios[o.machine] for o in pool if o.row == t.row and o.machine in ratios
        )
    here = [o for o in pool if o.machine == t.machine]
    same = [o for o in here if o.row == t.row] if est.basis == "measured" else here
    return statistics.median(o.outside_s for o in same)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "reports/table3_multi30k/runs")
