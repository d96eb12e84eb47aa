"""A W&B Report for one experiment (its W&B group), built with W&B's own reports API
(wandb_workspaces.reports.v2): a table of contents; the Markdown Table 3 (paper beside ours, the paper's
claims checked); final dev PPL per row beside the paper's, and the report run's table with the Δ to the
reference row (the study's; the paper's base by default); parameters against dev PPL; parallel
coordinates from the settings that trained to dev PPL; final dev BLEU; the report's plots; and one panel
grid per Table 3 group holding the reference's group too, with its dev PPL curves and a run comparer
against the reference. BLEU is plotted where it exists: once per run, at the end of training.

Online it is saved to W&B; offline its spec (the library's own model, as JSON) is written to a file, with the
commands that publish it once the offline runs are synced.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shlex
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import wandb_workspaces.reports.v2 as wr
from wandb_workspaces import expr
from wandb_workspaces.reports.v2 import internal

from ablate.config import DEFAULT_TASK, default_results
from ablate.config.rows import group_order
from ablate.config.study import DEFAULT_REFERENCE
from ablate.jobs.command import printed_command
from ablate.report.plots import plot_titles

STEP = "trainer/global_step"
CURVES = (("dev/ppl", "dev PPL"),)
# dev BLEU is a curve only where a run decodes the dev set during training (train.decode_every > 0: each point
# costs one dev decode); otherwise it is decoded once, at the end, and shown as FINAL_BLEU's bars
BLEU_CURVE = ("dev/bleu", "dev BLEU")
FINAL_BLEU = "final/dev_bleu"  # logged once per run when training ends (worker._log_final)
FINAL_PPL = "final/dev_ppl"
PAPER_PPL = "paper/dev_ppl"  # the row's dev PPL in the paper, in each run's summary (tracking.finish)
PARAMS = "ran.params"  # the model that trained (tracking.what_ran)
SETTINGS = ("ran.N", "ran.d_model", "ran.d_ff", "ran.h", "ran.d_k", "ran.P_drop", "ran.eps_ls")
TABLE = (
    "table3"  # the key `python -m ablate.report --wandb` logs the table under (report.wandb_io.log_report)
)
ROW_KEY = "table3_row"  # flat config keys every training run carries (worker._logger)
GROUP_KEY = "table3_group"
DEFAULT_OUT = "reports/table3_dashboard.json"


def wandb_group(records: list[dict], sweep: str) -> str:
    """The W&B group of the sweep's runs: logger.group when set, else the sweep name (as make_logger does)."""
    for rec in records:
        group = ((rec.get("config") or {}).get("logger") or {}).get("group")
        if rec.get("sweep") == sweep and group:
            return group
    return sweep


def sweep_records(records: list[dict], sweep: str, task: str = DEFAULT_TASK) -> list[dict]:
    """The sweep's runs of `task` that have a W&B run, one record per run. A run's record also sits in its
    W&B files folder (tracking.finish copies it), so the shallowest copy stands for the run; a run rejected
    before training (failed, no metrics) never started a W&B run."""
    by_id: dict[str, dict] = {}
    for rec in sorted(records, key=lambda r: len(Path(r.get("_path", "")).parts)):
        if rec.get("sweep") != sweep or rec.get("task", DEFAULT_TASK) != task:
            continue
        if rec.get("status") == "failed" and not rec.get("metrics"):
            continue
        by_id.setdefault(rec.get("run_id") or str(id(rec)), rec)
    return list(by_id.values())


