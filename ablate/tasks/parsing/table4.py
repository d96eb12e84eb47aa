"""Table 4 (English constituency parsing): the paper's parsers with their WSJ section 23 F1, then our
parsing runs and the baselines on the same trees (`python -m ablate.baseline`), each F1 on the test split
of the treebank they read, named by its folder, with its 95% interval (the bootstrap over sentences for
one run, Student's t over the seeds for several), its paired differences to the PCFG, and beside what
says whether it is a parser's: the outputs the reader had to repair, the F1 of one flat tree per sentence
over the same gold trees (the floor), and the time it trained. The paper's test set and ours differ: no
difference between them is computed."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ablate import paper
from ablate.records.evaluations import Protocol
from ablate.report import stats
from ablate.report.collect import Collection, Run
from ablate.report.render import Table, fnum


def table4(coll: Collection) -> tuple[Table, list[str]]:
    """The paper's rows (WSJ section 23 F1), then ours: test-split F1 (test_f1 of `python -m ablate.evaluate
    RUN --split test`, each protocol its own row); a run not yet evaluated on it shows its dev F1, marked."""
    cols = [
        "parser",
        "training",
        "paper: WSJ 23 F1",
        "ours: test split F1",
        "95% interval",
        "Δ PCFG test, paired [95%], p",
        "Δ PCFG dev, paired [95%], p",
        "repaired",
        "flat tree",
        "training time",
        "notes",
    ]
    body: list[list[Any]] = [
        [r["parser"], r["training"], f"{r['f1']:.1f}"] + [""] * 8 for r in paper.table4()
    ]
    groups = _groups(coll)
    notes = _test_sets(coll) + _test_decodes(coll)
    pcfgs = {_treebank(r): r for r in coll.baselines if r.row == "pcfg"}
    for (recipe, data, key, _), figures in sorted(groups.items()):
        name = _name(recipe, groups)
        name += f", an ensemble of {len(_members(figures[0])) + 1}" if _members(figures[0]) else ""
        times = [_train_time(f, coll) for f in figures]
        body.append(_row(name, data, key, figures, _pcfg_counts(pcfgs.get(recipe[2])), times))
        notes += [f"ours: {name} ({_split(key, f.protocol)}): {_what_ran(f.run)}" for f in figures]
    for r in sorted(coll.baselines, key=lambda r: -float(r.metrics.get("test_f1") or 0)):
        body.append(_baseline_row(r, _pcfg_counts(pcfgs.get(_treebank(r)))))
        command = _without_machine_paths(str(r.rec.get("command", "?")), coll.results_dir)
        notes.append(f"baseline: {r.row}: {r.rec['run_id']} (command: {command})")
    if not groups and not coll.baselines:
        notes.append("No parsing record (task=parsing) has metrics.f1 yet.")
    elif any(key == "f1" for _, _, key, _ in groups):
        notes.append(
            "Rows marked (dev): run `python -m ablate.evaluate RUN --split test` for the test split."
        )
    notes.append(
        "repaired: outputs the reader had to mend into a tree over the sentence (missing words hung on the "
        "root, brackets closed; none under a well-formed search, task_cfg.well_formed, which writes only "
        "such trees); flat tree: the F1 of (S w1 .. wn) for every sentence of the same split; 95% interval: "
        "the percentile bootstrap over the split's sentences for one run; for several seeds the F1 is "
        "their mean ± sd and the interval Student's t over the seeds (their spread, the sentences fixed)."
    )
    notes.append(
        "Δ PCFG test / dev: the row's F1 on that split less the treebank PCFG's on the same sentences, the "
        "paired bootstrap over sentences from each one's per-sentence bracket counts (2,000 resamples, seed "
        "0); for several seeds, of their mean F1 with the seeds held fixed (the sentences' spread, not the "
        "seeds'). The dev figure is of the same checkpoints as the test one. Shown where the counts lie "
        "beside the trees (`<split>.evalb.json`, written by ablate.evaluate and ablate.baseline, or for "
        "older trees by `python -m ablate.tasks.parsing.paired --counts`)."
    )
    title = "Table 4: English constituency parsing (the paper's WSJ 23; ours on the test split named below)"
    table = Table(cols, body, align="llrrlllrrrl", title=title)
    return table, notes


table4.reads_every = True  # its rows are recipes, grouped from every record (the report's selection line)


@dataclass(frozen=True)
class Figures:
    """The F1 a row shows of one run: its own figures, or an evaluation's under `protocol`."""

    run: Run
    metrics: dict[str, Any]
    protocol: Protocol | None = None


def _groups(coll: Collection) -> dict[tuple[str, str, str, str], list[Figures]]:
    """Finished parsing runs by (recipe, data set, the F1 they show, its protocol), its seeds together, one
    figure a seed (its newest). A recipe is a model row under one sweep identity (record `sweep`: its
    experiment and the overrides that decide a figure, seed and paths aside) on one treebank. Each test
    evaluation (`python -m ablate.evaluate RUN --split test`, the newest of each protocol) is a group of
    its own; a run with none shows its own dev F1 (under --average N, its dev evaluation of that
    protocol)."""
    groups: dict[tuple[tuple[str, str, str], str, str, str], dict[int, Figures]] = {}
    newest_first = sorted(coll.every, key=lambda r: str(r.rec.get("finished") or ""), reverse=True)
    for r in (r for r in newest_first if r.status == "finished"):
        cfg_data = r.cfg("data") or {}
        data = str(cfg_data.get("name", "?"))
        recipe = (r.row, str(r.rec.get("sweep") or ""), _treebank(r))
        for f in _figures(r, coll.average):
            key = "test_f1" if f.metrics.get("test_f1") is not None else "f1"
            tag = f.protocol.tag if f.protocol else ""
            groups.setdefault((recipe, data, key, tag), {}).setdefault(r.seed, f)  # a seed once: its newest
    return {k: [v[seed] for seed in sorted(v)] for k, v in groups.items()}


def _treebank(r: Run) -> str:
    return str((r.cfg("task_cfg") or {}).get("treebank_dir") or "")


def _name(recipe: tuple[str, str, str], groups: dict) -> str:
    """A recipe's row name: its model row where that row has one recipe here, else its experiment (the
    sweep identity's first word), or the whole sweep identity where two recipes share that too."""
    row, sweep, treebank = recipe
    recipes = {k[0] for k in groups if k[0][0] == row}
    if len(recipes) == 1 or not sweep:
        return row
    experiment = sweep.split()[0]
    if sum(r[1].split()[:1] == [experiment] for r in recipes) == 1:
        return experiment
    return sweep if sum(r[1] == sweep for r in recipes) == 1 else f"{sweep} on {_folder(treebank)}"


def _figures(r: Run, average: int | None) -> list[Figures]:
    """The figures a run shows: its test evaluations (else its own test F1, else its own dev F1), and
    beside them each ensemble it was searched in, a figure of its own (never in place of the run's)."""
    tests = [
        Figures(r, e.metrics, p)
        for p, e in r.evaluated_on("test").items()
        if e.metrics.get("test_f1") is not None and (average is None or p.average == average)
    ]  # fmt: skip
    alone, ensembles = [f for f in tests if not _members(f)], [f for f in tests if _members(f)]
    if alone or r.metrics.get("test_f1") is not None:
        return (alone or [Figures(r, r.metrics)]) + ensembles
    if average is None:
        return ([Figures(r, r.metrics)] if r.metrics.get("f1") is not None else []) + ensembles
    dev = r.evaluated(Protocol("dev", average))
    return ([Figures(r, _unprefixed(dev.metrics, "dev_"), dev.protocol)] if dev else []) + ensembles


def _members(f: Figures) -> tuple[str, ...]:
    return f.protocol.members if f.protocol else ()


def _pcfg_counts(pcfg: Run | None) -> dict[str, dict | None]:
    """The treebank PCFG's per-sentence counts of each split (the PCFG baseline on the row's treebank)."""
    return {split: _counts(pcfg, None, split) for split in ("test", "dev")}


def _unprefixed(metrics: dict[str, Any], prefix: str) -> dict[str, Any]:
    """An evaluation's dev figures under the names a run's own dev figures have (f1, n_repaired, ...)."""
    return {k.removeprefix(prefix): v for k, v in metrics.items() if k.startswith(prefix)}


def _counts(run: Run | None, protocol: Protocol | None, split: str) -> dict | None:
    """The per-sentence bracket counts of a run's split: of its evaluation of that split under `protocol`'s
    weights, else of its own decode; named by the record or evaluation (`<split>_evalb`), else found beside
    the trees or hypotheses it names (`X.evalb.json` of `X.trees.txt`, `X.hyp.txt`). None where none is."""
    import json

    from ablate.tasks.parsing.paired import counts_path

    if run is None:
        return None
    files = run.rec.get("files") or {}  # the run's own decode
    if protocol is not None:
        found = run.evaluated(replace(protocol, split=split))
        if found is not None:  # of the same checkpoints, where both say which
            same = None in (found.protocol.steps, protocol.steps) or found.protocol.steps == protocol.steps
            files = found.files if same else {}
        elif not _last_checkpoint(run, protocol):
            files = {}
    path = files.get(f"{split}_evalb")
    named = files.get(f"{split}_trees") or files.get(f"{split}_hyp")
    if path is None and named:
        path = counts_path(Path(named)).as_posix()
    try:
        return json.loads((run.folder / path).read_text()) if path else None
    except (OSError, ValueError):
        return None


def _last_checkpoint(run: Run, p: Protocol) -> bool:
    """Whether an evaluation under `p` read the finished run's last.ckpt, whose dev split the run itself
    decoded at its last step (its record's dev files)."""
    last = p.average == 0 and p.until_step is None and not p.members
    return last and p.steps in (None, (run.rec.get("steps"),))


def _paired(pcfg: dict | None, figures: list[Figures], split: str, key: str) -> str:
    """The row's F1 on `split` less the PCFG's on the same gold trees, paired (several seeds: their mean).
    A run's own test F1 (no protocol) has no dev decode of its weights: no dev difference."""
    from ablate.tasks.parsing.interval import paired_counts_difference

    if split == "dev" and key == "test_f1" and any(f.protocol is None for f in figures):
        return ""
    mine = [_counts(f.run, f.protocol, split) for f in figures]
    if pcfg is None or None in mine or any(m["gold"] != pcfg["gold"] for m in mine):
        return ""  # a split without counts, or other gold trees than the PCFG's
    diff, lo, hi, p = paired_counts_difference(pcfg, mine)
    return f"{diff:+.2f} [{lo:+.2f}, {hi:+.2f}], p {p:.3f}"


def _seeds(figures: list[Figures]) -> str:
    if members := _members(figures[0]):
        return f"{len(members) + 1} runs searched as one (training time: their sum)"
    return f"{len(figures)} seed{'s' if len(figures) > 1 else ''}"


def _train_time(f: Figures, coll: Collection) -> float | None:
    """The training seconds behind a figure: its run's, and for an ensemble every member's too."""
    members = _members(f)
    by_id = {r.rec.get("run_id"): r for r in coll.every} if members else {}
    runs = [f.run, *(by_id.get(m) for m in members)]
    times = [r.rec.get("train_time_s") if r else None for r in runs]
    return sum(times) if all(isinstance(t, int | float) for t in times) else None


def _row(
    row: str, data: str, key: str, figures: list[Figures], pcfg: dict, times: list[float | None]
) -> list[Any]:
    runs, ms = [f.run for f in figures], [f.metrics for f in figures]
    mean, sd, n = stats.mean_sd([float(m[key]) for m in ms])
    training = "semi-supervised" if "semi" in data else "WSJ only discriminative"
    prefix = key.removesuffix("f1")  # "test_" or ""

    def total(name: str) -> int:
        return sum(int(m.get(prefix + name) or 0) for m in ms)

    flat = [m.get(prefix + "f1_flat") for m in ms]
    return [
        f"ours: {row}",
        f"{training} (data={data})",
        "",
        fnum(mean, 2) + (f" ± {fnum(sd, 2)}" if n > 1 else "") + ("" if key == "test_f1" else " (dev)"),
        _interval(ms[0], key) if n == 1 else _seeds_interval([float(m[key]) for m in ms]),
        _paired(pcfg["test"], figures, "test", key) if key == "test_f1" else "",
        _paired(pcfg["dev"], figures, "dev", key),
        f"{total('n_repaired')}/{total('n')}",
        fnum(flat[0], 2) if flat[0] is not None and len(set(flat)) == 1 else "?",
        _minutes(times),
        f"{_seeds(figures)}, preset {runs[0].preset}; EVALB errors {total('n_error')}, "
        f"over 200 brackets {total('n_over_200_brackets')}",
    ]


BASELINES = {
    "pcfg": "treebank PCFG, parent annotation, exact CKY",
    "right_branching": "right-branching trees, gold tags",
    "left_branching": "left-branching trees, gold tags",
}


def _baseline_row(r: Run, pcfg: dict) -> list[Any]:
    """A baseline's row: its test-split F1 (its dev F1 where it has none), read as our runs' are."""
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
        "",
        fnum(m.get(key), 2) + ("" if key == "test_f1" else " (dev)"),
        _interval(m, key),
        *(
            ["", ""]
            if r.row == "pcfg"
            else [_paired(pcfg[s], [Figures(r, m)], s, "") for s in ("test", "dev")]
        ),
        f"{m.get(prefix + 'n_repaired', 0)}/{m.get(prefix + 'n', '?')}",
        fnum(m.get(prefix + "f1_flat"), 2),
        _minutes([r.rec.get("train_time_s")]),
        f"parsed in {fnum(m.get(prefix + 'parse_time_s'), 0)} s, peak memory "
        f"{fnum(r.rec.get('peak_rss_mib'), 0)} MiB; no parse (right-branching instead): {fallback}",
    ]


def _interval(m: dict[str, Any], key: str) -> str:
    lo, hi = m.get(key + "_lo"), m.get(key + "_hi")
    return f"[{lo:.2f}, {hi:.2f}]" if lo is not None and hi is not None else ""


def _seeds_interval(values: list[float]) -> str:
    lo, hi = stats.t_interval(values)
    return f"[{lo:.2f}, {hi:.2f}] t, {len(values)} seeds"


def _minutes(seconds: list[Any]) -> str:
    known = [float(s) for s in seconds if isinstance(s, int | float)]
    if not known:
        return ""
    mean = sum(known) / len(known)
    return f"{mean / 60:.1f} min" if mean >= 60 else f"{mean:.1f} s"


def _test_sets(coll: Collection) -> list[str]:
    """Each treebank our rows were tested on: its folder (task_cfg.treebank_dir, as `_folder` names it) and
    the sentences of its test split, beside the paper's WSJ section 23 (a record's config as read:
    migrated)."""
    seen: dict[str, set[int]] = {}
    for r in [*coll.every, *coll.baselines]:
        data, task = r.cfg("data") or {}, r.cfg("task_cfg") or {}
        treebank = task.get("treebank_dir")
        where = (
            f"task_cfg.treebank_dir={_folder(str(treebank))}"
            if treebank
            else f"data.name={data.get('name', '?')}"
        )
        n = r.metrics.get("test_n") or next(
            (e.metrics.get("test_n") for e in r.evaluations if e.metrics.get("test_n")), None
        )
        seen.setdefault(where, set()).update([int(n)] if n else [])
    return [
        f"our test split: the test section (23) of the treebank at {where}"
        + (f", {'/'.join(map(str, sorted(ns)))} sentences" if ns else "")
        + f"; the paper's rows are WSJ section 23 ({WSJ_23_SENTENCES:,} sentences): other sentences, so no "
        "difference to the paper is computed"
        for where, ns in sorted(seen.items())
    ]


def _folder(path: str, results: Path | None = None) -> str:
    """A folder as a report names it, never by the absolute path of the machine that made it: inside the
    results folder, from there as the report was given it; elsewhere, its last part (`<...>/ptb_sample`);
    a relative path as given."""
    if not path.startswith("/"):
        return path
    if results is not None and Path(path).is_relative_to(results.absolute()):
        return (results / Path(path).relative_to(results.absolute())).as_posix()
    return f"<...>/{Path(path).name}"


def _without_machine_paths(command: str, results: Path) -> str:
    """A recorded command with each absolute path in it (`--treebank /x/ptb_sample`, `key=/x/y`) named by
    `_folder`."""
    words = [w.partition("=") if "=" in w else ("", "", w) for w in command.split(" ")]
    return " ".join(f"{k}{eq}{_folder(v, results)}" for k, eq, v in words)


def _test_decodes(coll: Collection) -> list[str]:
    """How often the test split was looked at: the test evaluations of the table's runs (a choice is made
    on dev; the test split is decoded once for each recipe reported)."""
    runs = [r for r in coll.every if r.status == "finished"]
    decodes = [(r, e) for r in runs for e in r.evaluations if e.protocol.split == "test"]
    if not decodes:
        return []
    decoded = len({r.rec["run_id"] for r, _ in decodes})
    return [
        f"the test split was decoded {len(decodes)} time(s), for {decoded} of the {len(runs)} run(s) of "
        "this table (each evaluation of a run on it, whatever its protocol)"
    ]


WSJ_23_SENTENCES = 2416  # the Penn Treebank's WSJ section 23, the test set of the paper's Table 4


def _split(key: str, protocol: Protocol | None) -> str:
    """Which split the row's F1 is of and, for an evaluation, of which weights."""
    split = "test split" if key == "test_f1" else "dev split"
    return split if protocol is None else f"{split}; {protocol.describe().partition(', ')[2]}"


def _what_ran(r: Run) -> str:
    """A run's name and what decides its F1 beyond the row: steps, beam, tree language, training trees."""
    data = r.rec.get("data") or {}
    train = ((data.get("splits") or {}).get("train") or {}).get("pairs")
    decode, cfg_data, task = r.cfg("decode") or {}, r.cfg("data") or {}, r.cfg("task_cfg") or {}
    pairs = "training trees"
    if task.get("constituent_pairs"):
        pairs = "training pairs (trees and their constituents)"
    parts = [
        f"{r.rec.get('steps', '?'):,} steps" if isinstance(r.rec.get("steps"), int) else "steps ?",
        f"beam {decode.get('beam', '?')}" + (", well-formed search" if task.get("well_formed") else ""),
        f"tgt_lang {cfg_data.get('tgt_lang', '?')}",
        f"{train:,} {pairs}" if isinstance(train, int) else f"{pairs} ?",
    ]
    return f"{r.rec['run_id']} ({', '.join(parts)}; command: {r.rec.get('sweep') or '?'})"
