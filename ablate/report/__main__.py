"""python -m ablate.report [table3|metrics|params|dashboard|levelled|<a task's table>] [--task T] [options]

table3 (default)  the Table 3 variations table from result records, with statistics, plots, gap and cost
metrics           any task's variations table: its declared metrics and perplexity against the reference
                  row (--task)
table2, table4    the tables a task declares (translation: test BLEU beside the paper's Table 2; parsing:
                  F1 beside the paper's Table 4); a task outside the package names its own
params            every row's parameter count at the paper's scale beside the paper's column
dashboard         a W&B Report for a sweep: saved online; offline, its spec and the commands that publish it
                  (options: python -m ablate.report dashboard --help)
levelled          the step at which a run's dev PPL has levelled off, by a Table 3 protocol's step rule
                  (options: python -m ablate.report levelled --help)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ablate.config import DEFAULT_TASK
from ablate.config.study import enter
from ablate.report.render import FORMATS, render, to_json, to_markdown

COMMANDS = ("table3", "metrics", "params")  # and the tables tasks declare (ablate.tasks: Task.tables)
EXT = {"md": "md", "csv": "csv", "json": "json", "latex": "tex"}


class _Parser(argparse.ArgumentParser):
    """Usage errors in one line (`error: argument --seeds: ...`) and exit status 2, as every bad input."""

    def error(self, message: str):
        self.exit(2, f"error: {message} (python -m ablate.report --help)\n")


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n} is not at least 1")
    return n


def _count(text: str) -> int:
    """0 or more (--average 0: evaluations of last.ckpt)."""
    return 0 if text.strip() == "0" else _positive(text)


def _seed_list(text: str) -> list[int]:
    try:
        return [int(s) for s in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m ablate.report",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--results",
        default=None,
        help="folder of run folders with record.json (default: results; with --source wandb: wandb)",
    )
    p.add_argument(
        "--source",
        choices=("files", "wandb"),
        default="files",
        help="files: record.json files under --results; wandb: records the runs stored in W&B (a local "
        "wandb/ folder, or online with --wandb-project and WANDB_API_KEY)",
    )
    p.add_argument(
        "--out", default=None, help="output file (default: reports/<table>.<ext>; '-' = stdout only)"
    )
    p.add_argument("--format", choices=FORMATS, default="md")
    p.add_argument(
        "--plots", default=None, help="folder for PNG plots (default: <out folder>/plots, md only)"
    )
    p.add_argument("--no-plots", action="store_true")
    p.add_argument(
        "--conf",
        default=None,
        help="folder of row YAMLs (default: the study's conf/model, then the package's conf/model)",
    )
    p.add_argument(
        "--reference",
        default=None,
        help="the row every other is compared against (default: the study's, study.yaml; else base)",
    )
    p.add_argument(
        "--preset",
        "--scale",
        dest="preset",
        default=None,
        help="use records of this preset: 'recipe+scale', or one name where both agree (default: the "
        "reference row's)",
    )
    p.add_argument("--sweep", default=None, help="use only records of this sweep")
    p.add_argument(
        "--task",
        default=None,
        help="the task whose records a table reads (a built-in name or module:Class; default: the task "
        f"that declares the table, else {DEFAULT_TASK})",
    )
    p.add_argument("--rows", default=None, help="comma-separated rows (default: all paper rows + extras)")
    p.add_argument(
        "--seeds",
        type=_seed_list,
        default=None,
        help="comma-separated seeds for --missing-command (default: seen)",
    )
    p.add_argument(
        "--seeds-min",
        type=_positive,
        default=1,
        help="compare a row with the reference only with this many seeds",
    )
    p.add_argument(
        "--average",
        type=_count,
        default=None,
        help="show the figures of evaluations that averaged the last N checkpoints (`python -m "
        "ablate.evaluate RUN --average N`; 0: of last.ckpt): dev figures in table3, only that "
        "protocol in table2 and table4 (default: each run's own figures, every protocol its own line)",
    )
    p.add_argument("--n-boot", type=_positive, default=1000, help="bootstrap replicates")
    p.add_argument("--boot-seed", type=int, default=0)
    p.add_argument(
        "--missing-command",
        action="store_true",
        help="print the ablate.run command for the missing, failed or stale cells, and exit",
    )
    p.add_argument(
        "--decide-command",
        action="store_true",
        help="print the ablate.run command that trains the seeds the undecided rows need (docs/planner.md), "
        "record this look in <results>/looks.jsonl, and exit",
    )
    p.add_argument("--vocab", type=_positive, default=37_000, help="params: shared vocabulary size")
    p.add_argument("--closed-form", action="store_true", help="params: use the formula, not the meta model")
    p.add_argument(
        "--wandb", action="store_true", help="log the table and plots to W&B (offline without a key)"
    )
    p.add_argument("--wandb-project", default=None, help="default: WANDB_PROJECT, else ablate")
    p.add_argument("--wandb-entity", default=None, help="default: WANDB_ENTITY, else your default entity")
    p.add_argument("--wandb-group", default=None, help="default: the group of the table's runs")
    p.add_argument("--quiet", action="store_true", help="do not print the table")
    return p


def main(argv: list[str] | None = None) -> int:
    enter()  # the study's task imports by name (ablate.config.study)
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "dashboard":  # its own options: W&B entity and project, the spec's path
        from ablate.report.dashboard import main as dashboard

        return dashboard(argv[1:])
    if argv and argv[0] == "levelled":  # one run's curve, its own options
        from ablate.report.levelling import main as levelled

        return levelled(argv[1:])
    cmd = argv.pop(0) if argv and not argv[0].startswith("-") else "table3"
    args = _parser().parse_args(argv)
    if cmd == "params":
        return _params(args)
    try:
        results = _results_dir(args)
    except NotImplementedError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.results is not None and not results.is_dir():  # nothing is written over an existing report
        what = "a file, not a folder" if results.exists() else "no such folder"
        print(f"error: --results {args.results}: {what}", file=sys.stderr)
        return 2
    if args.conf is not None and not Path(args.conf).is_dir():
        print(f"error: --conf {args.conf}: no such folder of row files", file=sys.stderr)
        return 2
    from ablate.config import ConfigError
    from ablate.config.study import current_study
    from ablate.paper import PaperError
    from ablate.report.collect import SelectionError, collect
    from ablate.report.tables import TableError, made

    try:
        study = current_study()
        reference = args.reference or study.reference
        task, table_fn = _table_of(cmd, args.task or study.task)
        coll = collect(
            results,
            _conf_dirs(args.conf, study),
            task=task,
            preset=args.preset,
            sweep=args.sweep,
            average=args.average,
            reference=reference,
        )
        known = set(coll.rows.models) | set(coll.runs) | _paper_rows(task)
        rows = _rows(args.rows, known)
        if args.reference is not None:
            _rows(args.reference, known, "--reference")
        if rows is not None and table_fn is not None and cmd != "metrics":
            raise SelectionError(
                f"--rows: the table {cmd} has no rows to choose (its rows are not rows x seeds)"
            )
    except (SelectionError, ConfigError, TableError, PaperError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.results is None and args.source == "files":
        from ablate.config import default_results

        coll.results_dir = Path(default_results())
    for w in coll.warnings:
        print(f"warning: {w}", file=sys.stderr)
    print(_selection_line(coll, cells=not getattr(table_fn, "reads_every", False)), file=sys.stderr)
    from ablate.jobs.command import CommandError
    from ablate.report.decide import LooksError

    if (table_fn is None or cmd == "metrics") and not coll.finished(reference):
        print(
            f"warning: the reference row {reference} has no finished records: no row is compared",
            file=sys.stderr,
        )
    try:
        if args.missing_command or args.decide_command:
            return _commands(args, coll, rows, task, cmd, table_fn, study)
        if table_fn is None:
            return _table3(args, coll, rows, task)
        table, notes = (
            made(cmd, task, table_fn, coll, rows=rows)
            if cmd == "metrics"
            else made(cmd, task, table_fn, coll)
        )
    except (LooksError, PaperError, TableError, CommandError) as e:  # looks unread: no decision is safe;
        print(f"error: {e}", file=sys.stderr)  # a paper's file unread; a task's table that cannot be made;
        return 2  # a record's override that no printed command can hold as it was given
    table.notes = notes
    text = render(table, args.format) if args.format != "md" else to_markdown(table)
    out = _out_path(args, cmd)
    return _written(lambda: _emit(text, out, args.quiet), [], [out])


def _table_of(cmd: str, task: str | None):
    """(the task whose records a command reads, its table function; None for the variations tables): a
    table the given task declares, else the built-in task that declares `cmd`."""
    from functools import partial

    from ablate.config import ConfigError
    from ablate.report.collect import SelectionError
    from ablate.report.tables import table
    from ablate.tasks import task_of

    try:
        found = table(cmd, task)
    except ConfigError as e:
        raise SelectionError(str(e).replace(f"task={task}", f"--task {task}", 1)) from None
    if found:
        return found
    if cmd == "metrics":
        from ablate.report.metrics import metrics_table

        name = task or DEFAULT_TASK
        return name, partial(metrics_table, task=task_of(name))
    if cmd == "table3":
        return task or DEFAULT_TASK, None
    raise SelectionError(
        f"no table {cmd!r}" + (f" of task {task}" if task else "") + " (commands: table3, metrics, params, "
        "dashboard, levelled, and the tables of a task: python -m ablate.report --help)"
    )


def _rows(text: str | None, known: set[str], flag: str = "--rows") -> list[str] | None:
    """--rows (or --reference) as a list, every name a row file, a paper row or a row of the records."""
    from ablate.report.collect import SelectionError

    if text is None:
        return None
    rows = text.split(",")
    unknown = [r for r in rows if r not in known]
    if unknown:
        raise SelectionError(
            f"{flag} {text}: no row {', '.join(repr(r) for r in unknown)} "
            f"(rows: {', '.join(sorted(known, key=_row_key))})"
        )
    return rows


def _conf_dirs(conf: str | None, study) -> list[Path]:
    """The row folders a report reads: --conf; else the study's conf/model, then the package's, as
    Hydra's search path puts a study's config folder before the package's."""
    from ablate.report.collect import DEFAULT_CONF_MODEL

    if conf is not None:
        return [Path(conf)]
    own = study.conf / "model" if study.conf is not None else None
    return ([own] if own is not None and own.is_dir() else []) + [DEFAULT_CONF_MODEL]


