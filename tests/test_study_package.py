"""ablate as a dependency: the wheel built from this checkout, installed (not editable) into a fresh venv,
runs a study from an empty folder with nothing but PATH and HOME set: `ablate.new`, its reference row and a
row of its own at the tiny preset, the sweep's --plan and the sweep, `ablate.evaluate`, `ablate.report` with
the study's paper beside, and the --missing-command and --decide-command the report prints, each run as
printed in a fresh shell, training exactly the cells it names."""

import itertools
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
TORCH = "torch==2.13.0"  # the CPU build the README installs


@pytest.fixture(scope="session")
def venv(tmp_path_factory) -> Path:
    """A fresh venv with the wheel of this checkout (not editable), made once a test session; where
    $ABLATE_TEST_VENV names a venv that has ablate's dependencies, the wheel is installed into it instead
    (minutes of installing saved on a second try)."""
    root = tmp_path_factory.mktemp("package")
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(root)]
    subprocess.run([*build, str(ROOT)], check=True, capture_output=True, timeout=600)
    (wheel,) = root.glob("ablate-*.whl")
    if given := os.environ.get("ABLATE_TEST_VENV"):
        pip = [str(Path(given) / "bin" / "pip"), "install", "-q", "--no-deps", "--force-reinstall"]
        subprocess.run([*pip, str(wheel)], check=True, capture_output=True, timeout=600)
        return Path(given)
    subprocess.run(["python3", "-m", "venv", str(root / "v")], check=True, timeout=600)
    pip = [str(root / "v" / "bin" / "pip"), "install", "-q", TORCH, str(wheel)]
    subprocess.run(pip, check=True, capture_output=True, timeout=1800)
    return root / "v"


def shell(command: str, cwd: Path, venv: Path, home: Path) -> str:
    """`command` in a fresh shell (env -i: PATH with the venv's bin first, HOME), from `cwd`."""
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(home)}
    p = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, (command, p.stdout[-2000:], p.stderr[-3000:])
    return p.stdout


def cells(results: Path) -> dict[tuple[str, int], str]:
    """(row, seed) -> the run's start, for every record under `results`."""
    out = {}
    for rec in results.rglob("record.json"):
        r = json.loads(rec.read_text())
        out[(r["row"], r["seed"])] = str(r.get("started_at") or r["run_id"])
    return out


def named(command: str) -> set[tuple[str, int]]:
    """The cells a printed `python -m ablate.run -m model=... seed=...` names."""
    args = dict(a.split("=", 1) for a in shlex.split(command) if a.startswith(("model=", "seed=")))
    rows, seeds = args["model"].split(","), [int(s) for s in args["seed"].split(",")]
    return set(itertools.product(rows, seeds))


def test_a_study_runs_from_an_empty_folder_on_the_installed_wheel(venv, tmp_path):
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    out = shell("python -m ablate.new kern", work, venv, home)
    study = work / "kern"
    assert (study / "study.yaml").is_file() and "follow its README.md" in out
    preset = "experiment=kern recipe=tiny scale=tiny logger=none"
    shell(f"python -m ablate.run {preset}", study, venv, home)  # the reference row
    shell(f"python -m ablate.run {preset} model=wide", study, venv, home)  # a row of the study's own
    results = study / "results"
    assert set(cells(results)) == {("base", 1), ("wide", 1)}
    for rec in results.rglob("record.json"):  # both learn: 1 word in 18 is right at its place by chance
        assert json.loads(rec.read_text())["metrics"]["dev_wacc"] > 30, rec

    sweep = f"python -m ablate.run -m {preset} model=base,wide seed=1,2"
    plan = shell(f"{sweep} --plan", study, venv, home)
    assert "plan of 4 runs: 2 finished, 2 to train" in plan, plan
    shell(sweep, study, venv, home)
    assert set(cells(results)) == {(r, s) for r in ("base", "wide") for s in (1, 2)}

    (wide,) = results.glob("wide/wide-*-s1")
    evaluated = shell(f"python -m ablate.evaluate {wide.relative_to(study)} --split test", study, venv, home)
    assert "test_wacc" in evaluated
    shell("python -m ablate.report --task kern_task:CipherTask --out report.md --no-plots", study, venv, home)
    full = (study / "report.md").read_text()  # the study's paper beside: its table's Δ, its claims
    assert "| row | varies | dev word accuracy | Δ base | paper Δ | sign vs paper |" in full
    assert "## The paper's claims" in full and "wider feed-forward layer" in full
    report = "python -m ablate.report metrics --task kern_task:CipherTask --out -"
    table = shell(report, study, venv, home)
    assert re.search(r"\| wide \| 2 \|", table) and "Δ" in table, table

    for flag in ("--missing-command --seeds 1,2,3", "--decide-command"):
        printed = shell(f"{report} {flag}", study, venv, home).strip().splitlines()
        for command in printed:
            assert not any(word in command for word in ("searchpath", "PYTHONPATH", str(tmp_path)))
            before = cells(results)
            shell(command, study, venv, home)  # as printed, in a fresh shell
            trained = {c for c, started in cells(results).items() if before.get(c) != started}
            assert trained == named(command) - set(before), (command, trained)
        if flag.startswith("--missing"):
            assert len(printed) == 1 and named(printed[0]) == {("base", 3), ("wide", 3)}


def test_a_model_study_trains_with_the_default_logger_on_the_installed_wheel(venv, tmp_path):
    """`ablate.new --model` (a study of its own model), its README's first command with nothing added:
    the default logger (W&B, offline without credentials) trains it; the report and the command it prints
    run as printed."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    shell("python -m ablate.new gstudy --model", work, venv, home)
    study = work / "gstudy"
    out = shell("python -m ablate.run experiment=gstudy recipe=tiny scale=tiny", study, venv, home)
    assert "W&B offline" in out
    (rec,) = (study / "results").glob("*/*/record.json")  # (W&B's offline copy lies below it)
    assert json.loads(rec.read_text())["status"] == "finished"
    shell("python -m ablate.report --out report.md --no-plots", study, venv, home)
    assert "1 run(s) read" in (study / "report.md").read_text()
    (line,) = shell("python -m ablate.report --missing-command", study, venv, home).strip().splitlines()
    assert "experiment=gstudy" in shlex.split(line), line
    shell(f"{line} recipe=tiny scale=tiny", study, venv, home)  # as printed, the tiny presets added
    assert len(list((study / "results").glob("*/*/record.json"))) == 2


def test_the_installed_package_finds_its_configs_where_the_wheel_holds_them(venv, tmp_path):
    """The package's configs as the wheel holds them (ablate/conf): a Multi30k record's data root is read
    from MULTI30K_DIR, and a row of the package composes the run the checkout composes (the same id)."""
    home = tmp_path / "home"
    home.mkdir()
    code = (
        "from ablate.config.study import package_conf; from ablate.records.identity import preset_sources; "
        "print(package_conf()); print(preset_sources(('experiment=table3_multi30k',)))"
    )
    conf, sources = shell(f"python -c {shlex.quote(code)}", tmp_path, venv, home).strip().splitlines()
    assert Path(conf).parts[-2:] == ("ablate", "conf") and not conf.startswith(str(ROOT)), conf
    assert sources == "{'data.root': 'MULTI30K_DIR'}"
    installed = shell("python -m ablate.run model=C3 --plan", tmp_path, venv, home)
    here = subprocess.run([sys.executable, "-m", "ablate.run", "model=C3", "--plan"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300).stdout  # fmt: skip
    ids = [next(w for w in out.split() if w.startswith("C3-")) for out in (installed, here)]
    assert ids[0] == ids[1], ids
