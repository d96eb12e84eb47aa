"""python -m ablate.report [table3|table2|table4|params|dashboard|levelled] [options]

table3 (default)  the Table 3 variations table from result records, with statistics, plots, gap and cost
table2            test BLEU (sacreBLEU and tokenized) beside the paper's Table 2
table4            parsing F1 beside the paper's Table 4
params            every row's parameter count at the paper's scale beside the paper's column
dashboard         a W&B Report for a sweep: saved online; offline, its spec and the commands that publish it
                  (options: python -m ablate.report dashboard --help)
levelled          the step at which a run's dev PPL has levelled off, by a Table 3 protocol's step rule
                  (options: python -m ablate.report levelled --help)
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from ablate.report.render import FORMATS, Table, render, to_json, to_markdown

COMMANDS = ("table3", "table2", "table4", "params")
EXT = {"md": "md", "csv": "csv", "json": "json", "latex": "tex"}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
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
    p.add_argument("--conf", default=None, help="folder of row YAMLs (default: the project's conf/model)")
    p.add_argument(
        "--preset",
        "--scale",
        dest="preset",
        default=None,
        help="use records of this preset: 'recipe+scale', or one name where both agree (default: the base's)",
    )
    p.add_argument("--sweep", default=None, help="use only records of this sweep")
    p.add_argument("--rows", default=None, help="comma-separated rows (default: all paper rows + extras)")
    p.add_argument(
        "--seeds", default=None, help="comma-separated seeds for --missing-command (default: seen)"
    )
    p.add_argument(
        "--seeds-min", type=int, default=1, help="compare a row with base only with this many seeds"
    )
    p.add_argument("--n-boot", type=int, default=1000, help="bootstrap replicates")
    p.add_argument("--boot-seed", type=int, default=0)
    p.add_argument(
        "--missing-command",
        action="store_true",
        help="print the ablate.run command for the missing, failed or stale cells, and exit",
    )
    p.add_argument("--vocab", type=int, default=37_000, help="params: shared vocabulary size")
    p.add_argument("--closed-form", action="store_true", help="params: use the formula, not the meta model")
    p.add_argument(
        "--wandb", action="store_true", help="log the table and plots to W&B (offline without a key)"
    )
    p.add_argument("--wandb-project", default="ablate")
    p.add_argument("--wandb-entity", default=None)
    p.add_argument("--wandb-group", default=None)
    p.add_argument("--quiet", action="store_true", help="do not print the table")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "dashboard":  # its own options: W&B entity and project, the spec's path
        from ablate.report.dashboard import main as dashboard

        return dashboard(argv[1:])
    if argv and argv[0] == "levelled":  # one run's curve, its own options
        from ablate.report.levelling import main as levelled

        return levelled(argv[1:])
    cmd = argv.pop(0) if argv and argv[0] in COMMANDS else "table3"
    args = _parser().parse_args(argv)
    if cmd == "params":
        return _params(args)
    try:
        results = _results_dir(args)
    except NotImplementedError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.results is not None and not results.is_dir():  # nothing is written over an existing report
        print(f"error: --results {args.results}: no such folder", file=sys.stderr)
        return 2
    from ablate.report.collect import collect

    task = "parsing" if cmd == "table4" else "translation"
    coll = collect(results, args.conf, task=task, preset=args.preset, sweep=args.sweep)
    if args.results is None and args.source == "files":
        coll.results_dir = Path("results")
    for w in coll.warnings:
        print(f"warning: {w}", file=sys.stderr)
    if cmd in ("table2", "table4"):
        from ablate.report.table2 import table2
        from ablate.report.table4 import table4

        table, notes = (table2 if cmd == "table2" else table4)(coll)
        table.notes = notes
        text = render(table, args.format) if args.format != "md" else to_markdown(table)
        _emit(text, _out_path(args, cmd), args.quiet)
        return 0
    return _table3(args, coll)


def _results_dir(args) -> Path:
    if args.source == "files":
        return Path(args.results or "results")
    if args.results or not os.environ.get("WANDB_API_KEY"):
        folder = Path(args.results or "wandb")  # offline runs: wandb/offline-run-*/files/record.json
        return folder
    return _download_wandb(args)


def _download_wandb(args) -> Path:
    """Online W&B: fetch record.json (and the files it names) of every run in the project/group into a
    temporary folder. Needs WANDB_API_KEY and network; not covered by the tests."""
    import wandb

    api = wandb.Api()
    path = f"{args.wandb_entity}/{args.wandb_project}" if args.wandb_entity else args.wandb_project
    filters = {"group": args.wandb_group} if args.wandb_group else None
    root = Path(tempfile.mkdtemp(prefix="ablate-wandb-"))
    wanted = {"record.json", "curves.jsonl", "dev_sentences.npz", "dev.hyp.txt"}
    for run in api.runs(path, filters=filters):
        for f in run.files():
            if Path(f.name).name in wanted:
                f.download(root=str(root / run.id), replace=True)
    return root


def _out_path(args, cmd: str) -> Path | None:
    if args.out == "-":
        return None
    return Path(args.out or f"reports/{cmd}.{EXT[args.format]}")


def _emit(text: str, out: Path | None, quiet: bool) -> None:
    if out is not None:
        from ablate.results import atomic_write_text

        atomic_write_text(out, text)
    if not quiet or out is None:
        sys.stdout.write(text)


def _table3(args, coll) -> int:
    from ablate.report import table3 as t3
    from ablate.report.analysis import analyse
    from ablate.report.missing import missing_commands

    rows = args.rows.split(",") if args.rows else None
    an = analyse(
        coll,
        rows=None if args.missing_command else rows,
        n_boot=args.n_boot,
        boot_seed=args.boot_seed,
        seeds_min=args.seeds_min,
    )
    if args.missing_command:
        seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else None
        cmds = missing_commands(an, rows, seeds, results_dir=args.results)
        if not cmds:
            # stdout stays empty, so that `$(python -m ablate.report --missing-command)` runs nothing
            print(
                "nothing to run: every requested cell has a current finished or running record",
                file=sys.stderr,
            )
        for c in cmds:
            print(c)
        return 0
    out = _out_path(args, "table3")
    plots = {}
    if args.format == "md" and not args.no_plots:
        plot_dir = Path(args.plots) if args.plots else (out.parent if out else Path("reports")) / "plots"
        from ablate.report.plots import make_plots

        plots = make_plots(an, plot_dir)
    elif args.plots:
        from ablate.report.plots import make_plots

        plots = make_plots(an, Path(args.plots))
    if args.format == "md":
        text = t3.table3_markdown(an, plots, out.parent if out else Path("."))
    elif args.format == "json":
        text = to_json(t3.table3_json(an))
    else:
        text = render(t3.main_table(an), args.format)
    _emit(text, out, args.quiet)
    if args.wandb:
        log_wandb(t3.main_table(an), plots, args.wandb_project, args.wandb_entity, args.wandb_group)
    return 0


def _params(args) -> int:
    from ablate.report.collect import row_configs
    from ablate.report.params import params_rows, params_table

    rc = row_configs(args.conf)
    for e in rc.errors:
        print(f"warning: {e}", file=sys.stderr)
    models = rc.models
    if args.rows:
        models = {r: models[r] for r in args.rows.split(",") if r in models}
    rows = params_rows(models, rc.source, args.vocab, exact=not args.closed_form)
    if args.format == "json":
        text = to_json({"vocab": args.vocab, "rows": rows})
    else:
        table, notes = params_table(rows, args.vocab)
        table.notes = notes
        text = render(table, args.format)
    if args.out and args.out != "-":
        from ablate.results import atomic_write_text

        atomic_write_text(args.out, text)
    sys.stdout.write(text)
    return 0


def log_wandb(
    table: Table,
    plots: dict,
    project: str,
    entity: str | None,
    group: str | None,
    directory: str | None = None,
) -> None:
    """Log the table (wandb.Table) and plots; offline unless WANDB_API_KEY is set; never prompts."""
    os.environ["WANDB_SILENT"] = "true"
    if os.environ.get("WANDB_MODE") not in ("disabled", "offline"):
        os.environ["WANDB_MODE"] = "online" if os.environ.get("WANDB_API_KEY") else "offline"
    import wandb

    run = wandb.init(
        project=project,
        entity=entity,
        group=group,
        job_type="report",
        name="table3-report",
        dir=directory,
        reinit=True,
    )
    data = {"table3": wandb.Table(columns=table.columns, data=table.cells())}
    data.update({title: wandb.Image(str(p), caption=title) for title, p in plots.items()})
    run.log(data)
    run.finish()


if __name__ == "__main__":
    raise SystemExit(main())
