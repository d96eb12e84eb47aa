"""The variations report rendered, for any task (Table 3 is translation's, with its paper's claims): the
main table (the task's paper beside ours), the statistics against the reference row for every declared
metric, the reading against the paper with each disagreement's evidence, fit and cost, as Markdown or
JSON. The numbers come from analysis.py.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ablate.config import ModelConfig
from ablate.config.study import DEFAULT_REFERENCE
from ablate.report import stats
from ablate.report.analysis import (
    OPPOSITE,
    Analysis,
    Fit,
    RowResult,
    agreement,
    diff_to_base,
    row_fit,
    side_of_base,
)
from ablate.report.claims import claims_data, claims_markdown, report_title
from ablate.report.collect import Collection, Run
from ablate.report.render import Table, clean_nan, fduration, fnum, fp, fsi, fsteps, render

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


OTHER_KEYS = ("ffn", "norm_type", "positional", "norm", "tie_embeddings", "attn_dropout", "relu_dropout")


ONE_SEED_LABEL = (
    "paired bootstrap over sentences: these two checkpoints differ on this dev set, not the configurations"
)


def _cell_model(rr: RowResult, base_model: dict[str, Any], key: str) -> str:
    """A model cell: blank where the row has the reference's value (`base_model`), as the paper's table."""
    v = rr.model.get(key)
    if rr.model is not base_model and v == base_model.get(key):
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
    for k in ("criterion_args", "run"):  # a row's keys beyond the model's (config/schema.py ModelConfig)
        mine, ref = rr.model.get(k) or {}, base_model.get(k) or {}
        if mine != ref:
            out += [f"{key}={v}" for key, v in _flat(mine, f"{k}." if k == "criterion_args" else "").items()]
    return ", ".join(out)


def _flat(node: Any, prefix: str = "") -> dict[str, Any]:
    """{'schedule.warmup_steps': 100}; a `_target_` node by its class's name and keys."""
    if isinstance(node, dict) and "_target_" in node:
        keys = " ".join(f"{k} {v}" for k, v in node.items() if not k.startswith("_"))
        return {prefix.rstrip("."): f"{str(node['_target_']).rsplit('.', 1)[-1]} {keys}".strip()}
    if not isinstance(node, dict):
        return {prefix.rstrip("."): node}
    out: dict[str, Any] = {}
    for k, v in node.items():
        out |= _flat(v, f"{prefix}{k}.")
    return out


def _metric_cell(rr: RowResult, m: str) -> str:
    mean, sd, n = rr.summary(m)
    if n == 0:
        return ""
    s = fnum(mean, 2)
    if n > 1:
        s += f" ± {fnum(sd, 2)}"
    if m in rr.cmp and rr.cmp[m].improves:  # the reference has no comparison of its own
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
    return any(rr.values[an.test_key] for rr in an.rows)


def _base_model(an: Analysis) -> dict[str, Any]:
    """The reference row's settings at the paper's size: what a blank model cell means."""
    base = an.get(an.reference)
    if base is not None:
        return base.model
    known = an.coll.rows.models.get(an.reference)
    return asdict(known if known is not None else ModelConfig(name=an.reference))


def main_table(an: Analysis) -> Table:
    base = an.get(an.reference)
    base_model = _base_model(an)
    has_test = _has_test(an)
    test = f"{an.headline.label} test"
    delta = f"Δ {an.reference}"
    cols = ["row", *[c for _, c in MODEL_COLUMNS], "other"]
    for m in an.metrics:
        cols += [f"{m.label} dev", "paper", delta, "paper Δ"]
    cols += [
        *([test, delta] if has_test else []),
        "params ×10^6 (run)",
        "params ×10^6 (paper scale)",
        "paper",
        "seeds / status",
    ]
    digits = an.paper.decimals if an.paper else {}
    body = []
    for rr in an.rows:
        p = rr.paper
        cells: list[Any] = [_label(rr)]
        cells += [_cell_model(rr, base_model, k) for k, _ in MODEL_COLUMNS]
        cells.append(_other(rr, base_model))
        for m in an.metrics:
            c, nd = rr.cmp.get(m.name), digits.get(m.name, 2)
            figure = None if p is None else p.get(m.name)
            cells += [
                _metric_cell(rr, m.name),
                "" if figure is None else f"{figure:.{nd}f}",
                "" if c is None else fnum(c.diff, 2, sign=True),
                "" if c is None or c.paper_diff is None else fnum(c.paper_diff, nd, sign=True),
            ]
        if has_test:
            diff = _mean_diff(rr, base, an.test_key)
            cells += [_metric_cell(rr, an.test_key), "" if diff is None else fnum(diff, 2, sign=True)]
        paper_params = "" if rr.paper_params is None else f"{rr.paper_params:g}"
        cells += [
            _params_cell(rr, "params"),
            _params_cell(rr, "params_paper_scale"),
            paper_params,
            rr.status(),
        ]
        body.append(cells)
    n_num = 4 * len(an.metrics) + 3 + 2 * has_test
    return Table(cols, body, align="l" + "r" * 9 + "l" + "r" * n_num + "l")


