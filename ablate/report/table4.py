"""Table 4 (English constituency parsing, WSJ section 23 F1): the paper's parsers, then our parsing runs."""

from __future__ import annotations

from typing import Any

from ablate.report import paper, stats
from ablate.report.collect import Collection, Run
from ablate.report.render import Table, fnum


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
