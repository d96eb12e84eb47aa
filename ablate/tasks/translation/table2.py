"""Table 2 (test BLEU and training cost): the paper's rows, then every (row, language pair, averaging) of
ours that has a test BLEU."""

from __future__ import annotations

from typing import Any

from ablate import paper
from ablate.config.rows import row_order
from ablate.report import stats
from ablate.report.collect import Collection, Run
from ablate.report.render import Table, fnum, fsi


def _pair(run: Run) -> str:
    d = run.cfg("data") or {}
    return f"{d.get('src_lang', 'en')}-{d.get('tgt_lang', 'de')}".upper()


def table2(coll: Collection) -> tuple[Table, list[str]]:
    """The paper's Table 2 rows, then ours: every (row, language pair, checkpoints averaged) with a test
    evaluation (`ablate.evaluate`, or a run's own under train.average_last). One piece:
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
    groups = _groups(coll)
    paper_rows = {r["ours_row"]: r for r in paper.table2() if r["ours_row"]}
    for (row, pair, avg), evals in sorted(
        groups.items(),
        key=lambda kv: (row_order(kv[0][0]), kv[0][1], kv[0][2]),
    ):
        runs = [r for r, _ in evals]
        mean, sd, n = stats.mean_sd([m["test_bleu"] for _, m in evals])
        tok = [m["test_bleu_tok"] for _, m in evals if m.get("test_bleu_tok") is not None]
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
            f"checkpoint average {avg}" if avg > 1 else "last checkpoint" if avg else "last.ckpt",
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
        notes.append(
            "No finished run has a test evaluation yet: `python -m ablate.evaluate RUN --average N`, or "
            "train.average_last=N in training."
        )
    return Table(cols, body, align="lrrrrrrl", title="Table 2: test BLEU and training cost"), notes


def _groups(coll: Collection) -> dict[tuple[str, str, int], list[tuple[Run, dict[str, Any]]]]:
    """Finished runs' test figures by (row, language pair, checkpoints averaged): each protocol its own
    line, never mixed in one mean. A figure is a test evaluation's (the newest of a run under each
    protocol; curve points, --until-step, are not Table 2's) or, in a record that holds its test figures
    itself, the record's, averaged as its train.average_last says. With --average, that protocol's only."""
    groups: dict[tuple[str, str, int], list[tuple[Run, dict[str, Any]]]] = {}
    for row, by in coll.runs.items():
        for r in (r for r in by.values() if r.status == "finished"):
            own = r.rec.get("metrics") or {}
            figures = [(int((r.cfg("train") or {}).get("average_last", 0) or 0), own)]
            figures += [(p.average, e.metrics) for p, e in r.evaluated_on("test").items()]
            for avg, m in figures:
                if m.get("test_bleu") is not None and coll.average in (None, avg):
                    groups.setdefault((row, _pair(r), avg), []).append((r, m))
    return groups