def _varies(rr: RowResult, base_model: dict[str, Any]) -> str:
    """What a row changes from the reference (`base_model`), at the paper's scale: "h 1, d_k 512, d_v
    512"."""
    swept = rr.row.split(" ", 1)[1:]  # a setting's command-line keys (collect.Run.setting)
    if rr.model is base_model:
        return ", ".join(swept)
    cells = [(c, _cell_model(rr, base_model, k)) for k, c in MODEL_COLUMNS]
    other = [o] if (o := _other(rr, base_model)) else []
    return ", ".join([f"{c} {v}" for c, v in cells if v] + other + swept)


def _against_paper(rr: RowResult, a: dict[str, list[str]]) -> str:
    if rr.row not in a["measured"]:
        return ""
    if rr.row not in a["agree"]:
        return "opposite"
    return "agrees, both intervals" if rr.row in a["supported"] else "agrees"


def summary_note(an: Analysis) -> str:
    m = an.read_by
    return (
        f"varies: the row's change from {an.reference} at the paper's size. sign vs paper: for the rows "
        f"whose paper dev-{m.label} Δ is at least {m.negligible}, whether ours has the paper's sign, and "
        "whether both intervals exclude zero. Means ± sd over finished seeds; the full table, the statistics "
        "and the curves follow."
    )


def summary_table(an: Analysis) -> Table:
    """The table in a screen: what each row varies, its dev figure of the metric the paper is read by and
    its Δ beside the paper's Δ with the reading the agreement line counts, the other dev figures and the
    headline's test figure. The README quotes it as written."""
    base_model = _base_model(an)
    a = agreement(an)
    by = an.read_by
    others = [m for m in an.stats_order if m is not by]
    cols = ["row", "varies", f"dev {by.label}", f"Δ {an.reference}", "paper Δ", "sign vs paper"]
    cols += [f"dev {m.label}" for m in others] + [f"test {an.headline.label}", "seeds"]
    body = []
    for rr in an.rows:
        c = rr.cmp.get(by.name)
        body.append(
            [
                rr.row,
                _varies(rr, base_model),
                _metric_cell(rr, by.name),
                "" if c is None else fnum(c.diff, 2, sign=True),
                "" if c is None or c.paper_diff is None else fnum(c.paper_diff, 2, sign=True),
                _against_paper(rr, a),
                *(_metric_cell(rr, m.name) for m in others),
                _metric_cell(rr, an.test_key),
                rr.status(),
            ]
        )
    return Table(cols, body, align="llrrrl" + "r" * (len(others) + 1) + "l")


def _mean_diff(rr: RowResult, base: RowResult | None, m: str) -> float | None:
    """Δ of an extra metric against the reference (`base`; no interval): as for the dev metrics."""
    if base is None or rr is base or not rr.values[m] or not base.values[m]:
        return None
    return diff_to_base(rr.values[m], base.values[m])[0]