def _none_chosen(records: list[dict], sweep: str | None, results: str, task: str) -> str:
    """Why a sweep has no run to show, from what its records say: no such sweep, or records none of which
    started a W&B run (rejected or failed before training), with their statuses and the first reason."""
    known = sorted({r["sweep"] for r in records if r.get("sweep")})
    members = [r for r in records if r.get("sweep") == sweep and sweep is not None]
    if not members:
        return f"no records of sweep {sweep!r} under {results} (sweeps: {', '.join(known) or 'none'})"
    tasks = sorted({str(r.get("task", DEFAULT_TASK)) for r in members})
    if task not in tasks:
        what = f"{len(members)} record(s) of task {', '.join(tasks)}"
        return f"sweep {sweep!r} under {results}: {what}, none of task {task} (--task)"
    statuses = Counter(str(r.get("status")) for r in members)
    reason = next((r["reason"] for r in members if r.get("reason")), None)
    return (
        f"sweep {sweep!r} under {results}: {len(members)} record(s) "
        f"({', '.join(f'{n} {s}' for s, n in sorted(statuses.items()))}), none with a W&B run: "
        "a run that failed before training started none" + (f" (first reason: {reason})" if reason else "")
    )


def newest_sweep(records: list[dict]) -> str | None:
    started: dict[str, str] = {}
    for rec in records:
        if rec.get("sweep"):
            started[rec["sweep"]] = max(started.get(rec["sweep"], ""), str(rec.get("started") or ""))
    return max(started, key=lambda s: (started[s], s)) if started else None


def table3_groups(records: list[dict]) -> list[str]:
    return sorted({r["group"] for r in records if r.get("group")}, key=group_order)


def reference_group(records: list[dict], reference: str) -> str:
    """The group of the reference row's runs (the row's own name where none ran)."""
    return next((str(r["group"]) for r in records if r.get("row") == reference and r.get("group")), reference)


def _runset(entity: str, project: str, name: str, *filters) -> wr.Runset:
    return wr.Runset(entity=entity, project=project, name=name, filters=expr.And(*filters))


def _train_filters(group: str, table3_groups: list[str] | None = None) -> list:
    filters = [expr.Metric("Group") == group, expr.Metric("JobType") == "train"]
    if table3_groups is not None:
        filters.append(expr.Config(GROUP_KEY).isin(table3_groups))
    return filters


def _bars(title: str, metrics: list[str], layout: wr.Layout) -> wr.BarPlot:
    # Seeds of one row become one bar (their mean, with the min-max range).
    return wr.BarPlot(
        title=title,
        metrics=metrics,
        groupby=wr.Config(ROW_KEY),
        groupby_aggfunc="mean",
        groupby_rangefunc="minmax",
        layout=layout,
    )


def _curve(key: str, title: str, x: int) -> wr.LinePlot:
    return wr.LinePlot(
        title=f"{title} vs step",
        x=STEP,
        y=[key],
        groupby=wr.Config(ROW_KEY),
        groupby_aggfunc="mean",
        groupby_rangefunc="minmax",
        layout=wr.Layout(x=x, y=0, w=12, h=8),
    )


def curves(records: list[dict]) -> tuple[tuple[str, str], ...]:
    """The curves a group's runs have: dev PPL, and dev BLEU where a run decoded it during training."""
    bleu = any(((r.get("config") or {}).get("train") or {}).get("decode_every", 0) > 0 for r in records)
    return CURVES + ((BLEU_CURVE,) if bleu else ())


