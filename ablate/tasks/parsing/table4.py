"""Table 4 (English constituency parsing, WSJ section 23 F1): the paper's parsers, then our parsing runs and
the baselines on the same trees (`python -m ablate.baseline`), each F1 with its 95% bootstrap interval over
sentences and beside what says whether it is a parser's: the outputs the reader had to repair, the F1 of
one flat tree per sentence over the same gold trees (the floor), and the time it trained."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ablate import paper
from ablate.records.evaluations import Protocol, newest
from ablate.report import stats
from ablate.report.collect import Collection, Run
from ablate.report.render import Table, fnum


def table4(coll: Collection) -> tuple[Table, list[str]]:
    """Section 23 F1 (test_f1 of `python -m ablate.evaluate RUN --split test`, each protocol its own row)
    beside the paper's Table 4; a run not yet evaluated on 23 shows its dev (22) F1, marked as such."""
    cols = [
        "parser",
        "training",
        "WSJ 23 F1",
        "95% interval",
        "paper Transformer",
        "Δ paper",
        "repaired",
        "flat tree",
        "training time",
        "notes",
    ]
    body: list[list[Any]] = [
        [r["parser"], r["training"], f"{r['f1']:.1f}"] + [""] * 7 for r in paper.table4()
    ]
    paper_tf = {r["training"]: r["f1"] for r in paper.table4() if r["ours"]}
    groups = _groups(coll)
    notes = []
    for (row, data, key, _), figures in sorted(groups.items()):
        body.append(_row(row, data, key, figures, paper_tf))
        notes += [f"ours: {row} ({_split(key, f.protocol)}): {_what_ran(f.run)}" for f in figures]
    for r in sorted(coll.baselines, key=lambda r: -float(r.metrics.get("test_f1") or 0)):
        body.append(_baseline_row(r))
        notes.append(f"baseline: {r.row}: {r.rec['run_id']} (command: {r.rec.get('command', '?')})")
    if not groups and not coll.baselines:
        notes.append("No parsing record (task=parsing) has metrics.f1 yet.")
    elif any(key == "f1" for _, _, key, _ in groups):
        notes.append("Rows marked (dev 22): run `python -m ablate.evaluate RUN --split test` for section 23.")
    notes.append(
        "repaired: outputs the reader had to mend into a tree over the sentence (missing words hung on the "
        "root, brackets closed; none under a well-formed search, decode.well_formed, which writes only such "
        "trees); flat tree: the F1 of (S w1 .. wn) for every sentence of the same split; 95% interval: "
        "the percentile bootstrap over the split's sentences (one run; several seeds show mean ± sd)."
    )
    table = Table(cols, body, align="llrlrrrrrl", title="Table 4: English constituency parsing (WSJ 23 F1)")
    return table, notes


@dataclass(frozen=True)
class Figures:
    """The F1 a row shows of one run: its own figures, or an evaluation's under `protocol`."""

    run: Run
    metrics: dict[str, Any]
    protocol: Protocol | None = None


def _groups(coll: Collection) -> dict[tuple[str, str, str, str], list[Figures]]:
    """Finished parsing runs by (row, data set, the F1 they show, its protocol): each test evaluation
    (`python -m ablate.evaluate RUN --split test`, the newest of each protocol) a group of its own; a run
    with none shows its own dev F1 (under --average N, its dev evaluation of that protocol)."""
    groups: dict[tuple[str, str, str, str], list[Figures]] = {}
    for row, by in coll.runs.items():
        for r in by.values():
            if r.status != "finished":
                continue
            data = str((r.cfg("data") or {}).get("name", "?"))
            for f in _figures(r, coll.average):
                key = "test_f1" if f.metrics.get("test_f1") is not None else "f1"
                tag = f.protocol.tag if f.protocol else ""
                groups.setdefault((row, data, key, tag), []).append(f)
    return groups


def _figures(r: Run, average: int | None) -> list[Figures]:
    tests = [
        Figures(r, e.metrics, p)
        for p, e in newest(r.evaluations).items()
        if p.split == "test" and p.until_step is None and e.metrics.get("test_f1") is not None
        and (average is None or p.average == average)
    ]  # fmt: skip
    if tests or r.metrics.get("test_f1") is not None:
        return tests or [Figures(r, r.metrics)]
    if average is None:
        return [Figures(r, r.metrics)] if r.metrics.get("f1") is not None else []
    dev = r.evaluated(Protocol("dev", average))
    return [Figures(r, _unprefixed(dev.metrics, "dev_"), dev.protocol)] if dev else []