def stats_table(an: Analysis, metric) -> Table:
    m, name = metric.name, f"{metric.label} (dev)"
    cols = [
        "row",
        f"n (row/{an.reference})",
        f"Δ vs {an.reference}",
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
    base = an.get(an.reference)
    for rr in an.rows:
        if rr.row == an.reference:
            continue
        c = rr.cmp[m]
        if c.diff is None:
            continue
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
    return Table(cols, body, align="lrrrlrrrrrlrl", title=f"{name}: difference to our {an.reference}")


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


def _curve_reading(f: Fit, fb: Fit, ref: str) -> str:
    where = f"best dev PPL at step {', '.join(map(str, f.best_steps))} of {f.last_step}"
    if f.overfits:
        return f"{where}, ending {_pct(f.end_ppl / f.best_ppl - 1)} above it: it overfits"
    late = f"{_pct(f.late)} over the last 10% of steps against {ref}'s {_pct(fb.late)}"
    if f.late is not None and f.late < -0.01:
        return f"{where}, still falling ({late})"
    return f"{where}, level at the end ({late})"


def _train_reading(rr: RowResult, base: RowResult, f: Fit, fb: Fit) -> str:
    ref = base.row
    if rr.model.get("label_smoothing") != base.model.get("label_smoothing"):
        return f"its training loss does not compare with {ref}'s (another eps_ls)"
    lower_dev = rr.cmp["ppl"].diff < 0
    lower_train = f.train_loss < fb.train_loss
    what = "moves with" if lower_train == lower_dev else "moves against"
    kind = "fit" if lower_train == lower_dev else "generalisation"
    return (
        f"training loss over the last 10% of steps {f.train_loss:.3f} against {ref}'s {fb.train_loss:.3f}, "
        f"which {what} dev PPL: a difference of {kind}"
    )


def disagreement_evidence(an: Analysis) -> list[str]:
    """A line of evidence per row whose dev PPL differs from the reference's in the opposite direction to
    the paper: the difference with its interval, what the training loss says (fit or generalisation) and
    what the dev curve says (overfitting, still falling, level), beside the reference's. Facts from the
    curves, not a diagnosis."""
    ref = an.reference
    base, out = an.get(ref), []
    fb = row_fit(base) if base else None
    for row in agreement(an)["disagree"]:
        rr = an.get(row)
        by = an.read_by
        c, f = rr.cmp[by.name], row_fit(rr)
        iv = c.interval
        head = (
            f"- **{row}**: dev {by.label} {rr.summary(by.name)[0]:.2f} against {ref}'s "
            f"{base.summary(by.name)[0]:.2f} "
            f"(Δ {c.diff:+.2f}"
            + (f", interval [{iv[0]:+.2f}, {iv[1]:+.2f}]" if iv else "")
            + f"; paper Δ {c.paper_diff:+.2f}, {c.n_row}/{c.n_base} seeds)"
        )
        if f is None or fb is None:
            out.append(head + "; no curves to read.")
            continue
        parts = [head, _train_reading(rr, base, f, fb), _curve_reading(f, fb, ref)]
        if (side := side_of_base(rr, base)) is not None:
            where = "below" if c.diff < 0 else "above"
            parts.append(
                f"{where} {ref}'s dev curve at {side[0]} of {side[1]} evaluations in the second half of "
                f"training (each against {ref}'s run of the same seed at the same step)"
            )
        out.append("; ".join(parts) + ".")
    return out


def _device(rec: dict) -> str:
    """'cpu (1 threads), AMD EPYC (family 23, model 1)': the machine beside the device, where recorded."""
    cpu = (rec.get("machine") or {}).get("cpu")
    return f"{rec['device']}, {cpu}" if cpu and str(rec["device"]).startswith("cpu") else str(rec["device"])


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
        devices = sorted({_device(r.rec) for r in rr.finished.values() if r.rec.get("device")})
        steps = rr.mean_of("steps")
        body.append(
            [
                rr.row,
                len(rr.finished),
                "" if steps is None else f"{steps:.0f}",
                fduration(rr.mean_of("wall_time_s")),
                fduration(rr.mean_over_runs(Run.train_seconds)),
                fnum(rr.mean_over_runs(Run.tokens_per_s), 0),
                fsi(rr.mean_of("flops_estimate")),
                "; ".join(devices),
            ]
        )
    title = (
        "Cost (mean over finished seeds; wall time summed over the processes a record keeps, its last "
        "process's in a record that keeps none; train time by the run's own clock, over every process it "
        "took)"
    )
    table = Table(cols, body, align="lrrrrrrl", title=title)
    return _with_estimates(an, table)


def _with_estimates(an: Analysis, table: Table) -> Table:
    """Where runs carry the estimate their job made before training (ablate.jobs.estimate), a column of it
    beside the wall time they took: the mean estimate, and the bases it came from."""
    by_row = {
        rr.row: [r.rec["estimate"] for r in rr.finished.values() if r.rec.get("estimate")] for rr in an.rows
    }
    if not any(by_row.values()):
        return table
    for cells in table.rows:
        est = by_row.get(cells[0], [])
        known = [e["seconds"] for e in est if e.get("seconds") is not None]
        bases = ", ".join(sorted({e.get("basis", "?") for e in est}))
        cells.insert(
            4, "" if not est else (f"{fduration(sum(known) / len(known))} ({bases})" if known else "unknown")
        )
    table.columns.insert(4, "estimated before (basis)")
    table.align = table.align[:4] + "r" + table.align[4:]
    return table


def agreement_line(an: Analysis) -> str:
    """The table's one-line reading against the paper."""
    a, by = agreement(an), an.read_by
    if an.paper is None:
        return f"Against the paper: task {an.task.name} declares no paper's table (docs/tasks.md)."
    if not a["measured"]:
        what = f"a paper dev-{by.label} effect"
        return f"Against the paper: no row with {what} has been measured against {an.reference} yet."
    n_meas = "" if a["measured"] == a["paper_effect"] else f" ({len(a['measured'])} of them measured)"
    supported = f" ({', '.join(a['supported'])})" if a["supported"] else ""
    return (
        f"**Against the paper: {len(a['agree'])} of the {len(a['paper_effect'])} rows whose paper "
        f"dev-{by.label} difference to {an.reference} is at least {by.negligible}{n_meas} agree with it in "
        "sign; "
        f"{len(a['supported'])} of those with both the seed-level t interval and the bootstrap interval "
        f"excluding zero{supported}.** Disagreeing: {', '.join(a['disagree']) or 'none'}."
    )


def direction_summary(an: Analysis) -> list[str]:
    out = []
    for m, name in ((m.name, m.label) for m in an.stats_order):
        cs = [(rr.row, rr.cmp[m]) for rr in an.rows if rr.row != an.reference and rr.cmp.get(m)]
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


def _scale_line(an: Analysis) -> str:
    coll = an.coll
    s = coll.scale_cfg or {}
    name = coll.scale or "paper"
    eff = coll.base_effective
    dims = ""
    if eff:
        dims = f"; effective {an.reference}: " + ", ".join(
            f"{k}={eff[k]}" for k in ("n_layers", "d_model", "d_ff", "n_heads", "d_k", "d_v") if k in eff
        )
    if all(float(s.get(k, 1.0)) == 1.0 for k in ("width", "depth", "steps")):
        size = "the paper's" if name == "paper" else "the recipe's own"
        return f"Scale: {size} (preset '{name}'){dims}."
    return (
        f"**Scaled-down records**: preset '{name}' (width x{s.get('width', '?')}, "
        f"depth x{s.get('depth', '?')}, "
        f"steps x{s.get('steps', '?')}){dims}. The model columns give the paper-scale row settings; "
        f"the measured {_and(m.label for m in an.metrics)} come from the scaled models and are not the "
        "paper's scale."
    )


def _and(labels) -> str:
    """'PPL and BLEU', 'PPL, CER and WER': the metrics a table shows, as a sentence names them."""
    labels = list(labels)
    return labels[0] if len(labels) == 1 else f"{', '.join(labels[:-1])} and {labels[-1]}"


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


def table_note(an: Analysis) -> str:
    ref = an.reference
    return (
        f"{_and(m.label for m in an.metrics)}: mean ± sd over finished seeds. Blank model cells equal "
        f"{ref}, as in the paper. Δ {ref} = this row's mean minus our {ref}'s mean over the same seeds (all "
        f"of {ref}'s seeds when the row has seeds {ref} lacks); paper Δ = the paper's row minus the paper's "
        f"{ref} (PPL is per wordpiece under each run's own vocabulary, so only directions compare across "
        f"vocabularies). A value is bold when the planner decides it better than {ref} (the Decisions "
        "below: family-wise error 0.05 over the table). "
        "† = stale record (see below)."
    )


def test_note(an: Analysis) -> str:
    line = (
        f"{an.headline.label} test: the test set the records name, decoded from each run's final "
        f"checkpoint(s) and scored as dev is; mean ± sd, Δ {an.reference} as above, without intervals."
    )
    evaluated = {}
    for rr in an.rows:
        for s, e in rr.test_from.items():
            evaluated.setdefault(e.protocol.describe(), []).append(f"{rr.row} s{s}")
    for what, runs in evaluated.items():
        line += (
            f" {', '.join(runs)}: no test figure of the run's own; that of its newest `python -m "
            f"ablate.evaluate --split test` ({what})."
        )
    return line


def _head(an: Analysis) -> list[str]:
    """Title, what was read, the scale, the agreement line and the BLEU signatures."""
    coll = an.coll
    n_rec = sum(len(by) for by in coll.runs.values())
    seeds = ", ".join(map(str, coll.seeds())) or "none"
    lines = [f"# {report_title(an)}", ""]
    lines.append(f"Records: {n_rec} run(s) read from `{shown_path(coll.results_dir)}`; seeds seen: {seeds}.")
    if coll.common:
        lines.append(f"Every run was given {', '.join(f'`{k}`' for k in coll.common)} beyond its row.")
    lines += [line for line in (_scale_line(an), _reference_line(an), agreement_line(an)) if line]
    if coll.average is not None:
        lines.append(_protocol_line(coll.average))
    return lines + [f"BLEU: sacreBLEU `{s}`." for s in _signatures(coll)] + [""]


def _reference_line(an: Analysis) -> str:
    """Which row every Δ is against, and why: the study's, or --reference; none where it is the paper's
    base by default (the paper's own table reads so)."""
    if not an.reference_runs():
        return an.no_reference()
    if an.reference == DEFAULT_REFERENCE:
        return ""
    return f"Reference row: {an.reference} (every Δ, interval, bold figure and plot is against it)."


def shown_path(path: Path) -> str:
    """A folder as a report names it: relative to the current folder where it lies under it, else its last
    two parts (a report carries no machine's absolute path)."""
    path = Path(path)
    if not path.is_absolute():
        return path.as_posix()
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix() or "."
    except ValueError:
        return "…/" + "/".join(path.parts[-2:])


def _protocol_line(average: int) -> str:
    return (
        f"**Dev figures: the newest evaluation of each run that averaged its last {average} checkpoints** "
        f"(`python -m ablate.evaluate RUN --split dev --average {average}`), not the run's own; a run "
        "without one shows none. Perplexity and the sentence bootstrap exist for a run's own decode only."
    )


def _statistics(an: Analysis) -> list[str]:
    ref = an.reference
    lines = [
        "## Statistics",
        "",
        "Seed-level tests use each run's dev metric: paired t over the seeds both rows share (when every "
        f"seed of the row also exists for {ref}), otherwise Welch t. The bootstrap resamples seeds and then "
        f"dev sentences ({an.n_boot} replicates; the same sentence indices for {ref} and row), recomputing "
        "each metric from the summed per-sentence statistics of the drawn sentences, as its figure is made ("
        + "; ".join(f"{m.label}: {m.accumulates}" for m in an.stats_order)
        + "); it is the interval used for bold cells and the flags. p Holm = Holm-Bonferroni over the rows "
        f"compared with {ref}, per metric and test.",
        "",
    ]
    for m in an.stats_order:
        t = stats_table(an, m)
        lines.append(_md(t) if t.rows else f"### {t.title}\n\nNo row has finished runs beside {ref}.\n")
    return lines


def _reading(an: Analysis) -> list[str]:
    """The reproduction gap: directions, flags, the curves' evidence per disagreement, fit and cost."""
    lines = ["## Reproduction gap", ""] + direction_summary(an) + [""]
    names = [m.name for m in an.metrics]
    flagged = [(rr.row, m, f) for rr in an.rows for m in names if rr.cmp.get(m) for f in rr.cmp[m].flags]
    lines += [f"- {row} {m.upper()}: {f}" for row, m, f in flagged] + ([""] if flagged else [])
    if evidence := disagreement_evidence(an):
        lines += ["### Rows against the paper: what their curves say", ""] + evidence + [""]
    return lines + [_md(t) for t in (fit_table(an), cost_table(an)) if t.rows]


def _problems(an: Analysis) -> list[str]:
    coll = an.coll
    out = [f"- stale (†): {rr.row} seed {s}: {'; '.join(why)}" for rr in an.rows for s, why in rr.stale]
    out += [f"- excluded: {e}" for e in coll.left_out()] + [f"- warning: {w}" for w in coll.warnings]
    out += [f"- unread: {line}" for line in an.unread()]
    out = [_relative(line, coll.results_dir) for line in out]
    return ["## Stale, excluded and unreadable records", ""] + out + [""] if out else []


def _relative(line: str, results: Path) -> str:
    """A line naming files under the results folder or the current folder, as the report names that
    folder (shown_path): no machine's absolute path."""
    for folder in dict.fromkeys([Path(results), Path(results).resolve()]):
        if folder.is_absolute():
            line = line.replace(f"{folder.as_posix()}/", f"{shown_path(folder)}/")
    here = Path.cwd().resolve().as_posix()
    return line.replace(f"{here}/", "")


def table3_markdown(
    an: Analysis,
    plots: dict[str, Path] | None = None,
    out_dir: Path | None = None,
    decisions: list[str] | None = None,
) -> str:
    lines = _head(an)
    lines += ["## Summary", "", summary_note(an), "", _md(summary_table(an))]
    lines += ["## Table", "", table_note(an), ""] + ([test_note(an), ""] if _has_test(an) else [])
    lines += [_md(main_table(an))] + claims_markdown(an) + _decisions(decisions, an.reference)
    lines += _statistics(an) + _reading(an) + _problems(an)
    if plots:
        links = [f"![{title}]({_rel(p, out_dir) if out_dir else p.as_posix()})" for title, p in plots.items()]
        lines += ["## Plots", ""] + links + [""]
    return "\n".join(lines).rstrip("\n") + "\n"


def _decisions(lines: list[str] | None, reference: str) -> list[str]:
    if not lines:
        return []
    head = [
        "## Decisions",
        "",
        f"Each row against {reference}, per metric (docs/planner.md): the Δ of the means with its 95% "
        "interval, "
        "both intervals by the t on the seed variance pooled over the rows (its degrees of freedom given); "
        "the decision at its look's alpha, the family-wise error held at 0.05 over every comparison of the "
        "table by Holm's procedure over group-sequential tests (Maurer & Bretz 2013: each comparison's "
        "share of alpha spent over its looks of looks.jsonl by the Lan-DeMets O'Brien-Fleming function; "
        "negligible = TOST within the metric's delta); an undecided row gives the smallest Δ this look "
        "could decide and the seeds a side that would decide it, for power 0.8. "
        "`python -m ablate.report --decide-command` prints the runs that train them.",
        "",
    ]
    return head + [f"- {line}" for line in lines] + [""]


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
        for m in (metric.name for metric in an.metrics):
            mean, sd, n = rr.summary(m)
            d[m] = {
                "mean": mean,
                "sd": sd,
                "n": n,
                "per_seed": {str(k): v for k, v in rr.values[m].items()},
                "paper": rr.paper.get(m) if rr.paper else None,
            }
            c = rr.cmp.get(m)
            if c is not None:
                d[m]["vs_reference"] = {
                    "diff": c.diff,
                    "paper_diff": c.paper_diff,
                    "direction": c.direction(),
                    "flags": c.flags,
                    "ttest": asdict(c.ttest) if c.ttest else None,
                    "p_t_holm": c.p_t_holm,
                    "bootstrap": asdict(c.boot) if c.boot else None,
                    "p_boot_holm": c.p_boot_holm,
                }
        mean, sd, n = rr.summary(an.test_key)
        d[an.test_key] = {
            "mean": mean,
            "sd": sd,
            "n": n,
            "per_seed": {str(k): v for k, v in rr.values[an.test_key].items()},
        }
        d["cost"] = {k: rr.mean_of(k) for k in ("wall_time_s", "flops_estimate")}
        d["cost"].update(
            train_time_s=rr.mean_over_runs(Run.train_seconds),
            tokens_per_s=rr.mean_over_runs(Run.tokens_per_s),
        )
        rows.append(d)
    coll = an.coll
    return clean_nan(
        {
            "reference": an.reference,
            "scale": coll.scale,
            "scale_config": coll.scale_cfg,
            "base_effective": coll.base_effective,
            "rows": rows,
            "summary": direction_summary(an),
            "agreement": agreement(an),
            "disagreement_evidence": disagreement_evidence(an),
            "claims": claims_data(an),
            "warnings": coll.warnings,
            "excluded": coll.left_out(),
            "unread": an.unread(),
        }
    )
