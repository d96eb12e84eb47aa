"""The report's command line: every argument that names nothing (a sweep, a preset, a row, a folder) or
holds a bad value stops in one line with exit status 2 and leaves the last report as it was; without
--preset the report reads the newest sweep's preset, says on the terminal what it read and what it left
out, and refuses a choice it would have to guess."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_report_table3 import ARGS, TODAY, _write_run, make_fixture

from ablate.records import staleness
from ablate.report.__main__ import main

OLD_REPORT = "the report of yesterday\n"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def fixture_dir(tmp_path, monkeypatch):
    make_fixture(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(staleness, "code_hash", lambda task: TODAY)
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "table3.md").write_text(OLD_REPORT)
    return tmp_path


BAD = {
    "--sweep": (["--sweep", "nosuch"], "--sweep nosuch: no translation records of this sweep (sweeps: gold"),
    "--rows": (["--rows", "base,Z9"], "--rows base,Z9: no row 'Z9' (rows: base, A1"),
    "--preset": (["--preset", "big_gpu"], "--preset big_gpu: no translation records of this preset (pres"),
    "--results a file": (["--results", "conf/model/base.yaml"], "--results conf/model/base.yaml: a file, no"),
    "--conf": (["--conf", "nowhere"], "--conf nowhere: no such folder of row files"),
    "--reference": (["--reference", "Z9"], "--reference Z9: no row 'Z9' (rows: base, A1"),
    "--seeds": (["--seeds", "1,x", "--missing-command"], "argument --seeds: '1,x' is not a comma-separated"),
    "--n-boot": (["--n-boot", "0"], "argument --n-boot: 0 is not at least 1"),
    "--seeds-min": (["--seeds-min", "-1"], "argument --seeds-min: -1 is not at least 1"),
    "--format": (["--format", "docx"], "argument --format: invalid choice: 'docx'"),
    "unknown option": (["--colour", "red"], "unrecognized arguments: --colour red"),
}  # fmt: skip


@pytest.fixture(autouse=True)
def _a_users_shell(monkeypatch):
    """These tests read and name results/ in their own folder, as a user's shell without ABLATE_RESULTS
    does (tests/conftest.py sets it for every command the other tests run)."""
    monkeypatch.delenv("ABLATE_RESULTS", raising=False)


def _status(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as e:  # argparse's usage errors
        return int(e.code)


@pytest.mark.parametrize("name", sorted(BAD))
def test_an_argument_that_names_nothing_stops_in_one_line_and_writes_nothing(name, fixture_dir, capsys):
    extra, phrase = BAD[name]
    assert _status(["table3", *ARGS, "--no-plots", *extra]) == 2
    out = capsys.readouterr()
    lines = out.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and phrase in lines[0], out.err
    assert out.out == ""
    assert (fixture_dir / "reports" / "table3.md").read_text() == OLD_REPORT


def test_params_refuses_a_row_it_does_not_know(fixture_dir, capsys):
    assert _status(["params", "--conf", "conf/model", "--rows", "A1,Q7", "--out", "p.md"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--rows A1,Q7: no row 'Q7'" in err[0]
    assert not (fixture_dir / "p.md").exists()


def _restamp(results: Path, row: str, sweep: str, started: str) -> None:
    for path in (results / row).glob("*/record.json"):
        rec = json.loads(path.read_text())
        rec.update(sweep=sweep, started=started)
        path.write_text(json.dumps(rec))


def test_without_preset_the_report_reads_the_newest_sweep_and_says_so(fixture_dir, capsys):
    """An older sweep of the tiny preset (base, 3 seeds) and a newer one of the paper preset (one base run,
    B2 at two seeds): the report is the newer sweep's preset, although most base runs are tiny."""
    res = fixture_dir / "results"
    _write_run(res, "B2", 1, scale="paper")
    _write_run(res, "B2", 2, scale="paper")
    for path in res.rglob("record.json"):
        rec = json.loads(path.read_text() or "{}") if path.read_text().startswith("{\n") else None
        if rec is None:
            continue
        paper = rec["config"]["scale"]["name"] == "paper"
        rec.update(
            sweep="sweep-new" if paper else "sweep-old", started=f"2025-02-0{2 if paper else 1}T00:00:00"
        )
        path.write_text(json.dumps(rec))
    assert main(["table3", *ARGS, "--no-plots"]) == 0
    err = capsys.readouterr().err
    line = next(ln for ln in err.splitlines() if ln.startswith("[report] "))
    assert "3 cell(s) of preset paper (the newest sweep, sweep-new: 3 record(s))" in line, line
    assert "left out: 18 record(s) of preset 'tiny' (use --preset tiny to see them)" in line, line
    text = (fixture_dir / "reports" / "table3.md").read_text()
    summary = text.split("## Summary\n")[1].split("## Table\n")[0]
    cells = {ln.split("|")[1].strip(): ln for ln in summary.splitlines() if ln.startswith("| ")}
    assert cells["base"].endswith("| 1 seed |") and cells["B2"].endswith("| 2 seeds |"), summary
    assert cells["A1"].endswith("| not run |"), cells["A1"]  # A1 has tiny runs only