def _unprefixed(metrics: dict[str, Any], prefix: str) -> dict[str, Any]:
    """An evaluation's dev figures under the names a run's own dev figures have (f1, n_repaired, ...)."""
    return {k.removeprefix(prefix): v for k, v in metrics.items() if k.startswith(prefix)}


def _row(row: str, data: str, key: str, figures: list[Figures], paper_tf: dict[str, float]) -> list[Any]:
    runs, ms = [f.run for f in figures], [f.metrics for f in figures]
    mean, sd, n = stats.mean_sd([float(m[key]) for m in ms])
    training = "semi-supervised" if "semi" in data else "WSJ only discriminative"
    pv = paper_tf.get(training) if key == "test_f1" else None
    prefix = key.removesuffix("f1")  # "test_" or ""

    def total(name: str) -> int:
        return sum(int(m.get(prefix + name) or 0) for m in ms)

    flat = [m.get(prefix + "f1_flat") for m in ms]
    return [
        f"ours: {row}",
        f"{training} (data={data})",
        fnum(mean, 2) + (f" ± {fnum(sd, 2)}" if n > 1 else "") + ("" if key == "test_f1" else " (dev 22)"),
        _interval(ms[0], key) if n == 1 else "",
        "" if pv is None else f"{pv:.1f}",
        "" if pv is None else fnum(mean - pv, 2, sign=True),
        f"{total('n_repaired')}/{total('n')}",
        fnum(flat[0], 2) if flat[0] is not None and len(set(flat)) == 1 else "?",
        _minutes([r.rec.get("train_time_s") for r in runs]),
        f"{n} seed{'s' if n > 1 else ''}, preset {runs[0].preset}; EVALB errors {total('n_error')}, "
        f"over 200 brackets {total('n_over_200_brackets')}",
    ]


BASELINES = {
    "pcfg": "treebank PCFG, parent annotation, exact CKY",
    "right_branching": "right-branching trees, gold tags",
    "left_branching": "left-branching trees, gold tags",
}


def _baseline_row(r: Run) -> list[Any]:
    """A baseline's row: its section 23 F1 (its dev F1 where it has none), read as our runs' are."""
    m, cfg = r.metrics, r.cfg("baseline") or {}
    key = "test_f1" if m.get("test_f1") is not None else "f1"
    prefix = key.removesuffix("f1")
    what = BASELINES.get(r.row, r.row)
    if r.row == "pcfg":
        what += f" (vertical {cfg.get('vertical', '?')}, horizontal {cfg.get('horizontal', '?')})"
    fallback = int(m.get(prefix + "n_fallback") or 0)
    return [
        f"baseline: {what}",
        f"the same training trees (data={(r.cfg('data') or {}).get('name', '?')})",
        fnum(m.get(key), 2) + ("" if key == "test_f1" else " (dev 22)"),
        _interval(m, key),
        "",
        "",
        f"{m.get(prefix + 'n_repaired', 0)}/{m.get(prefix + 'n', '?')}",
        fnum(m.get(prefix + "f1_flat"), 2),
        _minutes([r.rec.get("train_time_s")]),
        f"parsed in {fnum(m.get(prefix + 'parse_time_s'), 0)} s, peak memory "
        f"{fnum(r.rec.get('peak_rss_mib'), 0)} MiB; no parse (right-branching instead): {fallback}",
    ]


def _interval(m: dict[str, Any], key: str) -> str:
    lo, hi = m.get(key + "_lo"), m.get(key + "_hi")
    return f"[{lo:.2f}, {hi:.2f}]" if lo is not None and hi is not None else ""


def _minutes(seconds: list[Any]) -> str:
    known = [float(s) for s in seconds if isinstance(s, int | float)]
    if not known:
        return ""
    mean = sum(known) / len(known)
    return f"{mean / 60:.1f} min" if mean >= 60 else f"{mean:.1f} s"


def _split(key: str, protocol: Protocol | None) -> str:
    """Which split the row's F1 is of and, for an evaluation, of which weights."""
    split = "section 23" if key == "test_f1" else "dev 22"
    return split if protocol is None else f"{split}; {protocol.describe().partition(', ')[2]}"


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