def _paper_rows(task: str) -> set[str]:
    from ablate.report.analysis import paper_of
    from ablate.tasks import task_of

    table = paper_of(task_of(task))
    return set(table.figures) if table else set()


def _row_key(row: str):
    from ablate.config.rows import row_order

    return row_order(row)


def _selection_line(coll, cells: bool = True) -> str:
    """What the report read, on the terminal: the records, the preset and why, what it left out. A
    table whose function says `reads_every` (Table 4: its rows are recipes) reads every record of the preset
    (Collection.every), duplicates of a cell too."""
    n = sum(len(by) for by in coll.runs.values()) if cells else len(coll.every)
    what = "cell(s)" if cells else "record(s)"
    line = f"[report] {coll.read} record(s) under {coll.results_dir}: {n} {what} of preset {coll.scale}"
    line += f" ({coll.chosen_because})" if coll.chosen_because else ""
    if left_out := coll.left_out(cells):
        line += "; left out: " + "; ".join(left_out)
    return line


def _written(write, made: list[Path], target: list) -> int:
    """Run `write`; a write that fails (a full disk, a folder not writable) ends in one line naming the file
    (else `target[0]`, what `write` was writing), exit status 1, and removes the folders in `made` that this
    report created (no empty plots folder)."""
    try:
        write()
    except OSError as e:
        import shutil

        for folder in made:
            shutil.rmtree(folder, ignore_errors=True)
        temporary = e.filename and Path(str(e.filename)).name.endswith(".tmp")  # atomic_write_text's
        where = target[0] if temporary or not e.filename else e.filename
        print(f"error: {where}: could not write the report ({e.strerror or e})", file=sys.stderr)
        return 1
    return 0


