"""Figures for the report (matplotlib, Agg backend, PNG): dev PPL curves per group with each row's
difference to the reference row (the black dashed line), and a forest plot of the differences to the
reference of each metric (the task's, then PPL)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ablate import paper
from ablate.config.study import DEFAULT_REFERENCE
from ablate.report.analysis import Analysis, RowResult, gap_to_base
from ablate.report.claims import spec_of
from ablate.report.table3 import _label


def plot_prefix(an: Analysis) -> str:
    """What a forest plot's title names: the paper's table ("Table 3"), else the task."""
    spec = spec_of(an)
    if spec is not None and spec.title:
        return spec.title.partition(":")[0]
    return f"task {an.task.name}" if an.task is not None else "variations"


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _curve(rr: RowResult, key: str = "dev_ppl") -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Steps, mean and (min, max) band over seeds, on the steps every seed logged."""
    per_seed = []
    for run in rr.finished.values() or rr.runs.values():
        pts = {int(c["step"]): float(c[key]) for c in run.curves() if c.get(key) is not None}
        if pts:
            per_seed.append(pts)
    if not per_seed:
        return None
    steps = sorted(set.intersection(*(set(p) for p in per_seed)))
    if not steps:
        steps = sorted(per_seed[0])
        per_seed = per_seed[:1]
    y = np.array([[p[s] for s in steps] for p in per_seed])
    return np.array(steps), y.mean(0), np.stack([y.min(0), y.max(0)])