def test_a_sweep_with_as_many_base_runs_of_two_presets_is_refused(fixture_dir, capsys):
    res = fixture_dir / "results"
    _write_run(res, "base", 2, scale="paper")
    _write_run(res, "base", 3, scale="paper")  # with the fixture's paper s1: 3 base runs of each preset
    assert main(["table3", *ARGS, "--no-plots"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: which preset? the newest sweep, golden"), err
    assert "as many base runs of paper as of tiny: choose one with --preset" in err[0]
    assert (fixture_dir / "reports" / "table3.md").read_text() == OLD_REPORT
    assert main(["table3", *ARGS, "--no-plots", "--preset", "paper"]) == 0


def test_what_the_report_writes_by_default_is_ignored_by_git():
    """`python -m ablate.report` in a checkout leaves `git status` clean: every default output (each table,
    each format, the plots) is ignored, and no committed report is."""
    import subprocess

    from ablate.report.__main__ import COMMANDS, EXT, _out_path, _parser
    from ablate.tasks import BUILTIN, task_of

    paths = []
    for cmd in [*COMMANDS, *(t for name in BUILTIN for t in task_of(name).tables)]:
        for fmt in EXT:
            paths.append(str(_out_path(_parser().parse_args(["--format", fmt]), cmd)))
    paths.append("reports/plots/forest_ppl.png")
    assert "reports/table3.md" in paths and "reports/params.tex" in paths
    p = subprocess.run(["git", "check-ignore", *paths], cwd=ROOT, capture_output=True, text=True)
    assert sorted(p.stdout.split()) == sorted(paths)
    tracked = subprocess.run(
        ["git", "ls-files", "-ci", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True
    )
    assert tracked.stdout == ""  # no committed file falls under the new patterns


def _full_disk(*_args, **_kwargs):
    raise OSError(28, "No space left on device")


@pytest.mark.parametrize("where", ["plots", "table"])
def test_a_full_disk_is_one_line_and_leaves_no_folder_behind(where, fixture_dir, capsys, monkeypatch):
    """The disk fills while the plots or the table are written: one line naming the file, exit status 1,
    the last report as it was, and no plots folder (empty or half full) that this report made."""
    import matplotlib.figure

    from ablate.records import folder

    if where == "plots":
        monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda self, path, **kw: _full_disk(path))
    else:
        real = folder.atomic_write_text

        def write(path, text):
            if str(path).endswith(".md"):  # as atomic_write_text fails: on its temporary file
                raise OSError(28, "No space left on device", str(Path(path).parent / ".table3.md.x1y2.tmp"))
            real(path, text)

        monkeypatch.setattr(folder, "atomic_write_text", write)
    assert main(["table3", *ARGS, "--plots", "reports/plots"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and err[-1].endswith(
        "could not write the report (No space left on device)"
    )
    target = "reports/table3.md" if where == "table" else "reports/plots"
    assert err[-1] == f"error: {target}: could not write the report (No space left on device)"
    assert not (fixture_dir / "reports" / "plots").exists()
    assert (fixture_dir / "reports" / "table3.md").read_text() == OLD_REPORT


def test_the_missing_command_leaves_out_refused_rows_and_the_recipe_s_own_values(
    tmp_path, monkeypatch, capsys
):
    """Finished base and A1 runs of recipe=tiny scale=tiny, as training composes them: the command for the
    rest names the preset and nothing it sets, and leaves out C1..C3, whose depth the tiny preset rounds to
    base's (a run of them stops at once), saying why."""
    from dataclasses import asdict

    from hydra import compose, initialize_config_dir

    from ablate.config import register_configs, to_dataclass

    register_configs()
    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        composed = {
            row: asdict(
                to_dataclass(compose("config", overrides=[f"model={row}", "recipe=tiny", "scale=tiny"]))
            )
            for row in ("base", "A1")
        }
    for row, config in composed.items():
        folder = tmp_path / "results" / row / f"{row}-0123456789ab-s1"
        folder.mkdir(parents=True)
        rec = {"run_id": folder.name, "row": row, "seed": 1, "status": "finished", "config": config,
               "metrics": {"dev_ppl": 5.0}, "code_hash": TODAY, "started": "2026-01-01T00:00:00"}  # fmt: skip
        (folder / "record.json").write_text(json.dumps(rec))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(staleness, "code_hash", lambda task: TODAY)
    rows = "base,A1,A2,C1,C2,C3,C4,D1"
    assert main(["table3", "--results", "results", "--missing-command", "--rows", rows, "--seeds", "1"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == ["python -m ablate.run -m model=A2,C4,D1 seed=1 recipe=tiny scale=tiny"]
    skipped = [ln for ln in err.splitlines() if ln.startswith("skipped C")]
    assert [ln.split(":")[0] for ln in skipped] == ["skipped C1", "skipped C2", "skipped C3"]
    assert skipped[0] == (
        "skipped C1: row C1 under recipe=tiny scale=tiny: model.n_layers=2 gives 1, the same as base's, so "
        "the row would not differ from base in n_layers (choose another recipe or scale, or set the key on "
        "the command line)"
    )
