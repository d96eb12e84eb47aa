"""How good the plan's estimates are, two ways:

1. On records already made: each record's wall time and training time estimated from the other records
   alone (leave one out), as `--plan` would have estimated it before that run (ablate.jobs.estimate),
   beside what the record says it took.

       python benchmarks/plan_estimates.py reports/table3_multi30k/runs

   Prints one line a record and the median and worst relative error by basis.

2. On rows never run: each row of a list (Table 3's rows of other sizes, a researcher's GRU at two widths)
   estimated from one calibration of base alone, as the plan estimates a row it has no record of, and
   then trained for its wall time. Each calibration runs beside its row, at the same time (one thread
   each): on a machine shared with other work the two see the same load, so the error is the estimate's,
   not the load's change between them.

       python benchmarks/plan_estimates.py --never-run /tmp/never-run

   Trains into <folder>/calibration/<row> and <folder>/rows (a second call reuses the runs already there,
   so the estimates can be made again without training), then prints one line a row (estimate, wall time,
   error; the same for the training time) and the median and worst relative error.
"""

from __future__ import annotations

import functools
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from ablate.jobs.estimate import estimate, speed_ratios, timing
from ablate.records.store import find_records

ROOT = Path(__file__).resolve().parents[1]
# The preset of every run of the never-run benchmark: the README's CPU preset, cut to 30 steps (a
# calibration's 50 to keep the benchmark to minutes) and a dev set of 100 sentences, one thread
PRESET = ["recipe=cpu", "scale=cpu", "train.max_steps=30", "data.builtin_dev=100"]
MACHINE = ["logger=none", "trainer.accelerator=cpu", "trainer.threads=1"]
USER = [f"hydra.searchpath=[file://{ROOT}/tests/user_model/conf]"]
ROWS = [
    ["model=A1"], ["model=A4"], ["model=C1"], ["model=C4"], ["model=C7"],
    ["model=gru", *USER], ["model=gru", "+model.args.d_model=512", *USER],
]  # fmt: skip


def leave_one_out(folder: str) -> None:
    from ablate.jobs.plan import record_cost

    records, _ = find_records(Path(folder))
    timings = [(r, t) for r in records if (t := timing(r, functools.partial(record_cost, r))) is not None]
    errors: dict[str, list[tuple[float, float]]] = {}
    for rec, t in timings:
        others = [o for r, o in timings if r is not rec]
        est = estimate(t.row, t.preset, t.machine, int(rec["steps"]), t.cost, others, "(none)")
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


def never_run(folder: str) -> None:
    """Each row of ROWS after its own calibration of base (each trained where not trained yet), then each
    row estimated from its calibration's record alone and compared."""
    out = Path(folder).resolve()
    for row in ROWS:
        pair = [_train(["model=base"], out / "calibration" / _slug(row)), _train(row, out / "rows")]
        for log, p in pair:
            if p.wait():
                sys.exit(f"exit {p.returncode}: {log.read_text()[-2000:]}")
    _compare(out)


def _slug(overrides: list[str]) -> str:
    return "_".join(o.split("=", 1)[1] for o in overrides if o.lstrip("+").startswith("model"))


def _train(overrides: list[str], results: Path) -> tuple[Path, subprocess.Popen]:
    """One run started (skipped by ablate.run itself where its record is finished), niced: the machine is
    shared."""
    run = [sys.executable, "-m", "ablate.run", *overrides, *PRESET, *MACHINE, f"results_dir={results}"]
    env = dict(os.environ, WANDB_MODE="disabled")
    user = [str(ROOT), str(ROOT / "tests" / "user_model"), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(user)
    results.mkdir(parents=True, exist_ok=True)
    log = results / f"{_slug(overrides)}.log"
    with log.open("w") as f:
        p = subprocess.Popen(["nice", *run], cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, env=env)
    return log, p


def _compare(out: Path) -> None:
    from ablate.config import to_dataclass
    from ablate.jobs.plan import run_estimate

    walls, trains = [], []
    head = f"{'estimate':>9s} {'wall':>7s} {'error':>7s}   {'train est':>9s} {'train':>7s} {'error':>7s}"
    print(f"{'row':24s} {head}")
    for row in ROWS:
        name = _slug(row)
        records = map(_read, (out / "rows").glob("*/*/record.json"))
        rec = next((r for r in records if _slug(r["launch"]["overrides"]) == name), None)
        if rec is None:
            continue
        cfg = to_dataclass(rec["config"])
        cfg.results_dir = str(out / "calibration" / name)  # its calibration's record alone
        est = run_estimate(cfg)
        if est.seconds is None:
            print(f"{name:24s} unknown ({est.detail})")
            continue
        outside = est.seconds - est.train_s
        wall, train = float(rec["wall_time_s"]), float(rec["train_time_s"])
        walls.append(est.seconds / wall - 1)
        trains.append(est.train_s / train - 1)
        print(
            f"{name:24s} {est.seconds:8.1f}s {wall:6.1f}s {walls[-1]:+7.1%}   "
            f"{est.train_s:8.1f}s {train:6.1f}s {trains[-1]:+7.1%}   (outside {outside:.1f} s; {est.basis})"
        )
    for what, errs in (("wall time", walls), ("training time", trains)):
        e = [abs(x) for x in errs]
        if e:
            print(f"{what}: {len(e)} rows, median |error| {statistics.median(e):.1%}, worst {max(e):.1%}")


def _read(path: Path) -> dict:
    return json.loads(path.read_text())


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--never-run":
        never_run(sys.argv[2])
    else:
        leave_one_out(sys.argv[1] if len(sys.argv) > 1 else "reports/table3_multi30k/runs")