def _group_grid(
    entity: str,
    project: str,
    group: str,
    table3_group: str,
    keys: tuple[tuple[str, str], ...],
    reference: tuple[str, str] = (DEFAULT_REFERENCE, DEFAULT_REFERENCE),
) -> wr.PanelGrid:
    """A Table 3 group's rows with the reference row (`reference`: its row and its group), which their
    differences are read against: their curves, then a run comparer."""
    row, ref_group = reference
    rows = [table3_group] if table3_group == ref_group else [table3_group, ref_group]
    runset = _runset(entity, project, f"group {table3_group} and {row}", *_train_filters(group, rows))
    panels = [_curve(key, title, 12 * i) for i, (key, title) in enumerate(keys)]
    at = wr.Layout(x=12 * len(keys) % 24, y=8 * (len(keys) // 2), w=12, h=8)
    panels.append(wr.RunComparer(diff_only=True, layout=at))
    return wr.PanelGrid(runsets=[runset], panels=panels)


def _ablation_grid(entity: str, project: str, group: str) -> wr.PanelGrid:
    """Every training run of the experiment: dev PPL per row beside the paper's, parameters against dev
    PPL (Table 3's parameter column), the settings that trained against dev PPL, final dev BLEU."""
    columns = [wr.ParallelCoordinatesPlotColumn(metric=wr.Config(k), display_name=k[4:]) for k in SETTINGS]
    columns.append(
        wr.ParallelCoordinatesPlotColumn(metric=wr.SummaryMetric(FINAL_PPL), display_name="dev PPL")
    )
    return wr.PanelGrid(
        runsets=[_runset(entity, project, "training runs", *_train_filters(group))],
        panels=[
            _bars(
                "final dev PPL per row, the paper's beside it", [FINAL_PPL, PAPER_PPL], wr.Layout(0, 0, 12, 8)
            ),
            wr.ScatterPlot(
                title="parameters vs final dev PPL",
                x=wr.Config(PARAMS),
                y=wr.SummaryMetric(FINAL_PPL),
                log_x=True,
                layout=wr.Layout(12, 0, 12, 8),
            ),
            wr.ParallelCoordinatesPlot(
                title="what trained -> final dev PPL", columns=columns, layout=wr.Layout(0, 8, 24, 8)
            ),
            _bars("final dev BLEU per row", [FINAL_BLEU], wr.Layout(0, 16, 24, 8)),
        ],
    )


def build_report(
    records: list[dict],
    entity: str,
    project: str,
    sweep: str,
    table_markdown: str,
    reference: str = DEFAULT_REFERENCE,
) -> wr.Report:
    """The sweep's report, its differences against row `reference`. `entity` is passed on as given (""
    when unknown offline): left out, the library would ask the server for the default entity."""
    records = sweep_records(records, sweep)
    group, groups = wandb_group(records, sweep), table3_groups(records)
    ref = (reference, reference_group(records, reference))
    compared = table3_groups([r for r in records if r.get("row") != reference])
    report_run = _runset(
        entity, project, "report run", expr.Metric("Group") == group, expr.Metric("JobType") == "report"
    )
    blocks: list = [
        wr.H1(text=f"Table 3: {sweep}"),
        wr.TableOfContents(),
        wr.MarkdownBlock(
            text=f"Runs of W&B group `{group}` in project `{project}`: Table 3 beside the paper with the "
            f"paper's claims checked, each row's final dev PPL beside the paper's and its Δ to {reference}, "
            f"what trained against dev PPL, the report's plots, and each Table 3 group's curves beside "
            f"{reference}."
        ),
        wr.H2(text="Table 3 and the paper's claims"),
        wr.MarkdownBlock(text=table_markdown),
        wr.H2(text=f"Rows against {reference} and the paper"),
        wr.PanelGrid(
            runsets=[report_run],
            panels=[wr.WeavePanelSummaryTable(table_name=TABLE, layout=wr.Layout(x=0, y=0, w=24, h=12))],
        ),
        _ablation_grid(entity, project, group),
        wr.H2(text="The report's plots"),
        wr.PanelGrid(
            runsets=[report_run],
            panels=[
                wr.MediaBrowser(
                    title="plots",
                    media_keys=plot_titles(compared, reference=reference),
                    layout=wr.Layout(0, 0, 24, 12),
                )
            ],
        ),
    ]
    for g in groups:
        blocks += [wr.H2(text=f"Group {g}"), _group_grid(entity, project, group, g, curves(records), ref)]
    return wr.Report(
        project=project,
        entity=entity,
        title=f"Table 3: {sweep}"[:128],
        description=f"Attention Is All You Need, Table 3 rebuilt: sweep {sweep}",
        blocks=blocks,
        width="fluid",  # Table 3 is wide
    )


def report_model(report: wr.Report) -> internal.ReportViewspec:
    """The library's model of the report, built without a server. A run set that names an entity makes the
    library look up its project's internal id on the server; here the run sets name their project (entity
    and name) without that id, which save() looks up when it publishes."""
    local = copy.deepcopy(report)
    grids = [b for b in local.blocks if isinstance(b, wr.PanelGrid)]
    named = [[(rs.entity, rs.project) for rs in g.runsets] for g in grids]
    for g in grids:
        for rs in g.runsets:
            rs.entity = ""
    model = local._to_model()  # wandb-workspaces has no public spec of a report but save() (a server)
    grid_models = [b for b in model.spec.blocks if isinstance(b, internal.PanelGrid)]
    for g, names in zip(grid_models, named):
        for rs, (entity, project) in zip(g.metadata.run_sets, names):
            if project:
                rs.project = internal.Project(entity_name=entity, name=project)
    return model


def report_spec(report: wr.Report) -> dict[str, Any]:
    return json.loads(report_model(report).model_dump_json(by_alias=True, exclude_none=True))


def report_from_spec(spec: dict[str, Any]) -> wr.Report:
    """The report of a spec. The library's _from_model drops the report's width and the layout of a summary
    table panel; both are put back from the model, so that a spec read back is the spec written."""
    model = internal.ReportViewspec.model_validate(spec)
    report = wr.Report._from_model(model)  # no public way from a spec to a Report object (wandb-workspaces)
    report.width = model.spec.width
    grid_models = [b for b in model.spec.blocks if isinstance(b, internal.PanelGrid)]
    grids = [b for b in report.blocks if isinstance(b, wr.PanelGrid)]
    for grid, grid_model in zip(grids, grid_models):
        for panel, panel_model in zip(grid.panels, grid_model.metadata.panel_bank_section_config.panels):
            panel.layout = wr.Layout._from_model(panel_model.layout)  # likewise for a panel's layout
    return report


def write_spec(report: wr.Report, path: str | Path) -> Path:
    from ablate.records.folder import atomic_write_text

    atomic_write_text(path, json.dumps(report_spec(report), indent=2) + "\n")
    return Path(path)


def publish(report: wr.Report) -> str:
    """Save the report to W&B and return its URL. The project must exist and hold the runs first: the
    library creates no project (`_online` checks it before saving)."""
    report.save()
    return report.url


def _not_synced(api, entity: str, project: str, group: str) -> str | None:
    """Why the report cannot be saved yet (the order: sync the runs, then publish), or None."""
    try:
        n = len(api.runs(f"{entity}/{project}", filters={"group": group}))
    except Exception as e:  # noqa: BLE001 - wandb raises ValueError/CommError for a missing project
        return f"W&B project {entity}/{project} cannot be read ({str(e).strip()[:120] or type(e).__name__})"
    return None if n else f"W&B project {entity}/{project} holds no runs of group {group!r}"


def report_run_folders() -> list[Path]:
    """Offline report runs: `python -m ablate.report --wandb` writes them to ./wandb (or under WANDB_DIR)."""
    root = Path(os.environ.get("WANDB_DIR", ".")) / "wandb"
    return sorted(f for f in root.glob("offline-run-*") if any(f.glob(f"files/media/table/{TABLE}_*")))


def offline_folders(records: list[dict]) -> list[Path]:
    """The offline W&B runs to sync: the training runs' (inside their run folders) and the report runs'."""
    runs = [f for r in records if r.get("_path") for f in Path(r["_path"]).parent.glob("wandb/offline-run-*")]
    return sorted(set(runs)) + report_run_folders()


def _table_markdown(results: Path, sweep: str, task: str, reference: str = DEFAULT_REFERENCE) -> str:
    """The text `python -m ablate.report` writes for the sweep, without the plot images (a W&B Markdown
    block cannot reach local files)."""
    from ablate.report import table3 as t3
    from ablate.report.analysis import analyse
    from ablate.report.collect import collect

    coll = collect(results, None, task=task, sweep=sweep, reference=reference)
    for w in coll.warnings:
        print(f"warning: {w}", file=sys.stderr)
    return t3.table3_markdown(analyse(coll), {}, None)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m ablate.report dashboard",
        description="A W&B Report for a sweep: saved online, or its spec written offline.",
    )
    p.add_argument("--results", default=default_results(), help="folder of run folders with record.json")
    p.add_argument("--sweep", default=None, help="the sweep (default: the newest among the records)")
    p.add_argument("--task", default=DEFAULT_TASK, help="the task whose runs it shows")
    p.add_argument(
        "--reference", default=None, help="the row the others are compared against (default: the study's)"
    )
    p.add_argument("--entity", default=None, help="W&B entity (default: the runs' logger.entity, else yours)")
    p.add_argument("--project", default=None, help="W&B project (default: the runs' logger.project)")
    p.add_argument("--out", default=DEFAULT_OUT, help="the report's spec (JSON)")
    return p


def main(argv: list[str] | None = None) -> int:
    from ablate.records.store import find_records

    args = _parser().parse_args(argv)
    records, _ = find_records(args.results)
    if not records:
        print(f"error: no result records under {args.results}", file=sys.stderr)
        return 2
    sweep = args.sweep or newest_sweep(records)
    chosen = sweep_records(records, sweep, args.task) if sweep else []
    if not chosen:
        print(f"error: {_none_chosen(records, sweep, args.results, args.task)}", file=sys.stderr)
        return 2
    from ablate.config import LoggerConfig
    from ablate.records.tracking import project_of, wandb_mode

    logger = chosen[0].get("config", {}).get("logger", {})
    project = args.project or project_of(logger.get("project") or LoggerConfig().project)
    entity = args.entity or logger.get("entity") or os.environ.get("WANDB_ENTITY") or ""
    from ablate.config import ConfigError
    from ablate.config.study import current_study

    try:
        reference = args.reference or current_study().reference
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    markdown = _table_markdown(Path(args.results), sweep, args.task, reference)

    from ablate.records.tracking import WandbUnreachable

    try:
        mode, why = wandb_mode(LoggerConfig(project=project, entity=entity or None))
    except WandbUnreachable as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if mode == "online":
        return _online(chosen, entity, project, sweep, markdown, args.out, reference)
    report = build_report(chosen, entity, project, sweep, markdown, reference)
    out = write_spec(report, args.out)
    print(f"[ablate] W&B {mode}: {why}. Report spec: {out}")
    if not report_run_folders():  # the table panel reads the sweep's report run
        group = wandb_group(chosen, sweep)  # each value after `=`: never read as an option
        table = [f"--results={args.results}", f"--sweep={sweep}", "--wandb", f"--wandb-group={group}"]
        print("Log the table3 report run first (the table panel shows it):")
        print("  " + printed_command("ablate.report", table))
    print("Publish it with W&B credentials:")
    print("  " + shlex.join(["wandb", "sync", *map(str, offline_folders(chosen))]))
    cmd = ["dashboard", f"--results={args.results}", f"--sweep={sweep}", f"--project={project}"]
    cmd += [f"--entity={entity}"] if entity else []
    print("  " + printed_command("ablate.report", [*cmd, f"--out={args.out}"]))
    return 0


def _online(
    records: list[dict],
    entity: str,
    project: str,
    sweep: str,
    markdown: str,
    out: str,
    reference: str = DEFAULT_REFERENCE,
) -> int:
    import wandb

    api = wandb.Api()
    entity = entity or api.default_entity
    if problem := _not_synced(api, entity, project, wandb_group(records, sweep)):
        print(f"error: {problem}; sync the runs first, then run this again:", file=sys.stderr)
        print("  " + shlex.join(["wandb", "sync", *map(str, offline_folders(records))]), file=sys.stderr)
        return 1
    report = build_report(records, entity, project, sweep, markdown, reference)
    write_spec(report, out)
    try:
        url = publish(report)
    except Exception as e:  # noqa: BLE001 - e.g. the project holds no synced runs yet
        msg = str(e).strip().splitlines()
        print(
            f"error: saving the report failed: {type(e).__name__}: {msg[0] if msg else ''}", file=sys.stderr
        )
        return 1
    print(url)
    return 0