def _gap_curve(rr: RowResult, base: RowResult) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Steps, mean and (min, max) over seeds of the row's dev PPL minus the reference's (`base`; same
    seed, same step)."""
    per_seed = [dict(g) for g in gap_to_base(rr, base).values()]
    if not per_seed:
        return None
    steps = sorted(set.intersection(*(set(p) for p in per_seed)))
    y = np.array([[p[s] for s in steps] for p in per_seed])
    return np.array(steps), y.mean(0), np.stack([y.min(0), y.max(0)])


def _band(ax, x, mean, band, label: str, **style) -> None:
    (line,) = ax.plot(x, mean, label=label, **style)
    if band.shape[1] and (band[0] != band[1]).any():
        ax.fill_between(x, band[0], band[1], alpha=0.2, color=line.get_color())


def _group_figure(plt, g: str, rows: list[RowResult], base: RowResult | None, ref: str):
    """Left: dev PPL against steps (log). Right, where the reference (`base`, row `ref`) shares steps with
    a row: the row's dev PPL minus the reference's over the second half of its training, where the rows'
    differences are read."""
    curves = [(rr, c) for rr in rows if (c := _curve(rr)) is not None]
    if not any(rr.row != ref for rr, _ in curves):
        return None
    gaps = [(rr, c) for rr in rows if base and rr.row != ref and (c := _gap_curve(rr, base)) is not None]
    fig, axes = plt.subplots(1, 2 if gaps else 1, figsize=(11 if gaps else 6, 4), squeeze=False)
    ax = axes[0][0]
    for rr, (x, mean, band) in curves:
        style = {"color": "black", "linestyle": "--"} if rr.row == ref else {"color": _color(rows, rr, ref)}
        _band(ax, x, mean, band, f"{rr.row} (n={len(rr.finished) or len(rr.runs)})", **style)
    ax.set_xlabel("step")
    ax.set_ylabel("dev perplexity (per wordpiece)")
    ax.set_yscale("log")
    ax.set_title(f"group ({g}): dev PPL, mean and min-max over seeds", fontsize=10)
    ax.legend(fontsize=8)
    if gaps:
        ax = axes[0][1]
        for rr, (x, mean, band) in gaps:
            _band(ax, x, mean, band, rr.row, color=_color(rows, rr, ref))
        ax.axhline(0, color="black", linestyle="--", lw=1)
        ax.set_xlabel("step")
        ax.set_ylabel(f"dev PPL minus {ref}'s (same seed, same step)")
        ax.set_title(f"second half of training: the difference to {ref}", fontsize=10)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def _color(rows: list[RowResult], rr: RowResult, ref: str) -> str:
    """One colour per row in both panels (the reference `ref` is the black dashed line)."""
    others = [r.row for r in rows if r.row != ref]
    return f"C{others.index(rr.row) % 10}"


# The plots' titles: the keys `python -m ablate.report --wandb` logs them under (the dashboard shows them).
FOREST_TITLE = "{} difference to {} per row"
CURVES_TITLE = "dev PPL vs steps, group {}"


def plot_titles(
    groups: list[str], labels: tuple[str, ...] = ("BLEU", "PPL"), reference: str = DEFAULT_REFERENCE
) -> list[str]:
    """The titles make_plots gives, for a table of these groups (those of rows other than the reference)
    and metrics (Table 3's by default), against row `reference`."""
    forest = [FOREST_TITLE.format(m, reference) for m in labels]
    return forest + [CURVES_TITLE.format(g) for g in groups]


def ppl_curves(an: Analysis, out_dir: Path) -> dict[str, Path]:
    plt = _plt()
    out: dict[str, Path] = {}
    ref = an.reference
    base = an.get(ref)
    groups: dict[str, list[RowResult]] = {}
    for rr in an.rows:
        if rr.row != ref:
            groups.setdefault(rr.group, []).append(rr)
    order = [g for g in paper.GROUP_ORDER if g in groups] + sorted(set(groups) - set(paper.GROUP_ORDER))
    for g in order:
        fig = _group_figure(plt, g, ([base] if base else []) + groups[g], base, ref)
        if fig is None:
            continue
        path = out_dir / f"ppl_curves_{g}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        out[CURVES_TITLE.format(g)] = path
    return out


def forest(an: Analysis, out_dir: Path, metric: str = "bleu") -> dict[str, Path]:
    plt = _plt()
    ref = an.reference
    base = an.get(ref)
    rows = [rr for rr in an.rows if rr.row != ref and rr.cmp.get(metric) and rr.cmp[metric].diff is not None]
    if not rows or base is None:
        return {}
    fig, ax = plt.subplots(figsize=(7, 0.35 * len(rows) + 1.5))
    y = np.arange(len(rows))[::-1]
    base_vals = base.values[metric]
    base_mean = float(np.mean(list(base_vals.values())))
    prev_group = None
    for yi, rr in zip(y, rows, strict=True):
        c = rr.cmp[metric]
        iv = c.interval
        color = "tab:blue" if c.verdict in ("better", "worse") else "tab:gray"  # the planner's decision
        if iv is not None:
            ax.plot([iv[0], iv[1]], [yi, yi], color=color, lw=2)
        ax.plot(
            [c.diff], [yi], "o", color=color, ms=6, label="ours: mean Δ, interval" if yi == y[0] else None
        )
        # per-seed points: paired difference where the reference has the seed, else to its mean
        pts = [v - base_vals.get(s, base_mean) for s, v in rr.values[metric].items()]
        ax.plot(
            pts,
            [yi + 0.18] * len(pts),
            ".",
            color="tab:green",
            ms=4,
            label="per seed" if yi == y[0] else None,
        )
        if c.paper_diff is not None:
            ax.plot([c.paper_diff], [yi], "x", color="tab:red", ms=7, label="paper Δ" if yi == y[0] else None)
        if prev_group is not None and rr.group != prev_group:
            ax.axhline(yi + 0.5, color="lightgray", lw=0.8)
        prev_group = rr.group
    ax.axvline(0, color="black", lw=0.8)
    ax.set_yticks(y, [_label(rr) for rr in rows])
    ax.set_xlabel(f"{metric.upper()} (dev) difference to {ref}")
    ax.set_title(f"{plot_prefix(an)}: {metric.upper()} Δ vs {ref} (95% interval)")
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    path = out_dir / f"forest_{metric}.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return {FOREST_TITLE.format(metric.upper(), ref): path}


def make_plots(an: Analysis, out_dir: str | Path) -> dict[str, Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    out: dict[str, Path] = {}
    for m in an.stats_order:
        out.update(forest(an, out_dir, m.name))
    out.update(ppl_curves(an, out_dir))
    return out
