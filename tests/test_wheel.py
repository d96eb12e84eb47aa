"""The installed package is the package the tests check: the wheel `pip wheel .` builds, installed (not
editable) in a fresh venv that sees the dependencies but not this checkout, runs a study scaffolded with
`ablate.new --model` through train (the default logger: W&B offline), report and the command the report
prints, from the study's folder in a clean shell; and finds its own configs where the wheel puts them."""

import json
import os
import shlex
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def sh(args: list[str], cwd: Path, env: dict) -> str:
    p = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=900,
                       stdin=subprocess.DEVNULL)  # fmt: skip
    assert p.returncode == 0, (args, p.stdout[-2000:], p.stderr[-3000:])
    return p.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, dict]:
    """A venv holding the wheel alone; the dependencies are this interpreter's (a path line, so that
    none of its .pth files, the checkout's editable install among them, is read)."""
    tmp = tmp_path_factory.mktemp("wheel")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp / "home")}
    sh([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp),
        str(ROOT)], tmp, env)  # fmt: skip
    (wheel,) = tmp.glob("ablate-*.whl")
    venv = tmp / "venv"
    sh([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp, env)
    py = venv / "bin" / "python"
    site = Path(
        sh([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp, env).strip()
    )
    sh(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
        tmp,
        env,
    )
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env["PATH"] = f"{py.parent}{os.pathsep}{env['PATH']}"  # `python` is the venv's
    where = sh(["python", "-c", "import ablate; print(ablate.__file__)"], tmp, env).strip()
    assert where.startswith(str(site)), where  # the wheel's, not the checkout's
    return tmp, env


def test_a_model_study_trains_reports_and_runs_its_printed_command_from_the_installed_wheel(installed):
    tmp, env = installed
    sh(["python", "-m", "ablate.new", "gstudy", "--model"], tmp, env)
    study = tmp / "gstudy"
    out = sh(["python", "-m", "ablate.run", "experiment=gstudy", "recipe=tiny", "scale=tiny"], study, env)
    assert "W&B offline" in out
    (rec,) = (study / "results").glob("*/*/record.json")  # (W&B's offline copy lies below it)
    assert json.loads(rec.read_text())["status"] == "finished"
    report = sh(["python", "-m", "ablate.report", "--out", "report.md"], study, env)
    assert (study / "report.md").is_file() and "1 run(s) read" in (study / "report.md").read_text(), report
    (line,) = sh(["python", "-m", "ablate.report", "--missing-command"], study, env).strip().splitlines()
    assert "experiment=gstudy" in shlex.split(line), line
    sh(["bash", "-c", f"{line} recipe=tiny scale=tiny"], study, env)  # as printed, the tiny presets added
    assert len(list((study / "results").glob("*/*/record.json"))) == 2


def test_the_installed_package_maps_a_committed_records_data_root_from_its_variable(installed):
    """The package's configs as the wheel holds them (ablate/conf): a Multi30k record's data root is read
    from MULTI30K_DIR, and the package's rows compose."""
    tmp, env = installed
    code = (
        "from ablate.config.study import package_conf; from ablate.records.identity import preset_sources; "
        "print(package_conf()); print(preset_sources(('experiment=table3_multi30k',)))"
    )
    conf, sources = sh(["python", "-c", code], tmp, env).strip().splitlines()
    assert conf.endswith("site-packages/ablate/conf") or "/ablate/conf" in conf, conf
    assert sources == "{'data.root': 'MULTI30K_DIR'}"
    ours = [sys.executable, "-m", "ablate.run", "model=C3", "--plan"]
    ids = [
        next(w for w in sh(cmd, tmp, env).split() if w.startswith("C3-"))
        for cmd in (["python", *ours[1:]], ours)
    ]
    assert ids[0] == ids[1]  # the wheel's row and presets compose the checkout's C3 run
