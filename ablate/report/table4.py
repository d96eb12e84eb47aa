"""Table 4 (English constituency parsing, WSJ section 23 F1): the paper's parsers, then our parsing runs,
each F1 beside what says whether it is a parser's: the outputs the reader had to repair, and the F1 of
one flat tree per sentence over the same gold trees (the floor)."""

from __future__ import annotations

from typing import Any

from ablate import paper
from ablate.report import stats
from ablate.report.collect import Collection, Run
from ablate.report.render import Table, fnum


def table4(coll: Collection) -> tuple[Table, list[str]]:
    """Section 23 F1 (metrics.test_f1, from `python -m ablate.evaluate RUN --split test`) beside the paper's
    Table 4; a run not yet evaluated on 23 shows its dev (22) F1, marked as such."""
    cols = [
        "parser",
        "training",
        "WSJ 23 F1",
        "paper Transformer",
        "Δ paper",
        "repaired",
        "flat tree",
        "notes",
    ]
    body: list[list[Any]] = [
        [r["parser"], r["training"], f"{r['f1']:.1f}", "", "", "", "", ""] for r in paper.table4()
    ]
    paper_tf = {r["training"]: r["f1"] for r in paper.table4() if r["ours"]}
    groups = _groups(coll)
    notes = []
    for (row, data, key), runs in sorted(groups.items()):
        body.append(_row(row, data, key, runs, paper_tf))
        notes += [f"ours: {row} ({_split(key)}): {_what_ran(r)}" for r in runs]
    if not groups:
        notes.append("No parsing record (task=parsing) has metrics.f1 yet.")
    elif any(key == "f1" for _, _, key in groups):
        notes.append("Rows marked (dev 22): run `python -m ablate.evaluate RUN --split test` for section 23.")
    notes.append(
        "repaired: outputs the reader had to mend into a tree over the sentence (missing words hung on the "
        "root, brackets closed; none under a well-formed search, decode.well_formed, which writes only such "
        "trees); flat tree: the F1 of (S w1 .. wn) for every sentence of the same split."
    )
    table = Table(cols, body, align="llrrrrrl", title="Table 4: English constituency parsing (WSJ 23 F1)")
    return table, notes


def _groups(coll: Collection) -> dict[tuple[str, str, str], list[Run]]:
    """Finished parsing runs by (row, data set, the F1 they have: test_f1 where evaluated on 23, else f1)."""
    groups: dict[tuple[str, str, str], list[Run]] = {}
    for row, by in coll.runs.items():
        for r in by.values():
            key = "test_f1" if r.metrics.get("test_f1") is not None else "f1"
            if r.status == "finished" and r.metrics.get(key) is not None:
                data = str((r.cfg("data") or {}).get("name", "?"))
                groups.setdefault((row, data, key), []).append(r)
    return groups


def _row(row: str, data: str, key: str, runs: list[Run], paper_tf: dict[str, float]) -> list[Any]:
    mean, sd, n = stats.mean_sd([float(r.metrics[key]) for r in runs])
    training = "semi-supervised" if "semi" in data else "WSJ only discriminative"
    pv = paper_tf.get(training) if key == "test_f1" else None
    prefix = key.removesuffix("f1")  # "test_" or ""

    def total(name: str) -> int:
        return sum(int(r.metrics.get(prefix + name) or 0) for r in runs)

    flat = [r.metrics.get(prefix + "f1_flat") for r in runs]
    return [
        f"ours: {row}",
        f"{training} (data={data})",
        fnum(mean, 2) + (f" ± {fnum(sd, 2)}" if n > 1 else "") + ("" if key == "test_f1" else " (dev 22)"),
        "" if pv is None else f"{pv:.1f}",
        "" if pv is None else fnum(mean - pv, 2, sign=True),
        f"{total('n_repaired')}/{total('n')}",
        fnum(flat[0], 2) if flat[0] is not None and len(set(flat)) == 1 else "?",
        f"{n} seed{'s' if n > 1 else ''}, preset {runs[0].preset}; EVALB errors {total('n_error')}, "
        f"over 200 brackets {total('n_over_200_brackets')}",
    ]


def _split(key: str) -> str:
    return "section 23" if key == "test_f1" else "dev 22"


def _what_ran(r: Run) -> str:
    """A run's name and what decides its F1 beyond the row: steps, beam, tree language, training trees."""
    data = r.rec.get("data") or {}
    train = ((data.get("splits") or {}).get("train") or {}).get("pairs")
    decode, cfg_data = r.cfg("decode") or {}, r.cfg("data") or {}
    pairs = "training trees"
    if cfg_data.get("constituent_pairs"):
        pairs = "training pairs (trees and their constituents)"
    parts = [
        f"{r.rec.get('steps', '?'):,} steps" if isinstance(r.rec.get("steps"), int) else "steps ?",
        f"beam {decode.get('beam', '?')}" + (", well-formed search" if decode.get("well_formed") else ""),
        f"tgt_lang {cfg_data.get('tgt_lang', '?')}",
        f"{train:,} {pairs}" if isinstance(train, int) else f"{pairs} ?",
    ]
    return f"{r.rec['run_id']} ({', '.join(parts)}; command: {r.rec.get('sweep') or '?'})"
