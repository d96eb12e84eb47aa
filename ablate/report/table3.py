"""Table 3 (and Tables 2 and 4) from result records: the analysis and its tables.

`analyse` turns a Collection into RowResults (seed summaries, comparisons with base, reproduction flags);
`table3_markdown` and friends render them. The statistics live in stats.py.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from ablate.config import ArchConfig, DataConfig, DecodeConfig, ModelConfig, TrainConfig, TrainerConfig
from ablate.report import paper, stats
from ablate.report.collect import Collection, Run
from ablate.report.render import Table, clean_nan, fduration, fnum, fp, fsi, fsteps, render
from ablate.results import NOT_IDENTITY
from ablate.rows import ordered, row_order

METRICS = ("ppl", "bleu")
RECORD_KEY = {"ppl": "dev_ppl", "bleu": "dev_bleu", "test_bleu": "test_bleu"}
EXTRA = ("test_bleu",)  # shown per row with its difference to base; the statistics are for METRICS
BETTER = {"ppl": -1, "bleu": +1}  # sign of an improvement
MODEL_COLUMNS = (
    ("n_layers", "N"),
    ("d_model", "d_model"),
    ("d_ff", "d_ff"),
    ("n_heads", "h"),
    ("d_k", "d_k"),
    ("d_v", "d_v"),
    ("dropout", "P_drop"),
    ("label_smoothing", "ε_ls"),
    ("train_steps", "train steps"),
)
OTHER_KEYS = ("positional", "norm", "attn_dropout", "relu_dropout")
OPPOSITE = "opposite sign to the paper"
ONE_SEED_LABEL = (
    "paired bootstrap over sentences: these two checkpoints differ on this dev set, not the configurations"
)


@dataclass
class Compare:
    metric: str
    diff: float | None = None  # mean(row) - mean(base) over all finished seeds
    ttest: stats.TTest | None = None
    boot: stats.Bootstrap | None = None
    p_t_holm: float = math.nan
    p_boot_holm: float = math.nan
    paper_diff: float | None = None
    flags: list[str] = field(default_factory=list)

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
        """Better than base with an interval that excludes zero, over at least two seeds per side (only then
        is a cell bolded: one seed per side compares two checkpoints, not two configurations)."""
        t_ok = self.ttest is None or self.ttest.lo > 0 or self.ttest.hi < 0
        return (
            self.diff is not None
            and self.excludes_zero
            and t_ok  # a bootstrap over 2-5 seeds is too narrow: the seed-level t interval must agree
            and self.diff * BETTER[self.metric] > 0
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
    values: dict[str, dict[int, float]]  # metric -> seed -> value
    cmp: dict[str, Compare] = field(default_factory=dict)
    paper: paper.PaperRow | None = None

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
            )
        for s, r in self.runs.items():
            if r.status == "failed":
                reason = str(r.rec.get("reason") or "no reason given").splitlines()[0]
                parts.append(f"failed s{s}: {reason}")
            elif r.status == "interrupted":
                parts.append(f"interrupted s{s} (its process is gone; rerun to resume)")
        return "; ".join(parts)

    def mean_of(self, key: str) -> float | None:
        v = [float(r.rec[key]) for r in self.finished.values() if r.rec.get(key) is not None]
        return sum(v) / len(v) if v else None


@dataclass
class Analysis:
    rows: list[RowResult]
    coll: Collection
    n_boot: int
    notes: list[str]

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
) -> Analysis:
    """Each row's figures, its difference from base with a t-test and a hierarchical bootstrap, and Holm's
    correction across the rows (per metric and per test)."""
    t3 = paper.table3()
    order = rows or ordered(set(paper.PAPER_ORDER) | set(coll.runs))
    results = [_row_result(coll, row, t3) for row in order]
    base = next((r for r in results if r.row == "base"), None) or _row_result(coll, "base", t3)
    base_sent = _sentences(base)
    for rr in results:
        if rr.row != "base":
            _compare(rr, base, base_sent, n_boot, boot_seed, seeds_min)
    _correct_and_flag([r for r in results if r.row != "base"])
    return Analysis(results, coll, n_boot, [])


def _row_result(coll: Collection, row: str, t3: dict) -> RowResult:
    runs, finished = coll.runs.get(row, {}), coll.finished(row)
    values = {
        m: {s: v for s, r in finished.items() if (v := r.metric(RECORD_KEY[m])) is not None}
        for m in METRICS + EXTRA
    }
    model = _model_dict(coll, row, runs)
    group = t3[row].group if row in t3 else (model.get("group") or "extra")
    return RowResult(row, group, model, runs, finished, values, paper=t3.get(row))


def _sentences(rr: RowResult) -> dict[int, stats.Sentences]:
    return {
        s: stats.Sentences.from_arrays(d) for s, r in rr.finished.items() if (d := r.sentences()) is not None
    }


def _diff_to_base(rv: dict[int, float], bv: dict[int, float]) -> tuple[float, dict[int, float]]:
    """The row's mean minus base's over the same seeds (all of base's where the row has seeds base lacks),
    and the base values that mean is over."""
    bv_cmp = {s: bv[s] for s in rv} if set(rv) <= set(bv) else bv
    return stats.mean_sd(list(rv.values()))[0] - stats.mean_sd(list(bv_cmp.values()))[0], bv_cmp


def _compare(rr: RowResult, base: RowResult, base_sent: dict, n_boot: int, boot_seed: int, seeds_min: int):
    """rr.cmp[metric]: the row minus base, paired by seed where every seed of the row also ran for base."""
    row_sent = None
    for m in METRICS:
        c = rr.cmp[m] = Compare(m, paper_diff=paper.paper_delta(rr.row, m))
        bv, rv = base.values[m], rr.values[m]
        if not bv or not rv or len(rv) < seeds_min or len(bv) < seeds_min:
            continue
        paired_seeds = set(rv) <= set(bv)
        c.diff, bv_cmp = _diff_to_base(rv, bv)
        c.n_row, c.n_base = len(rv), len(bv_cmp)
        common = sorted(rv) if paired_seeds else []
        try:
            if len(common) >= 2:
                c.ttest = stats.paired_t([bv[s] for s in common], [rv[s] for s in common])
            elif len(bv) >= 2 and len(rv) >= 2:
                c.ttest = stats.welch(list(bv.values()), list(rv.values()))
        except ValueError:
            c.ttest = None
        row_sent = _sentences(rr) if row_sent is None else row_sent
        if base_sent and row_sent:
            paired = set(row_sent) <= set(base_sent)
            b = {s: base_sent[s] for s in row_sent} if paired else base_sent
            try:
                c.boot = stats.hierarchical_bootstrap(
                    b, row_sent, m, n_boot=n_boot, seed=boot_seed, paired=paired
                )
            except ValueError:
                c.boot = None


def _correct_and_flag(compared: list[RowResult]) -> None:
    """Holm across the rows compared with base, per metric and per test; flag disagreements with the paper."""
    for m in METRICS:
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


# ------------------------------------------------------------------------------------------------------------
# Rendering


def _cell_model(rr: RowResult, base_model: dict[str, Any], key: str) -> str:
    v = rr.model.get(key)
    if rr.row != "base" and v == base_model.get(key):
        return ""
    if key == "train_steps":
        return fsteps(v)
    return "" if v is None else str(v)


def _other(rr: RowResult, base_model: dict[str, Any]) -> str:
    out = []
    for k in OTHER_KEYS:
        if rr.model.get(k) != base_model.get(k):
            out.append(
                "learned positions"
                if (k, rr.model.get(k)) == ("positional", "learned")
                else f"{k}={rr.model.get(k)}"
            )
    return ", ".join(out)


def _metric_cell(rr: RowResult, m: str) -> str:
    mean, sd, n = rr.summary(m)
    if n == 0:
        return ""
    s = fnum(mean, 2)
    if n > 1:
        s += f" ± {fnum(sd, 2)}"
    if rr.row != "base" and m in rr.cmp and rr.cmp[m].improves:
        s = f"**{s}**"
    if any(rr.finished[seed].stale for seed in rr.values[m]):
        s += " †"
    return s


def _params_cell(rr: RowResult, key: str) -> str:
    v = rr.mean_of(key)
    if v is None:
        v = next((float(r.rec[key]) for r in rr.runs.values() if r.rec.get(key) is not None), None)
    return "" if v is None else f"{v / 1e6:.2f}"


def _label(rr: RowResult) -> str:
    if rr.group in (rr.row, "extra", "base") or rr.row in ("base", "big"):
        return rr.row
    return f"({rr.group}) {rr.row}"


def _test_cell(t: stats.TTest | None, n_row: int) -> str:
    if t is None:
        return "— (one seed)" if n_row == 1 else "—"
    return f"{t.kind} (df {t.df:.1f})" if t.kind == "Welch t" else f"{t.kind} (df {t.df:g})"


def _has_test(an: Analysis) -> bool:
    return any(rr.values["test_bleu"] for rr in an.rows)


def main_table(an: Analysis) -> Table:
    base = an.get("base")
    base_model = base.model if base else asdict(ModelConfig())
    has_test = _has_test(an)
    cols = [
        "row",
        *[c for _, c in MODEL_COLUMNS],
        "other",
        "PPL dev",
        "paper",
        "Δ base",
        "paper Δ",
        "BLEU dev",
        "paper",
        "Δ base",
        "paper Δ",
        *(["BLEU test", "Δ base"] if has_test else []),
        "params ×10^6 (run)",
        "params ×10^6 (paper scale)",
        "paper",
        "seeds / status",
    ]
    body = []
    for rr in an.rows:
        p = rr.paper
        cells: list[Any] = [_label(rr)]
        cells += [_cell_model(rr, base_model, k) for k, _ in MODEL_COLUMNS]
        cells.append(_other(rr, base_model))
        for m, nd in (("ppl", 2), ("bleu", 1)):
            c = rr.cmp.get(m)
            cells += [
                _metric_cell(rr, m),
                "" if p is None else f"{getattr(p, m):.{nd}f}",
                "" if c is None else fnum(c.diff, 2, sign=True),
                "" if c is None or c.paper_diff is None else fnum(c.paper_diff, nd, sign=True),
            ]
        if has_test:
            diff = _mean_diff(rr, base, "test_bleu")
            cells += [_metric_cell(rr, "test_bleu"), "" if diff is None else fnum(diff, 2, sign=True)]
        paper_params = "" if p is None else (f"{p.params_m:g}" if p.params_printed else "")
        cells += [
            _params_cell(rr, "params"),
            _params_cell(rr, "params_paper_scale"),
            paper_params,
            rr.status(),
        ]
        body.append(cells)
    return Table(cols, body, align="l" + "r" * 9 + "l" + "r" * (11 + 2 * has_test) + "l")


def _mean_diff(rr: RowResult, base: RowResult | None, m: str) -> float | None:
    """Δ base of an extra metric (no interval): as for the dev metrics."""
    if base is None or rr is base or not rr.values[m] or not base.values[m]:
        return None
    return _diff_to_base(rr.values[m], base.values[m])[0]


def stats_table(an: Analysis, m: str) -> Table:
    name = {"ppl": "PPL (dev)", "bleu": "BLEU (dev)"}[m]
    cols = [
        "row",
        "n (row/base)",
        "Δ vs base",
        "95% CI (t)",
        "test",
        "p",
        "p Holm",
        "bootstrap 95% CI",
        "p boot",
        "p boot Holm",
        "bootstrap",
        "paper Δ",
        "vs paper",
    ]
    body = []
    for rr in an.rows:
        if rr.row == "base":
            continue
        c = rr.cmp[m]
        if c.diff is None:
            continue
        base = an.get("base")
        nb = len(base.values[m]) if base else 0
        t, b = c.ttest, c.boot
        dcell = fnum(c.diff, 3, sign=True)
        if c.improves:
            dcell = f"**{dcell}**"
        boot_kind = ""
        if b is not None:
            boot_kind = ONE_SEED_LABEL if b.kind == "paired bootstrap over sentences" else b.kind
        body.append(
            [
                rr.row,
                f"{len(rr.values[m])}/{nb}",
                dcell,
                "" if t is None else f"[{t.lo:+.3f}, {t.hi:+.3f}]",
                _test_cell(t, len(rr.values[m])),
                "" if t is None else fp(t.p),
                fp(c.p_t_holm),
                "" if b is None else f"[{b.lo:+.3f}, {b.hi:+.3f}]",
                "" if b is None else fp(b.p),
                fp(c.p_boot_holm),
                boot_kind,
                "" if c.paper_diff is None else fnum(c.paper_diff, 2, sign=True),
                "; ".join([d for d in [c.direction()] if d] + [f for f in c.flags if f != OPPOSITE]),
            ]
        )
    return Table(cols, body, align="lrrrlrrrrrlrl", title=f"{name}: difference to our base")


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


def _pct(x: float | None) -> str:
    return "" if x is None else f"{100 * x:+.1f}%"


def fit_table(an: Analysis) -> Table:
    """Where each row's dev curve bottomed against where it ended, how much it still fell over the last
    10% of steps, and its training loss: the evidence that tells a row still learning, one that overfits
    (best well before the end, dev rising after) and one that underfits (high training loss)."""
    cols = [
        "row",
        "seeds",
        "train loss, last 10% of steps",
        "dev PPL, end",
        "dev PPL, best",
        "best at step",
        "dev PPL change, last 10% of steps",
    ]
    body = []
    for rr in an.rows:
        if (f := row_fit(rr)) is None:
            continue
        steps = ", ".join(map(str, f.best_steps))
        body.append(
            [rr.row, len(f.best_steps), fnum(f.train_loss, 3), fnum(f.end_ppl, 2), fnum(f.best_ppl, 2), steps]
            + [_pct(f.late)]
        )
    note = "train loss is label-smoothed at the row's eps_ls; dev PPL is not"
    return Table(cols, body, align="lrrrrlr", title=f"Fit (mean over finished seeds; {note})")


def _curve_reading(f: Fit, fb: Fit) -> str:
    where = f"best dev PPL at step {', '.join(map(str, f.best_steps))} of {f.last_step}"
    if f.overfits:
        return f"{where}, ending {_pct(f.end_ppl / f.best_ppl - 1)} above it: it overfits"
    late = f"{_pct(f.late)} over the last 10% of steps against base's {_pct(fb.late)}"
    if f.late is not None and f.late < -0.01:
        return f"{where}, still falling ({late}): it is still learning"
    return f"{where}, level at the end ({late})"


def _train_reading(rr: RowResult, base: RowResult, f: Fit, fb: Fit) -> str:
    if rr.model.get("label_smoothing") != base.model.get("label_smoothing"):
        return "its training loss does not compare with base's (another eps_ls)"
    lower_dev = rr.cmp["ppl"].diff < 0
    lower_train = f.train_loss < fb.train_loss
    what = "moves with" if lower_train == lower_dev else "moves against"
    kind = "fit" if lower_train == lower_dev else "generalisation"
    return (
        f"training loss over the last 10% of steps {f.train_loss:.3f} against base's {fb.train_loss:.3f}, "
        f"which {what} dev PPL: a difference of {kind}"
    )


def disagreement_evidence(an: Analysis) -> list[str]:
    """A line of evidence per row whose dev PPL differs from base in the opposite direction to the paper:
    the difference with its interval, what the training loss says (fit or generalisation) and what the
    dev curve says (overfitting, still learning, level). Facts from the curves, not a diagnosis."""
    base, out = an.get("base"), []
    fb = row_fit(base) if base else None
    for row in agreement(an)["disagree"]:
        rr = an.get(row)
        c, f = rr.cmp["ppl"], row_fit(rr)
        iv = c.interval
        head = (
            f"- **{row}**: dev PPL {rr.summary('ppl')[0]:.2f} against base's {base.summary('ppl')[0]:.2f} "
            f"(Δ {c.diff:+.2f}"
            + (f", interval [{iv[0]:+.2f}, {iv[1]:+.2f}]" if iv else "")
            + f"; paper Δ {c.paper_diff:+.2f}, {c.n_row}/{c.n_base} seeds)"
        )
        if f is None or fb is None:
            out.append(head + "; no curves to read.")
            continue
        out.append(f"{head}; {_train_reading(rr, base, f, fb)}; {_curve_reading(f, fb)}.")
    return out


def cost_table(an: Analysis) -> Table:
    cols = [
        "row",
        "finished seeds",
        "steps",
        "wall time",
        "train time",
        "tokens/s",
        "FLOPs (estimate)",
        "device",
    ]
    body = []
    for rr in an.rows:
        if not rr.finished:
            continue
        devices = sorted({str(r.rec.get("device")) for r in rr.finished.values() if r.rec.get("device")})
        steps = rr.mean_of("steps")
        body.append(
            [
                rr.row,
                len(rr.finished),
                "" if steps is None else f"{steps:.0f}",
                fduration(rr.mean_of("wall_time_s")),
                fduration(rr.mean_of("train_time_s")),
                fnum(rr.mean_of("tokens_per_s"), 0),
                fsi(rr.mean_of("flops_estimate")),
                ", ".join(devices),
            ]
        )
    return Table(cols, body, align="lrrrrrrl", title="Cost (mean over finished seeds)")


PAPER_PPL_EFFECT = 0.05  # the paper's dev-PPL differences to base this large count as effects (15 rows)


def agreement(an: Analysis) -> dict[str, list[str]]:
    """The rows with a paper dev-PPL effect (|paper Δ| >= 0.05), those measured here, those that agree with
    the paper in sign, those both intervals support, and those that disagree."""
    effect = [
        rr
        for rr in an.rows
        if rr.row != "base"
        and (d := paper.paper_delta(rr.row, "ppl")) is not None
        and round(abs(d), 2) >= PAPER_PPL_EFFECT
    ]
    measured = [rr for rr in effect if (c := rr.cmp.get("ppl")) is not None and c.diff is not None]
    agree = [rr for rr in measured if rr.cmp["ppl"].direction() == "agree"]
    return {
        "paper_effect": [rr.row for rr in effect],
        "measured": [rr.row for rr in measured],
        "agree": [rr.row for rr in agree],
        "supported": [rr.row for rr in agree if rr.cmp["ppl"].both_exclude_zero],
        "disagree": [rr.row for rr in measured if rr not in agree],
    }


def agreement_line(an: Analysis) -> str:
    """The table's one-line reading against the paper."""
    a = agreement(an)
    if not a["measured"]:
        return "Against the paper: no row with a paper dev-PPL effect has been measured against base yet."
    n_meas = "" if a["measured"] == a["paper_effect"] else f" ({len(a['measured'])} of them measured)"
    supported = f" ({', '.join(a['supported'])})" if a["supported"] else ""
    return (
        f"**Against the paper: {len(a['agree'])} of the {len(a['paper_effect'])} rows whose paper dev-PPL "
        f"difference to base is at least {PAPER_PPL_EFFECT}{n_meas} agree with it in sign; "
        f"{len(a['supported'])} of those with both the seed-level t interval and the bootstrap interval "
        f"excluding zero{supported}.** Disagreeing: {', '.join(a['disagree']) or 'none'}."
    )


def direction_summary(an: Analysis) -> list[str]:
    out = []
    for m, name in (("bleu", "BLEU"), ("ppl", "PPL")):
        cs = [(rr.row, rr.cmp[m]) for rr in an.rows if rr.row != "base" and rr.cmp.get(m)]
        dirs = [(row, c.direction()) for row, c in cs if c.direction() is not None]
        agree = [r for r, d in dirs if d == "agree"]
        opp = [r for r, d in dirs if d == "opposite"]
        none = [r for r, d in dirs if d == "no paper effect"]
        zero = [r for r, d in dirs if d == "no effect here"]
        excl = [row for row, c in cs if "interval excludes the paper's Δ" in c.flags]
        with_effect = len(agree) + len(opp) + len(zero)
        line = (
            f"- {name}: {len(agree)} of {with_effect} rows with a paper effect agree with the paper's "
            f"direction"
        )
        extra = []
        if opp:
            extra.append("opposite: " + ", ".join(opp))
        if zero:
            extra.append("no difference here: " + ", ".join(zero))
        if none:
            extra.append(f"{len(none)} with no paper effect, paper Δ = 0: " + ", ".join(none))
        if excl:
            extra.append("interval excludes the paper's Δ: " + ", ".join(excl))
        out.append(line + (" (" + "; ".join(extra) + ")" if extra else "") + ".")
    return out


def _scale_line(coll: Collection) -> str:
    s = coll.scale_cfg or {}
    name = coll.scale or "paper"
    eff = coll.base_effective
    dims = ""
    if eff:
        dims = "; effective base: " + ", ".join(
            f"{k}={eff[k]}" for k in ("n_layers", "d_model", "d_ff", "n_heads", "d_k", "d_v") if k in eff
        )
    if all(float(s.get(k, 1.0)) == 1.0 for k in ("width", "depth", "steps")):
        size = "the paper's" if name == "paper" else "the recipe's own"
        return f"Scale: {size} (preset '{name}'){dims}."
    return (
        f"**Scaled-down records**: preset '{name}' (width x{s.get('width', '?')}, "
        f"depth x{s.get('depth', '?')}, "
        f"steps x{s.get('steps', '?')}){dims}. The model columns give the paper-scale row settings; "
        "the measured PPL and BLEU come from the scaled models and are not the paper's scale."
    )


def _signatures(coll: Collection) -> list[str]:
    sig = sorted(
        {
            str(r.metrics.get("dev_bleu_signature"))
            for by in coll.runs.values()
            for r in by.values()
            if r.metrics.get("dev_bleu_signature")
        }
    )
    return sig


def _rel(path: Path, start: Path) -> str:
    return Path(os.path.relpath(path, start)).as_posix()


def table3_markdown(an: Analysis, plots: dict[str, Path] | None = None, out_dir: Path | None = None) -> str:
    coll = an.coll
    n_rec = sum(len(by) for by in coll.runs.values())
    lines = ["# Table 3: variations on the Transformer (En-De dev)", ""]
    lines.append(
        f"Records: {n_rec} run(s) read from `{coll.results_dir.as_posix()}`; seeds seen: "
        f"{', '.join(map(str, coll.seeds())) or 'none'}."
    )
    lines.append(_scale_line(coll))
    lines.append(agreement_line(an))
    for s in _signatures(coll):
        lines.append(f"BLEU: sacreBLEU `{s}`.")
    lines += [
        "",
        "PPL and BLEU: mean ± sd over finished seeds. Blank model cells equal base, as in the paper. "
        "Δ base = this row's mean minus our base's mean over the same seeds (all of base's seeds when the "
        "row has seeds base lacks); paper Δ = the paper's row minus the paper's base "
        "(PPL is per wordpiece under each run's own vocabulary, so only directions compare across "
        "vocabularies). A value is bold only when it beats base over at least two seeds per side with "
        "both the seed-level t interval and the bootstrap interval excluding zero. "
        "† = stale record (see below).",
        "",
    ]
    if _has_test(an):
        lines += [
            "BLEU test: the test set the records name (test_2016_flickr on Multi30k), decoded from each "
            "run's final checkpoint(s), sacreBLEU as for dev; mean ± sd, Δ base as above, without intervals.",
            "",
        ]
    lines.append(_md(main_table(an)))
    lines += [
        "## Statistics",
        "",
        "Seed-level tests use each run's dev metric: paired t over the seeds both rows share (when every "
        "seed of the row also exists for base), otherwise Welch t. The bootstrap resamples seeds and then "
        f"dev sentences ({an.n_boot} replicates; the same sentence indices for base and row), recomputing "
        "corpus BLEU from summed sufficient statistics and perplexity from summed NLL and tokens; it is "
        "the interval used for bold cells and the flags. p Holm = Holm-Bonferroni over the rows compared "
        "with base, per metric and test.",
        "",
    ]
    for m in ("bleu", "ppl"):
        t = stats_table(an, m)
        lines.append(_md(t) if t.rows else f"### {t.title}\n\nNo row has finished runs beside base.\n")
    lines += ["## Reproduction gap", ""] + direction_summary(an) + [""]
    flagged = [(rr.row, m, f) for rr in an.rows for m in METRICS if rr.cmp.get(m) for f in rr.cmp[m].flags]
    for row, m, f in flagged:
        lines.append(f"- {row} {m.upper()}: {f}")
    if flagged:
        lines.append("")
    evidence = disagreement_evidence(an)
    if evidence:
        lines += ["### Rows against the paper: what their curves say", ""] + evidence + [""]
    for extra in (fit_table(an), cost_table(an)):
        if extra.rows:
            lines.append(_md(extra))
    stale = [(rr.row, s, why) for rr in an.rows for s, why in rr.stale]
    problems = [f"- stale (†): {row} seed {s}: {'; '.join(why)}" for row, s, why in stale]
    problems += [f"- excluded: {e}" for e in coll.excluded]
    problems += [f"- warning: {w}" for w in coll.warnings]
    if problems:
        lines += ["## Stale, excluded and unreadable records", ""] + problems + [""]
    if plots:
        lines += ["## Plots", ""]
        for title, p in plots.items():
            rel = _rel(p, out_dir) if out_dir else p.as_posix()
            lines.append(f"![{title}]({rel})")
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def _md(t: Table) -> str:
    return render(t, "md")


def table3_json(an: Analysis) -> dict[str, Any]:
    rows = []
    for rr in an.rows:
        d: dict[str, Any] = {
            "row": rr.row,
            "group": rr.group,
            "model": rr.model,
            "status": rr.status(),
            "seeds": sorted(rr.runs),
            "finished_seeds": sorted(rr.finished),
            "stale": {str(s): why for s, why in rr.stale},
            "params": rr.mean_of("params"),
            "params_paper_scale": rr.mean_of("params_paper_scale"),
        }
        for m in METRICS:
            mean, sd, n = rr.summary(m)
            d[m] = {
                "mean": mean,
                "sd": sd,
                "n": n,
                "per_seed": {str(k): v for k, v in rr.values[m].items()},
                "paper": getattr(rr.paper, m) if rr.paper else None,
            }
            c = rr.cmp.get(m)
            if c is not None:
                d[m]["vs_base"] = {
                    "diff": c.diff,
                    "paper_diff": c.paper_diff,
                    "direction": c.direction(),
                    "flags": c.flags,
                    "ttest": asdict(c.ttest) if c.ttest else None,
                    "p_t_holm": c.p_t_holm,
                    "bootstrap": asdict(c.boot) if c.boot else None,
                    "p_boot_holm": c.p_boot_holm,
                }
        mean, sd, n = rr.summary("test_bleu")
        d["test_bleu"] = {
            "mean": mean,
            "sd": sd,
            "n": n,
            "per_seed": {str(k): v for k, v in rr.values["test_bleu"].items()},
        }
        d["cost"] = {
            k: rr.mean_of(k) for k in ("wall_time_s", "train_time_s", "tokens_per_s", "flops_estimate")
        }
        rows.append(d)
    coll = an.coll
    return clean_nan(
        {
            "scale": coll.scale,
            "scale_config": coll.scale_cfg,
            "base_effective": coll.base_effective,
            "rows": rows,
            "summary": direction_summary(an),
            "agreement": agreement(an),
            "disagreement_evidence": disagreement_evidence(an),
            "warnings": coll.warnings,
            "excluded": coll.excluded,
        }
    )


# ------------------------------------------------------------------------------------------------------------
# Missing cells and the command that runs them


def missing_cells(
    an: Analysis, rows: list[str] | None = None, seeds: list[int] | None = None
) -> dict[tuple[str, int], str]:
    """(row, seed) -> 'missing' | 'failed' | 'stale' for the requested rows x seeds."""
    coll = an.coll
    rows = rows or list(paper.PAPER_ORDER)
    seeds = seeds or coll.seeds() or [1]
    out = {}
    for row in rows:
        by = coll.runs.get(row, {})
        for s in seeds:
            r = by.get(s)
            if r is None:
                out[(row, s)] = "missing"
            elif r.status in ("failed", "interrupted"):
                out[(row, s)] = r.status
            elif r.stale and r.status == "finished":  # a running run is left alone
                out[(row, s)] = "stale"
    return out


def _hydra_value(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list | tuple):
        return "[" + ",".join(_hydra_value(x) for x in v) + "]"
    s = str(v)
    if any(ch in s for ch in " ,=[]{}()'\"$*?"):
        return "'" + s.replace("'", "\\'") + "'"
    return s


_SKIP = NOT_IDENTITY | {"data.name"}  # data.name: given as data=<name>


def run_overrides(run: Run | None, results_dir: str | None = None) -> list[str]:
    """The non-model overrides a record was run with: scale and data presets, then every train/decode/trainer/
    data value that differs from the dataclass default (harmless where a preset sets the same value)."""
    out: list[str] = []
    if run is None:
        return out
    if run.recipe is not None:  # always named: the defaults (recipe=cpu scale=cpu) are not the paper's
        out.append(f"recipe={run.recipe}")
    out.append(f"scale={run.scale_name}")
    data = run.cfg("data") or {}
    if data.get("name", "builtin") != "builtin":
        out.append(f"data={data['name']}")
    for section, cls in (
        ("base", ArchConfig),
        ("data", DataConfig),
        ("train", TrainConfig),
        ("decode", DecodeConfig),
        ("trainer", TrainerConfig),
    ):
        got = run.cfg(section) or {}
        for f in fields(cls):
            key = f"{section}.{f.name}"
            if key in _SKIP or f.name not in got:
                continue
            default = asdict(cls())[f.name]
            v = got[f.name]
            if isinstance(default, tuple):
                default = list(default)
            if v != default:
                out.append(f"{key}={_hydra_value(v)}")
    if run.rec.get("task", "translation") != "translation":
        out.append(f"task={run.rec['task']}")
    if results_dir and results_dir != "results":
        out.append(f"results_dir={_hydra_value(results_dir)}")
    return out


def missing_commands(
    an: Analysis,
    rows: list[str] | None = None,
    seeds: list[int] | None = None,
    results_dir: str | None = None,
) -> list[str]:
    """One `python -m ablate.run -m` per set of rows needing the same seeds: exactly the missing, failed or
    stale cells (stale ones are rerun with resume=false)."""
    cells = missing_cells(an, rows, seeds)
    tmpl = an.coll.template()
    over = run_overrides(tmpl, results_dir)
    out = []
    for rerun in (False, True):
        need: dict[str, list[int]] = {}
        for (row, s), why in cells.items():
            if (why == "stale") == rerun:
                need.setdefault(row, []).append(s)
        by_seeds: dict[tuple[int, ...], list[str]] = {}
        for row, ss in need.items():
            by_seeds.setdefault(tuple(sorted(ss)), []).append(row)
        for ss, rs in by_seeds.items():
            cmd = [
                "python -m ablate.run -m",
                f"model={','.join(rs)}",
                f"seed={','.join(map(str, ss))}",
                *over,
            ]
            if rerun:
                cmd.append("resume=false")
            out.append(" ".join(cmd))
    return out


# ------------------------------------------------------------------------------------------------------------
# Tables 2 and 4


def _pair(run: Run) -> str:
    d = run.cfg("data") or {}
    return f"{d.get('src_lang', 'en')}-{d.get('tgt_lang', 'de')}".upper()


def table2(coll: Collection) -> tuple[Table, list[str]]:
    """The paper's Table 2 rows, then ours: every (row, language pair, averaging) with test_bleu. One piece:
    the two row loops build the same columns, which read best beside each other."""
    cols = ["model", "BLEU EN-DE", "BLEU EN-FR", "tok. BLEU", "FLOPs", "paper (same row)", "Δ paper", "notes"]
    body: list[list[Any]] = []
    for r in paper.table2():
        flops = r["flops_en_de"] or r["flops_en_fr"]
        body.append(
            [
                r["model"],
                fnum(r["bleu_en_de"], 2).rstrip("0").rstrip(".") if r["bleu_en_de"] else "",
                fnum(r["bleu_en_fr"], 2).rstrip("0").rstrip(".") if r["bleu_en_fr"] else "",
                "",
                fsi(flops)
                if r["flops_en_de"] and r["flops_en_fr"] and r["flops_en_de"] == r["flops_en_fr"]
                else " / ".join(fsi(x) for x in (r["flops_en_de"], r["flops_en_fr"]) if x),
                "",
                "",
                r["note"],
            ]
        )
    groups: dict[tuple[str, str, int], list[Run]] = {}
    for row, by in coll.runs.items():
        for r in by.values():
            if r.status == "finished" and r.metrics.get("test_bleu") is not None:
                avg = int((r.cfg("train") or {}).get("average_last", 0) or 0)
                groups.setdefault((row, _pair(r), avg), []).append(r)
    paper_rows = {r["ours_row"]: r for r in paper.table2() if r["ours_row"]}
    for (row, pair, avg), runs in sorted(
        groups.items(),
        key=lambda kv: (row_order(kv[0][0]), kv[0][1], kv[0][2]),
    ):
        mean, sd, n = stats.mean_sd([r.metrics["test_bleu"] for r in runs])
        tok = [r.metrics["test_bleu_tok"] for r in runs if r.metrics.get("test_bleu_tok") is not None]
        tmean, tsd, tn = stats.mean_sd(tok)
        cell = fnum(mean, 2) + (f" ± {fnum(sd, 2)}" if n > 1 else "")
        pr = paper_rows.get(row)
        pv = (
            None
            if pr is None
            else pr["bleu_en_de"]
            if pair == "EN-DE"
            else pr["bleu_en_fr"]
            if pair == "EN-FR"
            else None
        )
        flops = [float(r.rec["flops_estimate"]) for r in runs if r.rec.get("flops_estimate")]
        note = [
            f"{n} seed{'s' if n > 1 else ''}",
            f"checkpoint average {avg}" if avg > 1 else "no averaging",
            f"preset {runs[0].preset}",
        ]
        body.append(
            [
                f"ours: {row}",
                cell if pair == "EN-DE" else "",
                cell if pair == "EN-FR" else "",
                "" if tn == 0 else fnum(tmean, 2) + (f" ± {fnum(tsd, 2)}" if tn > 1 else ""),
                fsi(sum(flops) / len(flops)) if flops else "",
                "" if pv is None else f"{pv:g}",
                "" if pv is None else fnum(mean - pv, 2, sign=True),
                ", ".join(note),
            ]
        )
    notes = [
        "Paper rows: newstest2014 BLEU as printed (tokenization unstated). Ours: sacreBLEU on the run's "
        "test set (detokenized) and tokenized BLEU where recorded; FLOPs are our estimates."
    ]
    if not groups:
        notes.append("No record has metrics.test_bleu yet.")
    return Table(cols, body, align="lrrrrrrl", title="Table 2: test BLEU and training cost"), notes


def table4(coll: Collection) -> tuple[Table, list[str]]:
    """Section 23 F1 (metrics.test_f1, from `python -m ablate.evaluate RUN --split test`) beside the paper's
    Table 4; a run not yet evaluated on 23 shows its dev (22) F1, marked as such."""
    cols = ["parser", "training", "WSJ 23 F1", "paper Transformer", "Δ paper", "notes"]
    body: list[list[Any]] = [
        [r["parser"], r["training"], f"{r['f1']:.1f}", "", "", ""] for r in paper.table4()
    ]
    paper_tf = {r["training"]: r["f1"] for r in paper.table4() if r["ours"]}
    groups: dict[tuple[str, str, str], list[Run]] = {}
    for row, by in coll.runs.items():
        for r in by.values():
            key = "test_f1" if r.metrics.get("test_f1") is not None else "f1"
            if r.status == "finished" and r.metrics.get(key) is not None:
                data = str((r.cfg("data") or {}).get("name", "?"))
                groups.setdefault((row, data, key), []).append(r)
    for (row, data, key), runs in sorted(groups.items()):
        mean, sd, n = stats.mean_sd([float(r.metrics[key]) for r in runs])
        training = "semi-supervised" if "semi" in data else "WSJ only discriminative"
        pv = paper_tf.get(training) if key == "test_f1" else None
        errors = sum(int(r.metrics.get(key.replace("f1", "n_error"), 0)) for r in runs)
        over = sum(int(r.metrics.get(key.replace("f1", "n_over_200_brackets"), 0)) for r in runs)
        body.append(
            [
                f"ours: {row}",
                f"{training} (data={data})",
                fnum(mean, 2)
                + (f" ± {fnum(sd, 2)}" if n > 1 else "")
                + ("" if key == "test_f1" else " (dev 22)"),
                "" if pv is None else f"{pv:.1f}",
                "" if pv is None else fnum(mean - pv, 2, sign=True),
                f"{n} seed{'s' if n > 1 else ''}, preset {runs[0].preset}; EVALB errors {errors}, "
                f"over 200 brackets {over}",
            ]
        )
    notes = []
    if not groups:
        notes.append("No parsing record (task=parsing) has metrics.f1 yet.")
    elif any(key == "f1" for _, _, key in groups):
        notes.append("Rows marked (dev 22): run `python -m ablate.evaluate RUN --split test` for section 23.")
    return Table(cols, body, align="llrrrl", title="Table 4: English constituency parsing (WSJ 23 F1)"), notes