def _results_dir(args) -> Path:
    if args.source == "files":
        from ablate.config import default_results

        return Path(args.results or default_results())
    from ablate.records.tracking import has_credentials

    if args.results or not has_credentials():
        folder = Path(args.results or "wandb")  # offline runs: wandb/offline-run-*/files/record.json
        return folder
    from ablate.report.wandb_io import download

    return download(args)


def _out_path(args, cmd: str) -> Path | None:
    if args.out == "-":
        return None
    return Path(args.out or f"reports/{cmd}.{EXT[args.format]}")


def _emit(text: str, out: Path | None, quiet: bool) -> None:
    if out is not None:
        from ablate.records.folder import atomic_write_text

        atomic_write_text(out, text)
    if not quiet or out is None:
        sys.stdout.write(text)


def _commands(args, coll, rows: list[str] | None, task: str, cmd: str, table_fn, study) -> int:
    """--missing-command and --decide-command: the `ablate.run` command for the cells of the task's
    variations table (table3 or metrics: rows x seeds) that are missing, or that decide its undecided
    rows; a task's own table (table2, table4) prints none, in one line."""
    from ablate.report.analysis import analyse
    from ablate.report.decide import decide, read_looks
    from ablate.report.missing import missing_commands
    from ablate.tasks import PPL, task_of

    if table_fn is not None and cmd != "metrics":
        flag = "--missing-command" if args.missing_command else "--decide-command"
        print(
            f"error: {flag}: the table {cmd} prints no command (its rows are not rows x seeds); "
            f"python -m ablate.report metrics --task {task} {flag} does",
            file=sys.stderr,
        )
        return 2
    an = analyse(
        coll,
        rows=None if args.missing_command else rows,
        n_boot=args.n_boot,
        boot_seed=args.boot_seed,
        seeds_min=args.seeds_min,
        task=task_of(task),
    )
    if args.decide_command:
        metrics = [*task_of(task).metrics, PPL]
        decisions = decide(coll, metrics, read_looks(coll.results_dir), reference=coll.reference)
        return _decide_command(an, decisions, args.results, rows)
    cmds = missing_commands(an, rows, args.seeds, results_dir=args.results, task=task, study=study)
    if not cmds:
        # stdout stays empty, so that `$(python -m ablate.report --missing-command)` runs nothing
        print(
            "nothing to run: every requested cell has a current finished or running record", file=sys.stderr
        )
    for c in cmds:
        print(c)
    return 0


