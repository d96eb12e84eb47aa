"""The W&B Report of a sweep (ablate.report.dashboard): one panel grid per Table 3 group, filters that name
the sweep's W&B group and the Table 3 group, metric keys and tables the runs really log, a spec that
round-trips through the library's own model, and save() sending that spec; no network anywhere."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import wandb_workspaces.reports.v2 as wr
from wandb_offline import summary

from ablate.records.store import find_records
from ablate.report import dashboard as db
from ablate.report.__main__ import main as report_main

ROOT = Path(__file__).resolve().parents[1]


def _record(row, group, seed=1, sweep="sw1", logger_group=None, path="", **extra):
    logger = {"project": "ablate", "entity": None, "group": logger_group}
    return {
        "run_id": f"{row}-s{seed}-{sweep}",
        "row": row,
        "group": group,
        "seed": seed,
        "sweep": sweep,
        "task": "translation",
        "status": "finished",
        "started": "2026-01-01T00:00:00",
        "config": {"logger": logger},
        "metrics": {"dev_ppl": 5.0, "dev_bleu": 25.0},
        "_path": path,
        **extra,
    }


def _filters(runset: dict) -> dict:
    return {
        (f["key"]["section"], f["key"]["name"]): tuple(v) if isinstance(v := f["value"], list) else v
        for f in runset["filters"]["filters"]
    }


def _grids(spec: dict) -> list[dict]:
    return [b for b in spec["spec"]["blocks"] if b["type"] == "panel-grid"]


def _group_grids(spec: dict) -> dict[str, dict]:
    """{Table 3 group: its grid's run set filters}, in report order; a group named twice fails. Each grid
    holds its group and base."""
    out: dict[str, dict] = {}
    for grid in _grids(spec):
        for rs in grid["metadata"]["runSets"]:
            f = _filters(rs)
            if ("config", "table3_group") in f:
                group = f["config", "table3_group"][0]
                assert group not in out and f["config", "table3_group"] in ((group, "base"), ("base",))
                out[group] = f
    return out


def _used(spec: dict) -> dict[str, set]:
    """The history, summary and config keys, tables and media the panels read ("ran.params" for the config
    key the library writes as config:ran.value.params)."""
    used: dict[str, set] = {k: set() for k in ("history", "summary", "config", "tables", "media")}

    def accessor(a: str) -> None:
        section, _, name = a.partition(":")
        if section == "config":
            used["config"].add(name.replace(".value", ""))
        else:
            used[section].add(name)

    for grid in _grids(spec):
        for p in grid["metadata"]["panelBankSectionConfig"]["panels"]:
            c = p["config"]
            if p["viewType"] == "Weave":
                used["tables"].add(c["panel2Config"]["exp"]["fromOp"]["inputs"]["key"]["val"])
                continue
            used["media"].update(c.get("mediaKeys", []))
            if p["viewType"] == "Bar Chart":  # a bar is a run's summary value
                used["summary"].update(c.get("metrics", []))
            else:
                used["history"].update(c.get("metrics", []))
            if c.get("xAxis") and ":" not in c["xAxis"]:
                used["history"].add(c["xAxis"])
            for a in [c.get("xAxis"), c.get("yAxis"), *(col["accessor"] for col in c.get("columns", []))]:
                if a and ":" in a:
                    accessor(a)
            if c.get("groupBy"):
                used["config"].add(c["groupBy"].removesuffix(".value"))
        for rs in grid["metadata"]["runSets"]:
            used["config"].update(name for (section, name) in _filters(rs) if section == "config")
    return used


def _check_structure(spec: dict, wandb_group: str, groups: list[str]) -> None:
    assert list(_group_grids(spec)) == groups
    for g, f in _group_grids(spec).items():
        assert f == {
            ("run", "group"): wandb_group,
            ("run", "jobType"): "train",
            ("config", "table3_group"): (g, "base") if g != "base" else ("base",),  # base in every group
        }
    others = [_filters(rs) for grid in _grids(spec) for rs in grid["metadata"]["runSets"]]
    assert {("run", "group"): wandb_group, ("run", "jobType"): "train"} in others  # the bar chart's
    assert {("run", "group"): wandb_group, ("run", "jobType"): "report"} in others  # the table's
    used = _used(spec)
    assert used["history"] == {"dev/ppl", "trainer/global_step"}  # BLEU has no curve: it is decoded once
    assert used["summary"] == {"final/dev_ppl", "paper/dev_ppl", "final/dev_bleu"}
    assert {"ran.params", "ran.N", "ran.d_model", "ran.h", "ran.P_drop", "ran.eps_ls"} <= used["config"]
    assert used["tables"] == {"table3"}
    assert "PPL difference to base per row" in used["media"]
    types = [b["type"] for b in spec["spec"]["blocks"]]
    assert "table-of-contents" in types[:3]  # the library pads the report with empty paragraphs
    panels = {p["viewType"] for g in _grids(spec) for p in g["metadata"]["panelBankSectionConfig"]["panels"]}
    assert {"Scatter Plot", "Parallel Coordinates Plot", "Run Comparer", "Media Browser"} <= panels


def test_synthetic_sweep_structure_and_round_trip():
    records = [
        _record("A1", "A", logger_group="grp"),
        _record("base", "base", seed=1, logger_group="grp"),
        _record("base", "base", seed=2, logger_group="grp"),
        _record("my_row", "F", logger_group="grp"),
        _record("C1", "C", logger_group="grp"),
        _record("A2", "A", logger_group="grp", status="failed", metrics={}),  # rejected: no W&B run
        _record("B1", "B", sweep="other"),
    ]
    report = db.build_report(records, "ent", "ablate", "sw1", "| row | paper | ours |\n|---|---|---|\n")
    spec = db.report_spec(report)
    _check_structure(spec, "grp", ["base", "A", "C", "F"])  # paper groups in order, then others
    assert _used(spec)["config"] - {
        f"ran.{k}" for k in ("params", "N", "d_model", "d_ff", "h", "d_k", "P_drop", "eps_ls")
    } == {
        "table3_group",
        "table3_row",
    }
    assert all(
        rs["project"] == {"entityName": "ent", "name": "ablate"}
        for grid in _grids(spec)
        for rs in grid["metadata"]["runSets"]
    )
    assert spec["project"] == {"entityName": "ent", "name": "ablate"}
    texts = [b.get("content") for b in spec["spec"]["blocks"] if b["type"] == "markdown-block"]
    assert "| row | paper | ours |\n|---|---|---|\n" in texts
    # Report -> model -> JSON -> model -> Report gives the same spec
    again = db.report_spec(db.report_from_spec(json.loads(json.dumps(spec))))
    assert again == spec


def test_dev_bleu_is_a_curve_only_where_a_run_decoded_it_during_training():
    records = [_record("base", "base"), _record("A1", "A")]
    spec = db.report_spec(db.build_report(records, "ent", "ablate", "sw1", ""))
    assert _used(spec)["history"] == {"dev/ppl", "trainer/global_step"}
    records[1]["config"]["train"] = {"decode_every": 4}  # A1 decoded the dev set at every 4th evaluation
    spec = db.report_spec(db.build_report(records, "ent", "ablate", "sw1", ""))
    assert _used(spec)["history"] == {"dev/ppl", "dev/bleu", "trainer/global_step"}
    grids = [
        g
        for g in _grids(spec)
        if any(("config", "table3_group") in _filters(r) for r in g["metadata"]["runSets"])
    ]
    for grid in grids:  # each group's curves side by side, its run comparer below them
        at = [
            (p["layout"]["x"], p["layout"]["y"]) for p in grid["metadata"]["panelBankSectionConfig"]["panels"]
        ]
        assert at == [(0, 0), (12, 0), (0, 8)]


def test_sweep_choice_and_group():
    records = [
        _record("base", "base", sweep="old"),
        _record("base", "base", sweep="new", started="2026-02-01"),
    ]
    assert db.newest_sweep(records) == "new"
    assert db.wandb_group(records, "new") == "new"  # the sweep name unless logger.group is set
    copy = _record("base", "base", sweep="new", path="r/base/x/wandb/offline-run-1/files/record.json")
    top = _record("base", "base", sweep="new", path="r/base/x/record.json")
    assert db.sweep_records([copy, top], "new") == [top]  # the W&B files copy of a record is not a run


def test_save_sends_the_spec_it_built(monkeypatch):
    def no_network(*args, **kwargs):
        raise AssertionError("network reached")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    sent: list[tuple[str, dict]] = []

    class Service:  # what wandb.Api() hands the library for GraphQL
        app_url = "https://wandb.test/"

        def execute_graphql(self, query, variables=None):
            sent.append((query, variables))
            if "ProjectInternalId" in query:
                return {"project": {"id": "p", "internalId": "UHJvamVjdDox"}}
            if "upsertView" in query:
                project = {"id": "p", "name": variables["projectName"], "entityName": variables["entityName"]}
                view = {**variables, "id": "VmlldzoxMjM=", "project": project}
                return {"upsertView": {"view": view, "inserted": True}}
            raise AssertionError(f"unexpected query: {query[:80]}")

    class Api:
        default_entity = "someone-else"

        def __init__(self):
            self._service_api = Service()
            self.created = []

        def projects(self, entity):
            return []

        def create_project(self, project, entity):
            self.created.append((entity, project))

    api = Api()
    monkeypatch.setattr(wr.interface, "_get_api", lambda: api)
    report = db.build_report([_record("base", "base"), _record("A1", "A")], "ent", "ablate", "sw1", "table")
    built = db.report_spec(report)
    url = db.publish(report)

    upserts = [v for q, v in sent if "upsertView" in q]
    assert len(upserts) == 1 and upserts[0]["entityName"] == "ent" and upserts[0]["projectName"] == "ablate"
    assert upserts[0]["displayName"] == built["displayName"]
    for grid in _grids(built):  # the server's project id is the only thing save() adds
        for rs in grid["metadata"]["runSets"]:
            rs["project"]["id"] = "UHJvamVjdDox"
    assert json.loads(upserts[0]["spec"]) == built["spec"]
    assert api.created == [("ent", "ablate")]
    assert url.startswith("https://wandb.test/ent/ablate/reports/") and url.endswith("--VmlldzoxMjM=")


def test_cli_errors_are_one_line(tmp_path, capsys):
    assert report_main(["dashboard", "--results", str(tmp_path / "none")]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    rec = tmp_path / "r" / "base" / "x" / "record.json"
    rec.parent.mkdir(parents=True)
    rec.write_text(json.dumps(_record("base", "base")))
    assert report_main(["dashboard", "--results", str(tmp_path / "r"), "--sweep", "nope"]) == 2
    err = capsys.readouterr().err
    assert err == f"error: no records of sweep 'nope' under {tmp_path / 'r'} (sweeps: sw1)\n"


def test_a_sweep_whose_runs_never_started_w_and_b_is_said_as_such(tmp_path, capsys):
    """Runs that failed before training (W&B forced online without a server) started no W&B run: the
    message says what the records are, not that the sweep it lists has no runs."""
    reason = "W&B: WANDB_MODE=online, but api.wandb.ai not reachable within 5s; set WANDB_MODE=offline"
    for row in ("base", "A1"):
        rec = tmp_path / row / "x" / "record.json"
        rec.parent.mkdir(parents=True)
        rec.write_text(json.dumps(_record(row, row, status="failed", reason=reason, metrics={})))
    assert report_main(["dashboard", "--results", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        f"error: sweep 'sw1' under {tmp_path}: 2 record(s) (2 failed), none with a W&B run: a run that "
        f"failed before training started none (first reason: {reason})\n"
    )


def _run(cmd: list[str], cwd: Path, env: dict) -> subprocess.CompletedProcess:
    p = subprocess.run(
        [sys.executable, "-m", *cmd],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    return p


@pytest.mark.slow
def test_report_of_a_real_offline_sweep(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env["HOME"] = str(tmp_path)  # no credentials anywhere
    results = tmp_path / "results"
    sweep_args = ["scale=tiny", "recipe=tiny", "logger=wandb", "trainer.threads=1"]
    for rows in ("model=base,A1", "model=base,A1,A2"):  # the same sweep again, with one more row
        _run(
            [
                "ablate.run",
                "-m",
                rows,
                *sweep_args,
                f"results_dir={results}",
                f"data.cache_dir={tmp_path}/cache",
            ],
            ROOT,
            env,
        )
    records, _ = find_records(results)
    sweep = db.newest_sweep(records)
    md = tmp_path / "reports" / "table3.md"
    # the report run, offline in ./wandb, in the sweep's W&B group
    report_args = ["--sweep", sweep, "--wandb", "--wandb-group", sweep, "--out", str(md), "--quiet"]
    _run(["ablate.report", "--results", str(results), *report_args], tmp_path, env)
    out = tmp_path / "reports" / "table3_dashboard.json"
    p = _run(["ablate.report", "dashboard", "--results", str(results), "--out", str(out)], tmp_path, env)

    runs = [summary(f) for f in tmp_path.rglob("offline-run-*/*.wandb")]
    train = [s for s in runs if s["run"]["job_type"] == "train"]
    tables = {
        k.removesuffix("/_type")
        for s in runs
        if s["run"]["job_type"] == "report"
        for k, v in s["summary"].items()
        if k.endswith("/_type") and v == "table-file"
    }
    assert len(train) == 3 and {s["run"]["group"] for s in runs} == {sweep}  # one group, all three rows
    logged = {k for s in train for h in s["history"] for k in h}
    summaries = {k for s in train for k in s["summary"]}
    config = {
        f"{k}.{sub}" if isinstance(v, dict) else k
        for s in train
        for k, v in s["config"].items()
        for sub in (v if isinstance(v, dict) else [None])
    }
    media = {k.removesuffix("/_type") for s in runs for k, v in s["summary"].items() if v == "image-file"}

    report = db.build_report(records, "", "ablate", sweep, md.read_text())
    for spec in (db.report_spec(report), json.loads(out.read_text())):  # built here, and by the command
        _check_structure(spec, sweep, ["base", "A"])
        used = _used(spec)
        assert used["history"] <= logged, used["history"] - logged
        assert used["summary"] <= summaries, used["summary"] - summaries
        assert used["config"] <= config, used["config"] - config
        assert used["tables"] <= tables and used["media"] <= media, used["media"] - media
    assert {s["config"]["table3_group"] for s in train} == {"base", "A"}
    # the publish commands name every offline run: the two training runs and the report run
    sync = next(line for line in p.stdout.splitlines() if line.strip().startswith("wandb sync"))
    assert len(sync.split()) == 2 + len(runs) == 6
    assert "python -m ablate.report dashboard" in p.stdout and f"--sweep={sweep}" in p.stdout


def test_publishing_waits_for_the_synced_runs(monkeypatch, capsys):
    """The order is: sync the runs, then save the report (the library creates no project): online, a
    project that cannot be read or holds no runs of the group stops in one line with the sync command."""
    import wandb

    from ablate.report import dashboard

    class Api:
        default_entity = "me"

        def __init__(self, runs):
            self._runs = runs

        def runs(self, path, filters=None):
            if self._runs is None:
                raise ValueError(f"Could not find project {path}")
            assert filters == {"group": "tiny"}
            return self._runs

    recs = [{"run_id": "base-x-s1", "sweep": "tiny", "config": {"logger": {}}}]
    for runs, says in ((None, "cannot be read (Could not find project me/ablate)"), ([], "holds no runs")):
        monkeypatch.setattr(wandb, "Api", lambda r=runs: Api(r))
        assert dashboard._online(recs, "", "ablate", "tiny", "# t", "/nonexistent/spec.json") == 1
        err = capsys.readouterr().err
        assert says in err and "sync the runs first" in err and "wandb sync" in err
