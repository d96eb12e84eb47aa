"""How good the plan's estimates are, two ways:

1. On records already made: each record's wall time and training time estimated from the other records
   alone (leave one out), as `--plan` would have estimated it before that run (ablate.jobs.estimate),
   beside what the record says it took.

       python benchmarks/plan_estimates.py reports/table3_multi30k/runs

   Prints one line a record and the median and worst relative error by basis.

2. On rows never run, from the records already made: each record estimated from the records of the other
   rows alone, on its machine (the scaled basis: by the cost of a step, and by parameters beside it).

       python benchmarks/plan_estimates.py --leave-row-out reports/table3_multi30k/runs

3. The weight of an element written beside a multiply-accumulate (ablate.jobs.estimate.ELEMENT_MACS): one
   forward, backward and Adam step of each row of FIT_ROWS at the cpu preset, timed in CPU seconds (the
   median of five, after one), beside its count; the least-squares weight (relative errors), and each
   row's error estimated from base's step alone, by the cost and by multiply-accumulates alone.

       python benchmarks/plan_estimates.py --fit

4. On rows never run: each row of a list (Table 3's rows of other sizes, a researcher's GRU at two widths)
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

import dataclasses
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


def leave_row_out(folder: str) -> None:
    """Each record estimated from the records of the other rows alone (none of its own row, on any
    machine): the scaled basis, by the cost of a step and, beside it, by parameters."""
    from ablate.jobs.plan import record_cost

    records, _ = find_records(Path(folder))
    by = {"cost": {}, "parameters": {}}
    for rec in records:
        if (t := timing(rec, functools.partial(record_cost, rec))) is not None:
            by["cost"][rec["run_id"]] = (rec, t)
            by["parameters"][rec["run_id"]] = (rec, dataclasses.replace(t, cost=float(rec["params"])))
    errors: dict[str, dict[str, list[float]]] = {}
    for what, timings in by.items():
        for rec, t in timings.values():
            others = [o for _, o in timings.values() if o.row != t.row]
            est = estimate(t.row, t.preset, t.machine, int(rec["steps"]), t.cost, others)
            if est.basis == "scaled":
                e = errors.setdefault(what, {"wall": [], "train": []})
                e["wall"].append(est.seconds / float(rec["wall_time_s"]) - 1)
                e["train"].append(est.train_s / float(rec["train_time_s"]) - 1)
                if what == "cost":
                    print(f"{rec['run_id']:28s} wall {e['wall'][-1]:+7.1%}  {t.machine}")
    for what, e in errors.items():
        for part, errs in e.items():
            a = [abs(x) for x in errs]
            print(f"by {what}: {len(a)} records, {part} time: median |error| {statistics.median(a):.1%}, "
                  f"worst {max(a):.1%}")  # fmt: skip


FIT_ROWS = [
    "base", "A1", "A3", "A4", "B1", "C1", "C3", "C4", "C5", "C6", "C7", "E", "big", "gru", "gru_noattn",
    "gru +model.args.d_model=512", "gru +model.args.layers=4",
]  # fmt: skip


def fit() -> None:
    import numpy as np

    from ablate.jobs.estimate import ELEMENT_MACS

    names, counts, seconds = [], [], []
    for spec in FIT_ROWS:
        row, *more = spec.split()
        cfg = _composed([f"model={row}", "recipe=cpu", "scale=cpu", *more, *USER])
        c, s = _step(cfg)
        names.append(spec), counts.append((c.macs, c.elements)), seconds.append(s)
        print(f"{spec:30s} {c.macs / 1e9:7.2f} GMAC  {c.elements / 1e6:7.1f} M elements  {s:.3f} s")
    x, t = np.array(counts), np.array(seconds)
    (a, b), *_ = np.linalg.lstsq(x / t[:, None], np.ones(len(t)), rcond=None)
    print(f"least squares: {a * 1e12:.1f} ps a MAC, {b * 1e9:.2f} ns an element: weight {b / a:.0f}")
    base = names.index("base")
    for what, cost in (("cost", x[:, 0] + ELEMENT_MACS * x[:, 1]), ("MACs alone", x[:, 0])):
        err = cost * (t[base] / cost[base]) / t - 1
        short = [n.replace(" +model.args.", " ") for n in names]
        each = ", ".join(f"{n} {e:+.0%}" for n, e in zip(short, err, strict=True))
        print(f"from base, by {what}: median |error| {np.median(abs(err)):.1%}, worst {abs(err).max():.1%}")
        print(f"    {each}")


def _composed(overrides: list[str]):
    """The run config of `overrides` as a command composes it (Hydra's compose, the sweep's member)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from ablate.config import register_configs
    from ablate.jobs.sweep import member_config

    register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return member_config(compose("config", overrides), overrides, None)


def _step(cfg) -> tuple:
    """(the count of one step of the run's model, its CPU seconds: one thread, the median of 5 after 1)."""
    import time

    import torch

    from ablate.config import build_model
    from ablate.jobs.plan import step_count

    torch.set_num_threads(1)
    sys.path.insert(0, str(ROOT / "tests" / "user_model"))
    model, vocab = build_model(cfg, cfg.data.vocab_size), cfg.data.vocab_size
    adam = torch.optim.Adam(model.parameters())
    batch = torch.randint(4, vocab, (cfg.train.max_tokens // 32, 32))
    times = []
    for _ in range(6):
        start = time.process_time()
        adam.zero_grad()
        logits = model.logits(model(batch, batch)).flatten(0, -2)
        torch.nn.functional.cross_entropy(logits, batch.flatten(), label_smoothing=0.1).backward()
        adam.step()
        times.append(time.process_time() - start)
    return step_count(cfg), statistics.median(times[1:])


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

    sys.path.insert(0, str(ROOT / "tests" / "user_model"))  # the GRU's module, as its runs had it
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
    elif sys.argv[1:] == ["--fit"]:
        fit()
    elif len(sys.argv) > 2 and sys.argv[1] == "--leave-row-out":
        leave_row_out(sys.argv[2])
    else:
        leave_one_out(sys.argv[1] if len(sys.argv) > 1 else "reports/table3_multi30k/runs")