def _table3(args, coll, rows: list[str] | None, task: str) -> int:
    from ablate.report import table3 as t3
    from ablate.report.analysis import analyse
    from ablate.report.decide import decide, read_looks
    from ablate.tasks import PPL, task_of

    an = analyse(
        coll,
        rows=rows,
        n_boot=args.n_boot,
        boot_seed=args.boot_seed,
        seeds_min=args.seeds_min,
        task=task_of(task),
    )
    decisions = decide(
        coll, [*task_of(task).metrics, PPL], read_looks(coll.results_dir), reference=coll.reference
    )
    out = _out_path(args, "table3")
    plot_dir = None
    if args.format == "md" and not args.no_plots:
        plot_dir = Path(args.plots) if args.plots else (out.parent if out else Path("reports")) / "plots"
    elif args.plots:
        plot_dir = Path(args.plots)
    made = [f for f in (plot_dir, out.parent if out else None) if f is not None and not f.exists()]
    plots = {}
    target = [plot_dir]

    def write() -> None:
        nonlocal plots
        if plot_dir is not None:
            from ablate.report.plots import make_plots

            plots = make_plots(an, plot_dir)
        target[0] = out
        if args.format == "md":
            lines = [d.text() for d in decisions if d.state != "not compared"]
            text = t3.table3_markdown(an, plots, out.parent if out else Path("."), lines)
        elif args.format == "json":
            text = to_json(t3.table3_json(an))
        else:
            text = render(t3.main_table(an), args.format)
        _emit(text, out, args.quiet)

    if status := _written(write, sorted(made, key=lambda f: len(f.parts), reverse=True), target):
        return status
    if out is not None:
        print(
            f"[report] wrote {out}" + (f" and {len(plots)} plot(s) in {plot_dir}" if plots else ""),
            file=sys.stderr,
        )
    if args.wandb:
        from ablate.report.wandb_io import log_report, one_group

        group = args.wandb_group or one_group(an)
        files = [out] if out is not None else []
        from ablate.records.tracking import WandbUnreachable

        try:
            log_report(t3.main_table(an), plots, args.wandb_project, args.wandb_entity, group, files=files)
        except WandbUnreachable as e:  # the report is written; only its W&B copy is not
            print(f"error: {e}", file=sys.stderr)
            return 2
    return 0


