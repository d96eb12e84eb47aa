"""Any task's variations table (`python -m ablate.report metrics --task T`): each row's finished seeds,
and for perplexity and every dev metric the task declares, its mean ± sd, the seed-level 95% t interval,
its difference to the reference row (the study's; the paper's base by default) with the 95% interval of the
pooled t, and the planner's decision at this look
(report/decide.py): one verdict per row and metric."""

from __future__ import annotations

from typing import Any

from ablate.report import stats
from ablate.report.collect import Collection
from ablate.report.decide import Decision, decide, read_looks
from ablate.report.render import Table, fnum
from ablate.tasks import PPL, Metric, Task


def metrics_table(
    coll: Collection, task: Task, rows: list[str] | None = None, reference: str | None = None
) -> tuple[Table, list[str]]:
    """The table of `rows` (default: every row of the records) against row `reference` (default: the
    collection's)."""
    ref = reference or coll.reference
    metrics = (*task.metrics, PPL)
    models = _models(coll)
    cols = ["row", "seeds"] + (["model", "params"] if models else [])
    for m in metrics:
        cols += [f"{m.label} dev", "95% interval", f"Δ {ref}", "Δ 95% interval", "decision"]
    decisions = decide(coll, metrics, read_looks(coll.results_dir), reference=ref)
    by = {(d.row, d.metric.name): d for d in decisions}
    shown = list(coll.runs) if rows is None else rows
    decisions = [d for d in decisions if d.row in shown]
    body = []
    for row in shown:
        runs = coll.finished(row)
        stale = any(r.stale for r in runs.values())
        cells: list[Any] = [row + (" †" if stale else ""), len(runs), *models.get(row, ())]
        for m in metrics:
            cells += _cells(_values(runs, m), by.get((row, m.name)))
        body.append(cells)
    notes = [
        f"{task.name}: {task.label or 'its declared metrics'}; preset {coll.scale}.",
        *(
            []
            if coll.finished(ref)
            else [f"The reference row {ref} has no finished records: no row is compared."]
        ),
        *(
            ["model: the row's model.arch; params: its trainable parameters as it ran (the built model)"]
            if models
            else []
        ),
        *(
            f"{m.label}: {m.accumulates}; {'higher' if m.higher_is_better else 'lower'} is better."
            for m in metrics
        ),  # fmt: skip
        f"mean ± sd over finished seeds; 95% interval: Student's t over seeds (none for one seed); Δ {ref}: "
        f"mean of the row less {ref}'s, its 95% interval by the t on the seed variance pooled over the rows; "
        "decision: the planner's at this look (docs/planner.md), below in full.",
        *(
            f"† stale: {row} seed {s}: {'; '.join(r.stale)}"
            for row, by in coll.runs.items()
            if row in shown
            for s, r in by.items()
            if r.stale
        ),  # fmt: skip
        *(f"decision: {d.text()}" for d in decisions if d.state != "not compared"),
    ]
    title = f"Variations of task {task.name}: dev figures against {ref}"
    align = "lr" + "lr" * bool(models) + "rlrlc" * len(metrics)
    return Table(cols, body, align=align, title=title), notes


def _models(coll: Collection) -> dict[str, tuple[str, str]]:
    """Each row's (model, parameters), where some row's model is not the package's Transformer: the
    architectures side by side. None otherwise (a table of Transformer rows stays as it was)."""
    out, other = {}, False
    for row, by in coll.runs.items():
        run = next(iter(by.values()), None)
        if run is None:
            continue
        arch = (run.cfg("model") or {}).get("arch", "transformer")
        other |= arch != "transformer"
        params = {r.rec.get("params") for r in by.values()} - {None}
        out[row] = (arch, ", ".join(f"{p:,}" for p in sorted(params)))
    return out if other else {}


def _values(runs: dict, m: Metric) -> dict[int, float]:
    return {s: v for s, r in runs.items() if (v := r.metric(m.record_key)) is not None}


def _cells(mine: dict[int, float], d: Decision | None) -> list[str]:
    mean, sd, n = stats.mean_sd(list(mine.values()))
    spread = f" ± {fnum(sd, 2)}" if n > 1 else ""
    interval = stats.t_interval(list(mine.values())) if n > 1 else None
    out = [
        "" if n == 0 else fnum(mean, 2) + spread,
        "" if interval is None else f"[{fnum(interval[0], 2)}, {fnum(interval[1], 2)}]",
    ]
    if d is None or d.diff is None:
        return out + ["", "", ""]
    lo, hi = d.interval(0.05)
    return out + [fnum(d.diff, 2, sign=True), f"[{fnum(lo, 2)}, {fnum(hi, 2)}]", d.state]
