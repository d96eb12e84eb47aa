"""The variations report's analysis, for any task: each row's seeds, for perplexity and every metric the
task declares its difference to the reference row (the study's; the paper's base by default) with a
t-test and a hierarchical bootstrap of the metric's summed per-sentence statistics (Metric.reduce),
Holm's correction across rows, the reading against the task's paper (Task.paper_table), and each run's
curves read for fit. table3.py renders it (Table 3 is translation's); the statistics live in stats.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from ablate import paper
from ablate.config import DEFAULT_TASK, ModelConfig
from ablate.config.rows import ordered
from ablate.config.study import DEFAULT_REFERENCE, current_study
from ablate.report import stats
from ablate.report.collect import Collection, Run
from ablate.report.render import raised_at
from ablate.tasks import BUILTIN, PPL, Metric, Task, task_of

OPPOSITE = "opposite sign to the paper"


@dataclass
class Compare:
    metric: str
    better: int = 1  # the sign of an improvement (+1: higher is better)
    diff: float | None = None  # mean(row) - mean(reference) over all finished seeds
    ttest: stats.TTest | None = None
    boot: stats.Bootstrap | None = None
    p_t_holm: float = math.nan
    p_boot_holm: float = math.nan
    paper_diff: float | None = None
    flags: list[str] = field(default_factory=list)
    verdict: str | None = None  # the planner's decision (report/decide.py): what bold cells and plots read

    @property
    def interval(self) -> tuple[float, float] | None:
        """The primary interval: the hierarchical bootstrap where per-sentence files exist, else the t CI."""
        if self.boot is not None:
            return self.boot.lo, self.boot.hi
        if self.ttest is not None:
            return self.ttest.lo, self.ttest.hi
        return None

    @property
    def excludes_zero(self) -> bool:
        iv = self.interval
        return iv is not None and (iv[0] > 0 or iv[1] < 0)

    n_row: int = 0  # seeds compared
    n_base: int = 0

    @property
    def both_exclude_zero(self) -> bool:
        """The seed-level t interval and the bootstrap interval both exclude zero (one seed has no t)."""
        t, b = self.ttest, self.boot
        return t is not None and b is not None and (t.lo > 0 or t.hi < 0) and (b.lo > 0 or b.hi < 0)

    @property
    def improves(self) -> bool:
        """Decided better by the planner (the table's one verdict, at its family-wise alpha); where no
        verdict is set, better than the reference with an interval that excludes zero, over at least two
        seeds per side (one seed per side compares two checkpoints, not two configurations)."""
        if self.verdict is not None:
            return self.verdict == "better"
        t_ok = self.ttest is None or self.ttest.lo > 0 or self.ttest.hi < 0
        return (
            self.diff is not None
            and self.excludes_zero
            and t_ok  # a bootstrap over 2-5 seeds is too narrow: the seed-level t interval must agree
            and self.diff * self.better > 0
            and min(self.n_row, self.n_base) >= 2
        )

    def direction(self) -> str | None:
        """'agree' | 'opposite' | 'no paper effect' | None (nothing to compare)."""
        if self.diff is None or self.paper_diff is None:
            return None
        if self.paper_diff == 0:
            return "no paper effect"
        if self.diff == 0:
            return "no effect here"
        return "agree" if (self.diff > 0) == (self.paper_diff > 0) else "opposite"


@dataclass
class RowResult:
    row: str
    group: str
    model: dict[str, Any]  # paper-scale row settings (ModelConfig fields)
    runs: dict[int, Run]
    finished: dict[int, Run]
    values: dict[str, dict[int, float]]  # metric name (and test_<headline>) -> seed -> value
    cmp: dict[str, Compare] = field(default_factory=dict)
    paper: dict[str, float | None] | None = None  # the paper's figures by metric name (None: not its row)
    paper_params: float | None = None  # the parameters (millions) the paper prints for the row
    # seed -> the evaluation a test figure comes from, where the run made none of its own (Run.split_figure)
    test_from: dict[int, Any] = field(default_factory=dict)

    def summary(self, metric: str) -> tuple[float, float, int]:
        return stats.mean_sd(list(self.values[metric].values()))

    @property
    def stale(self) -> list[tuple[int, list[str]]]:
        return [(s, r.stale) for s, r in self.runs.items() if r.stale]

    def status(self) -> str:
        if not self.runs:
            return "not run"
        parts = []
        if self.finished:
            parts.append(f"{len(self.finished)} seed{'s' if len(self.finished) > 1 else ''}")
        running = [s for s, r in self.runs.items() if r.status == "running"]
        if running:
            parts.append(
                "running"
                + ("" if not self.finished and len(self.runs) == 1 else " s" + ",".join(map(str, running)))
                + "".join(_at(self.runs[s]) for s in running)
            )
        for s, r in self.runs.items():
            if r.status == "failed":
                reason = str(r.rec.get("reason") or "no reason given").splitlines()[0]
                parts.append(f"failed s{s}: {reason}")
            elif r.status == "interrupted":
                parts.append(f"interrupted s{s}{_at(r)} (its process is gone; rerun to resume)")
            elif r.status in (
                "preempted",
                "timed_out",
                "cancelled",
            ):  # stopped by SLURM (ablate/cluster/slurm_job.py)
                reason = str(r.rec.get("reason") or "").splitlines()[0] if r.rec.get("reason") else ""
                parts.append(f"{r.status.replace('_', ' ')} s{s}{_at(r)}" + (f": {reason}" if reason else ""))
        return "; ".join(parts)

    def mean_of(self, key: str) -> float | None:
        return self.mean_over_runs(lambda r: None if r.rec.get(key) is None else float(r.rec[key]))

    def mean_over_runs(self, fn: Callable[[Run], float | None]) -> float | None:
        v = [x for r in self.finished.values() if (x := fn(r)) is not None]
        return sum(v) / len(v) if v else None


def _at(run: Run) -> str:
    """' (step 16,940 of 23,250)': how far an unfinished run's curves reached."""
    p = run.progress()
    if p is None:
        return ""
    step, total = p
    return f" (step {step:,}" + ("" if total is None else f" of {total:,}") + ")"


@dataclass
class Analysis:
    rows: list[RowResult]
    coll: Collection
    n_boot: int
    notes: list[str]
    metrics: tuple[Metric, ...] = (PPL,)  # perplexity, then the task's: the table's columns
    paper: paper.PaperTable | None = None  # the task's paper's table (Task.paper_table)
    task: Task | None = None
    reference: str = DEFAULT_REFERENCE  # the row the others are compared against
    # (metric label, the error its bootstrap raised) -> the rows it raised on
    no_bootstrap: dict[tuple[str, str], list[str]] = field(default_factory=dict)

    def unread(self) -> list[str]:
        """What the analysis could not read, a line each: a bootstrap that raised, and why."""
        out = []
        for (label, why), rows in self.no_bootstrap.items():
            out.append(f"{label}: no bootstrap interval for {', '.join(rows)}: {why}")
        return out

    def reference_runs(self) -> int:
        rr = self.get(self.reference)
        return len(rr.finished) if rr else len(self.coll.finished(self.reference))

    def no_reference(self) -> str:
        return f"The reference row {self.reference} has no finished records: no row is compared with it."

    @property
    def stats_order(self) -> tuple[Metric, ...]:
        """The task's metrics, then perplexity: the order of the statistics, directions and forest plots."""
        return (*self.metrics[1:], self.metrics[0])

    @property
    def headline(self) -> Metric:
        return self.metrics[1] if len(self.metrics) > 1 else self.metrics[0]

    @property
    def test_key(self) -> str:
        """The record key of the headline's figure on the test split (test_bleu for translation)."""
        return f"test_{self.headline.name}"

    @property
    def read_by(self) -> Metric:
        """The metric the paper's table is read by (its sign agreement, its claims): the first the paper's
        CSV reports of those the task declares, else the headline."""
        by_name = {m.name: m for m in self.metrics}
        found = [by_name[m] for m in (self.paper.metrics() if self.paper else []) if m in by_name]
        return found[0] if found else self.headline

    def get(self, row: str) -> RowResult | None:
        return next((r for r in self.rows if r.row == row), None)


def _model_dict(coll: Collection, row: str, runs: dict[int, Run]) -> dict[str, Any]:
    for r in runs.values():
        m = r.cfg("model")
        if m:
            base = asdict(coll.rows.models.get(row, ModelConfig(name=row)))
            base.update({k: v for k, v in m.items() if k in base})
            return base
    return asdict(coll.rows.models.get(row, ModelConfig(name=row)))


def analyse(
    coll: Collection,
    rows: list[str] | None = None,
    n_boot: int = 1000,
    boot_seed: int = 0,
    seeds_min: int = 1,
    task: Task | None = None,
    reference: str | None = None,
) -> Analysis:
    """Each row's figures, its difference from the reference row (`reference`, else the collection's) with
    a t-test and a hierarchical bootstrap, and Holm's correction across the rows (per metric and per
    test), beside the task's paper's figures."""
    task = task or task_of(DEFAULT_TASK)
    ref = reference or coll.reference
    table = paper_of(task, ref)
    an = Analysis([], coll, n_boot, [], (PPL, *task.metrics), table, task, ref)
    # the paper's rows in its order (Table 3's, or a study's own paper's), then the others
    paper_rows = list(table.figures) if table else []
    order = rows or paper_rows + ordered(set(coll.runs) - set(paper_rows))
    results = [_row_result(an, row) for row in order]
    base = next((r for r in results if r.row == ref), None) or _row_result(an, ref)
    base_sent = _sentences(base)
    for rr in results:
        if rr.row != ref:
            _compare(an, rr, base, base_sent, n_boot, boot_seed, seeds_min)
    _correct_and_flag(an, [r for r in results if r.row != ref])
    from ablate.report.decide import decide, read_looks, verdicts

    looks = read_looks(coll.results_dir) if coll.results_dir else None
    states = verdicts(decide(coll, an.metrics, looks, reference=ref)) if looks is not None else {}
    for rr in results:
        for m, c in rr.cmp.items():
            c.verdict = states.get((rr.row, m))
    an.rows = results
    return an


def paper_delta(an: Analysis, row: str, metric: str) -> float | None:
    """The paper's row minus the paper's reference row (as PaperTable.delta for base); None where the
    paper has either figure missing, or no table."""
    if an.paper is None:
        return None
    mine, theirs = (an.paper.figures.get(r, {}).get(metric) for r in (row, an.reference))
    return None if mine is None or theirs is None else round(mine - theirs, 6)


def paper_file(task: Task, which: str, reference: str):
    """The file of the task's `paper_table` or `paper_claims`. A package task's paper is this paper: a study
    of its own reads it only where its reference row is one of the paper's rows (a study of Table 3 against
    another row); a study of another model (reference gru, say) has its own paper or none. A study that
    names its paper in study.yaml reads that one (a study of the translation task beside another paper)."""
    if (own := current_study().paper_file(which)) is not None or current_study().papers:
        return own
    path = task.paper_file(which)
    if path is None or task.name not in BUILTIN or current_study().root is None:
        return path
    table = task.paper_file("paper_table")
    return path if table is not None and reference in paper.paper_table(table).figures else None


def paper_of(task: Task, reference: str = DEFAULT_REFERENCE) -> paper.PaperTable | None:
    """The task's paper's table, or None where it declares none (or it is not the study's paper)."""
    path = paper_file(task, "paper_table", reference)
    return paper.paper_table(path) if path else None


def _row_result(an: Analysis, row: str) -> RowResult:
    coll = an.coll
    runs, finished = coll.runs.get(row, {}), coll.finished(row)
    keys = {m.name: m.record_key for m in an.metrics}
    values = {
        m: {s: v for s, r in finished.items() if (v := r.metric(key)) is not None} for m, key in keys.items()
    }
    test = {s: r.split_figure(an.test_key) for s, r in finished.items()}
    values[an.test_key] = {s: v for s, (v, _) in test.items() if v is not None}
    model = _model_dict(coll, row, runs)
    t = an.paper
    group = t.groups[row] if t and row in t.groups else (model.get("group") or "extra")
    figures = t.figures.get(row) if t else None
    params = t.params.get(row) if t else None
    rr = RowResult(row, group, model, runs, finished, values, paper=figures, paper_params=params)
    rr.test_from = {s: e for s, (_, e) in test.items() if e is not None}
    return rr


def _sentences(rr: RowResult) -> dict[int, stats.Sentences]:
    return {
        s: stats.Sentences.from_arrays(d) for s, r in rr.finished.items() if (d := r.sentences()) is not None
    }


def diff_to_base(rv: dict[int, float], bv: dict[int, float]) -> tuple[float, dict[int, float]]:
    """The row's mean minus the reference's (`bv`) over the same seeds (all of the reference's where the
    row has seeds it lacks), and the reference values that mean is over."""
    bv_cmp = {s: bv[s] for s in rv} if set(rv) <= set(bv) else bv
    return stats.mean_sd(list(rv.values()))[0] - stats.mean_sd(list(bv_cmp.values()))[0], bv_cmp


def _compare(
    an: Analysis, rr: RowResult, base: RowResult, base_sent: dict, n_boot: int, boot_seed: int, seeds_min: int
):
    """rr.cmp[metric]: the row minus the reference (`base`), paired by seed where every seed of the row also
    ran for the reference."""
    row_sent = None
    for metric in an.metrics:
        m = metric.name
        paper_diff = paper_delta(an, rr.row, m)
        c = rr.cmp[m] = Compare(m, 1 if metric.higher_is_better else -1, paper_diff=paper_diff)
        bv, rv = base.values[m], rr.values[m]
        if not bv or not rv or len(rv) < seeds_min or len(bv) < seeds_min:
            continue
        c.diff, bv_cmp = diff_to_base(rv, bv)
        c.n_row, c.n_base = len(rv), len(bv_cmp)
        c.ttest = stats.against_base(bv, rv)
        row_sent = _sentences(rr) if row_sent is None else row_sent
        if base_sent and row_sent and metric.reduce is not None:
            paired = set(row_sent) <= set(base_sent)
            b = {s: base_sent[s] for s in row_sent} if paired else base_sent
            try:
                c.boot = stats.hierarchical_bootstrap(
                    b, row_sent, metric, n_boot=n_boot, seed=boot_seed, paired=paired
                )
            except Exception as e:  # noqa: BLE001 - a researcher's reduce: its failure is said, not raised
                c.boot = None
                an.no_bootstrap.setdefault((metric.label, raised_at(e)), []).append(rr.row)


def _correct_and_flag(an: Analysis, compared: list[RowResult]) -> None:
    """Holm across the rows compared with the reference, per metric and per test; flag disagreements with
    the paper."""
    for m in (metric.name for metric in an.stats_order):
        cs = [r.cmp[m] for r in compared]
        for c, adj in zip(cs, stats.holm([c.ttest.p if c.ttest else None for c in cs]), strict=True):
            c.p_t_holm = adj
        for c, adj in zip(cs, stats.holm([c.boot.p if c.boot else None for c in cs]), strict=True):
            c.p_boot_holm = adj
        for c in cs:
            if c.direction() == "opposite":
                c.flags.append(OPPOSITE)
            iv = c.interval
            if iv is not None and c.paper_diff is not None and not iv[0] <= c.paper_diff <= iv[1]:
                c.flags.append("interval excludes the paper's Δ")


def agreement(an: Analysis) -> dict[str, list[str]]:
    """Read by the paper's metric (an.read_by; dev PPL for Table 3): the rows with a paper effect (|paper
    Δ| against the reference at least the metric's negligible), those measured here, those that agree with
    the paper in sign, those both intervals support, and those that disagree."""
    m = an.read_by
    effect = [
        rr
        for rr in an.rows
        if rr.row != an.reference
        and an.paper is not None
        and (d := paper_delta(an, rr.row, m.name)) is not None
        and round(abs(d), 2) >= m.negligible
    ]
    measured = [rr for rr in effect if (c := rr.cmp.get(m.name)) is not None and c.diff is not None]
    agree = [rr for rr in measured if rr.cmp[m.name].direction() == "agree"]
    return {
        "paper_effect": [rr.row for rr in effect],
        "measured": [rr.row for rr in measured],
        "agree": [rr.row for rr in agree],
        "supported": [rr.row for rr in agree if rr.cmp[m.name].both_exclude_zero],
        "disagree": [rr.row for rr in measured if rr not in agree],
    }


@dataclass
class Fit:
    """One run's curve read for fit (or the mean over a row's seeds)."""

    train_loss: float  # mean training loss over the last 10% of steps (label-smoothed at the row's eps_ls)
    end_ppl: float | None  # dev PPL of the final checkpoint(s), as recorded
    best_ppl: float  # the lowest dev PPL on the curve
    best_steps: list[int]  # where the curve bottomed (one step per seed)
    last_step: int
    late: float | None  # dev PPL at the end over dev PPL at 90% of the steps, minus 1 (< 0: still falling)

    @property
    def overfits(self) -> bool:
        """Dev PPL ends more than 1% above its best: the curve turned back up before the end."""
        return self.end_ppl is not None and self.end_ppl > 1.01 * self.best_ppl


def _fit(run: Run) -> Fit | None:
    curve = run.curves()
    dev = [(int(c["step"]), float(c["dev_ppl"])) for c in curve if c.get("dev_ppl") is not None]
    last = max((int(c["step"]) for c in curve), default=0)
    train = [float(c["train_loss"]) for c in curve if "train_loss" in c and int(c["step"]) > 0.9 * last]
    if not dev or not train:
        return None
    step, best = min(dev, key=lambda d: d[1])
    before = [p for s, p in dev if s <= 0.9 * last]
    late = dev[-1][1] / before[-1] - 1 if before else None
    return Fit(sum(train) / len(train), run.metric("dev_ppl"), best, [step], last, late)


def _mean(xs: list[float | None]) -> float | None:
    return None if not xs or any(x is None for x in xs) else sum(xs) / len(xs)


def row_fit(rr: RowResult) -> Fit | None:
    """The mean of a row's finished seeds' fits; None where no seed has a curve to read."""
    fits = [f for s in sorted(rr.finished) if (f := _fit(rr.finished[s])) is not None]
    if not fits:
        return None
    return Fit(
        _mean([f.train_loss for f in fits]),
        _mean([f.end_ppl for f in fits]),
        _mean([f.best_ppl for f in fits]),
        [f.best_steps[0] for f in fits],
        max(f.last_step for f in fits),
        _mean([f.late for f in fits]),
    )


def _dev_curve(run: Run) -> dict[int, float]:
    return {int(c["step"]): float(c["dev_ppl"]) for c in run.curves() if c.get("dev_ppl") is not None}


def gap_to_base(rr: RowResult, base: RowResult) -> dict[int, list[tuple[int, float]]]:
    """Per seed, the row's dev PPL minus the reference's (`base`) run of the same seed at the same step,
    over the second half of the row's training (the steps both curves hold). Paired by step, the seed's
    shared data order and evaluation noise cancel; what remains is the rows' difference."""
    out = {}
    for seed in sorted(set(rr.finished) & set(base.finished)):
        mine, theirs = _dev_curve(rr.finished[seed]), _dev_curve(base.finished[seed])
        half = max(mine, default=0) / 2
        steps = sorted(s for s in mine.keys() & theirs.keys() if s >= half)
        if steps:
            out[seed] = [(s, mine[s] - theirs[s]) for s in steps]
    return out


def side_of_base(rr: RowResult, base: RowResult) -> tuple[int, int] | None:
    """At how many dev evaluations of the second half of training a row's curve lies on the same side of
    the reference's (`base`; same seed, same step) as the row's mean ends: (same side, evaluations
    compared). One final checkpoint can land on either side by noise; a gap that holds at every
    evaluation is the curves'."""
    diff = rr.cmp["ppl"].diff if "ppl" in rr.cmp else None
    gaps = [g for seed_gaps in gap_to_base(rr, base).values() for _, g in seed_gaps]
    if not diff or not gaps:
        return None
    return sum(g * diff > 0 for g in gaps), len(gaps)