def _unkept(results, n: int) -> None:
    if n:
        print(
            f"note: {results} cannot be written: this look's {n} comparison(s) are not kept in its "
            "looks.jsonl; a copy that can be written keeps them (the alpha later looks spend counts from it)",
            file=sys.stderr,
        )


def _decide_command(an, decisions, results: str | None, rows: list[str] | None) -> int:
    """The run that decides the undecided rows (of --rows, where given), on stdout; the look it makes at
    every row compared, kept in looks.jsonl."""
    from ablate.report.decide import decide_command, looks_made, record_looks
    from ablate.report.missing import command_overrides

    tmpl = an.coll.template()
    over = command_overrides(tmpl, results) if tmpl else []
    found = decide_command(an.coll, decisions, over, rows, reference=an.reference)
    from ablate.report.claims import pair_looks

    if found is None:  # the look is made all the same: its decisions stand as it saw them
        _unkept(
            an.coll.results_dir,
            record_looks(an.coll.results_dir, looks_made(decisions, an.coll.scale or "") + pair_looks(an)),
        )
        print(
            "nothing to decide: every row compared is decided, or past the seeds a decision could take",
            file=sys.stderr,
        )
        return 0
    cmd, looks, why = found
    _unkept(an.coll.results_dir, record_looks(an.coll.results_dir, looks + pair_looks(an)))
    print(why, file=sys.stderr)
    if cmd:  # none where nothing can be trained (a table whose seeds do not vary): stdout stays empty
        print(cmd)
    return 0


def _params(args) -> int:
    from ablate.report.collect import row_configs
    from ablate.report.params import params_rows, params_table

    rc = row_configs(args.conf)
    for e in rc.errors:
        print(f"warning: {e}", file=sys.stderr)
    models = rc.models
    if args.rows:
        from ablate.report.collect import SelectionError

        try:
            models = {r: models[r] for r in _rows(args.rows, set(models))}
        except SelectionError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    rows = params_rows(models, rc.source, args.vocab, exact=not args.closed_form)
    if args.format == "json":
        text = to_json({"vocab": args.vocab, "rows": rows})
    else:
        table, notes = params_table(rows, args.vocab)
        table.notes = notes
        text = render(table, args.format)
    if args.out and args.out != "-":
        from ablate.records.folder import atomic_write_text

        atomic_write_text(args.out, text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
