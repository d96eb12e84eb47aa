"""W&B as the report's source and destination: the records of a project's runs downloaded into a folder
(`download`, online), and a table with its plots and files logged as a report run (`log_report`)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ablate.report.render import Table


def download(args) -> Path:
    """Online W&B: fetch record.json (and the files it names) of every run in the project/group into a
    temporary folder. Needs W&B credentials (WANDB_API_KEY or ~/.netrc) and network; not covered by the
    tests."""
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


def log_report(
    table: Table,
    plots: dict,
    project: str,
    entity: str | None,
    group: str | None,
    directory: str | None = None,
    files: list[Path] = (),
) -> None:
    """Log the table (wandb.Table) and plots, and the report's files (its Markdown, the plots) as an
    artifact of the report run; online only where training would be (tracking.wandb_mode: credentials in
    WANDB_API_KEY or ~/.netrc, and network); never prompts."""
    from ablate.config import LoggerConfig
    from ablate.records.tracking import project_of, wandb_mode

    project = project_of(project or LoggerConfig().project)
    entity = entity or os.environ.get("WANDB_ENTITY") or None
    os.environ["WANDB_SILENT"] = "true"
    os.environ["WANDB_MODE"] = wandb_mode(LoggerConfig(project=project, entity=entity))[0]
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
    artifact = wandb.Artifact(f"table3-report-{_slug(group or project)}", type="report")
    for f in [*files, *plots.values()]:
        if Path(f).is_file():
            artifact.add_file(str(f), name=Path(f).name)
    if artifact.manifest.entries:
        run.log_artifact(artifact)
    run.finish()


def _slug(text: str) -> str:
    """An artifact name: letters, digits, '-', '_' and '.' only."""
    import re

    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")[:100] or "table3"


def one_group(an) -> str | None:
    """The W&B group of the table's runs, where they share one (ablate.jobs.sweep.experiment_group)."""
    groups = {r.rec.get("sweep") for by_seed in an.coll.runs.values() for r in by_seed.values()}
    return groups.pop() if len(groups) == 1 else None
