"""A study is a folder of its own: the rule that says which study a command is in (ablate.config.study), the
package's configs found where a wheel puts them, and a researcher's study (tests/user_task, which holds a
study.yaml) run from its own folder in a clean environment, with no PYTHONPATH and no hydra.searchpath
typed, the commands the report prints run as printed."""

import json
import os
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from ablate.config import ConfigError
from ablate.config.study import STUDY_ENV, current_study, enter, package_conf, study_root

ROOT = Path(__file__).resolve().parents[1]
USER_TASK = ROOT / "tests" / "user_task"


def clean_env(home: Path) -> dict[str, str]:
    """A fresh shell's environment (env -i with PATH and HOME): the interpreter running the tests first on
    PATH as `python`, and the checkout on PYTHONPATH only where ablate itself is not installed but found
    there (the package's place, not the study's)."""
    env = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}"}
    env["HOME"] = str(home)
    if str(ROOT) in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        env["PYTHONPATH"] = str(ROOT)
    return env


def run(args: list[str], cwd: Path, env: dict, ok: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess:
    p = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode in ok, (args, p.returncode, p.stderr[-3000:])
    return p


def test_a_command_is_in_the_nearest_study_up_from_its_folder(tmp_path, monkeypatch):
    monkeypatch.delenv(STUDY_ENV, raising=False)
    outer, inner = tmp_path / "outer", tmp_path / "outer" / "a" / "inner"
    (inner / "deep").mkdir(parents=True)
    (outer / "study.yaml").write_text("reference: conv\n")
    (inner / "study.yaml").write_text("name: k\n")
    assert study_root(tmp_path) is None and current_study(tmp_path).reference == "base"
    assert study_root(outer / "a") == outer.resolve() and current_study(outer / "a").reference == "conv"
    assert study_root(inner / "deep") == inner.resolve() and current_study(inner / "deep").name == "k"
    monkeypatch.setenv(STUDY_ENV, str(outer))  # the variable wins over the folder
    assert study_root(inner / "deep") == outer.resolve()


def test_a_studys_configs_are_its_conf_folder_or_a_package_entry(tmp_path, monkeypatch):
    monkeypatch.delenv(STUDY_ENV, raising=False)
    (tmp_path / "conf").mkdir()
    (tmp_path / "study.yaml").write_text("name: s\n")
    assert current_study(tmp_path).searchpath == [f"file://{tmp_path.resolve() / 'conf'}"]
    other = tmp_path / "o"
    other.mkdir()
    (other / "study.yaml").write_text("conf: pkg://kernels_study/conf\n")
    packaged = current_study(other)
    assert packaged.searchpath == ["pkg://kernels_study/conf"] and packaged.conf is None  # not installed
    bad = tmp_path / "b"
    bad.mkdir()
    (bad / "study.yaml").write_text("conf: configs\n")
    with pytest.raises(ConfigError, match=r"study.yaml: conf: configs is not a folder of the study"):
        current_study(bad)


def test_entering_a_study_puts_its_folder_on_the_module_path_for_this_process_and_its_children(
    tmp_path, monkeypatch
):
    monkeypatch.delenv(STUDY_ENV, raising=False)
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    monkeypatch.setattr(sys, "path", list(sys.path))
    (tmp_path / "sub").mkdir()
    (tmp_path / "study.yaml").write_text("name: s\n")
    (tmp_path / "s_mod.py").write_text("X = 41 + 1\n")
    study = enter(tmp_path / "sub")
    assert study.root == tmp_path.resolve() and sys.path[0] == str(tmp_path.resolve())
    assert os.environ[STUDY_ENV] == str(tmp_path.resolve())
    assert os.environ["PYTHONPATH"] == f"{tmp_path.resolve()}{os.pathsep}/elsewhere"
    code = "import s_mod; print(s_mod.X)"
    child = subprocess.run([sys.executable, "-c", code], cwd="/", capture_output=True, text=True)
    assert child.stdout.strip() == "42", child.stderr


def test_the_wheel_carries_every_config_the_commands_compose(tmp_path):
    """`pip wheel .` holds conf/ as ablate/conf (every file of it), where package_conf finds it installed."""
    p = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                        str(tmp_path), str(ROOT)], capture_output=True, text=True, timeout=600)  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    (wheel,) = tmp_path.glob("ablate-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    conf = {f"ablate/conf/{f.relative_to(ROOT / 'conf').as_posix()}" for f in (ROOT / "conf").rglob("*.yaml")}
    assert "ablate/conf/config.yaml" in conf and conf <= names
    assert "hydra_plugins/ablate_study/study_searchpath.py" in names
    assert any(n.startswith("ablate/scaffold/") for n in names) and not any("__pycache__" in n for n in names)
    assert package_conf() == ROOT / "conf"  # a checkout: conf/ at the top level


def test_a_command_below_a_studys_folder_finds_its_configs_and_modules_in_a_clean_shell(tmp_path):
    """From tests/user_task/conf (a folder of the study): Hydra searches the study's conf/ before the
    package's, and ablate.prepare composes its experiment and imports its task, nothing typed but the
    experiment."""
    env = clean_env(tmp_path / "home")
    below = USER_TASK / "conf"
    out = run(["python", "-m", "ablate.run", "experiment=reverse", "--info", "searchpath"], below, env).stdout
    lines = [ln.split("|")[1:3] for ln in out.splitlines() if ln.startswith("| ")]
    order = [(p.strip(), s.strip()) for p, s in lines[1:]]
    assert order[1] == ("ablate-study", f"file://{USER_TASK}/conf") and order[2][0] == "main", out
    prepared = run(["python", "-m", "ablate.prepare", "experiment=reverse"], below, env).stdout
    assert "train      1,000 pairs" in prepared and (tmp_path / "home" / ".cache" / "ablate") in [
        p for p in Path(prepared.splitlines()[-1]).parents
    ]


def _cells(results: Path) -> dict[tuple[str, int], str]:
    out = {}
    for rec in results.rglob("record.json"):
        r = json.loads(rec.read_text())
        out[(r["row"], r["seed"])] = r.get("started_at") or r["run_id"]
    return out


@pytest.mark.slow
def test_a_studys_printed_commands_run_as_printed_from_its_folder_in_a_clean_shell(tmp_path):
    """The reverse study, copied elsewhere, trained from its own folder; the report's --missing-command
    carries neither PYTHONPATH nor hydra.searchpath, and run as printed in a fresh shell (PATH and HOME
    only) trains exactly the cells it names."""
    import shutil

    study = tmp_path / "reverse"
    shutil.copytree(USER_TASK, study, ignore=shutil.ignore_patterns("__pycache__", "results"))
    env = clean_env(tmp_path / "home")
    common = ["experiment=reverse", "logger=none", "trainer.threads=1", "trainer.progress_bar=false"]
    run(["python", "-m", "ablate.run", "-m", *common, "model=base,wide", "seed=1"], study, env)
    results = study / "results"
    assert set(_cells(results)) == {("base", 1), ("wide", 1)}
    for rec in results.rglob("record.json"):
        assert json.loads(rec.read_text())["launch"]["searchpath"] == []  # the study's folder: by the rule
    report = ["python", "-m", "ablate.report", "metrics", "--task", "reverse_task:ReverseTask", "--out", "-"]
    (printed,) = run([*report, "--missing-command", "--seeds", "1,2"], study, env).stdout.strip().splitlines()
    assert "searchpath" not in printed and "PYTHONPATH" not in printed and str(study) not in printed
    before = _cells(results)
    run(["bash", "-c", printed], study, env)  # as printed, in a fresh shell
    trained = {c for c, started in _cells(results).items() if before.get(c) != started}
    assert trained == {("base", 2), ("wide", 2)}
    assert shlex.split(printed)[:3] == ["python", "-m", "ablate.run"]


def test_ablate_new_writes_a_study_to_edit_and_never_over_one(tmp_path, monkeypatch, capsys):
    from ablate.new import main, module_name

    monkeypatch.delenv(STUDY_ENV, raising=False)
    assert main([str(tmp_path / "k-1"), "--model"]) == 0
    study = tmp_path / "k-1"
    written = {p.relative_to(study).as_posix() for p in study.rglob("*") if p.is_file()}
    assert written == {
        "study.yaml", ".gitignore", "README.md", "paper_table.csv", "paper_claims.yaml", "k_1_task.py",
        "k_1_model.py", "conf/experiment/k-1.yaml", "conf/model/base.yaml", "conf/model/noattn.yaml",
        "tests/test_study.py",
    }  # fmt: skip
    assert current_study(study / "conf").name == "k-1" and current_study(study).reference == "base"
    assert "arch: k_1_model:GRUSeq2Seq" in (study / "conf" / "model" / "base.yaml").read_text()
    assert "task: k_1_task:CipherTask" in (study / "conf" / "experiment" / "k-1.yaml").read_text()
    text = "".join((study / f).read_text() for f in written)
    assert not any(key in text for key in ("__STUDY__", "__MODULE__", "__ROWS__", "__MODEL_FLAG__"))
    assert main([str(study)]) == 2  # a study is never written over
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith("exists and is not an empty folder; a study starts in a new one")
    )
    assert module_name("2nd study") == "s_2nd_study" and module_name("class") == "s_class"


def test_a_fresh_studys_missing_command_composes_its_experiment(tmp_path, monkeypatch, capsys):
    """No record yet: the command --missing-command prints names the study's experiment (named as the
    study), so it plans the study's presets and task, as its README's sweep does."""
    from ablate.new import main as new
    from ablate.report.__main__ import main as report

    monkeypatch.delenv(STUDY_ENV, raising=False)
    assert new([str(tmp_path / "fresh")]) == 0
    monkeypatch.chdir(tmp_path / "fresh")
    capsys.readouterr()
    assert report(["--missing-command"]) == 0
    (line,) = capsys.readouterr().out.strip().splitlines()
    assert shlex.split(line) == [
        "python",
        "-m",
        "ablate.run",
        "-m",
        "model=base,wide",
        "seed=1",
        "experiment=fresh",
    ]


def test_the_scaffolds_word_accuracy_counts_words_at_their_place(tmp_path, monkeypatch):
    """By hand: 'a b c' against 'a c c' has 2 of 3 words at their place, 'x' against 'y z' 0 of 2."""
    from ablate.new import write

    write(tmp_path / "s", "s", model=False)
    monkeypatch.syspath_prepend(str(tmp_path / "s"))
    import s_task

    counts = s_task.word_counts(["a b c", "x"], ["a c c", "y z"])
    assert counts.tolist() == [[2, 3], [0, 2]]
    assert s_task.accuracy_of_sums({"word_counts": counts.sum(0)}) == pytest.approx(40.0)
    scored = s_task.scores(["a b c", "x"], ["a b c", "y z"], "dev")
    assert scored.figures == {"dev_wacc": pytest.approx(60.0), "dev_exact": 50.0}


def test_a_printed_command_leaves_out_the_folder_its_study_finds_by_the_rule(tmp_path, monkeypatch):
    """A record launched with the study's conf/ typed (`hydra.searchpath`, before studies were found): the
    command printed from the study leaves that entry out, and keeps a folder the study does not give."""
    from ablate.report.collect import Run
    from ablate.report.missing import command_overrides

    monkeypatch.delenv(STUDY_ENV, raising=False)
    (tmp_path / "conf").mkdir()
    (tmp_path / "study.yaml").write_text("name: s\n")
    ours, other = f"file://{tmp_path.resolve()}/conf", "file:///shared/rows"
    launch = {"overrides": ["experiment=s", "model=wide", "seed=2"], "searchpath": [ours, other]}
    monkeypatch.chdir(tmp_path)
    assert command_overrides(Run({"launch": launch, "config": {}})) == [
        f"hydra.searchpath=[{other}]",
        "experiment=s",
    ]
    monkeypatch.chdir(ROOT)  # outside the study: every folder it was launched with
    assert command_overrides(Run({"launch": launch, "config": {}}))[0] == f"hydra.searchpath=[{ours},{other}]"


def test_a_study_packaged_elsewhere_is_found_by_its_pkg_entry_in_a_clean_shell(tmp_path):
    """An installed study package (here on PYTHONPATH) holding its configs; a folder whose study.yaml names
    them `pkg://kstudy/conf`: its experiment composes from there, nothing else typed."""
    site, work = tmp_path / "site", tmp_path / "work"
    experiment = site / "kstudy" / "conf" / "experiment"
    experiment.mkdir(parents=True)
    for package in (site / "kstudy", site / "kstudy" / "conf"):
        (package / "__init__.py").write_text("")
    (experiment / "kx.yaml").write_text("# @package _global_\nexperiment: kx\ntrain: {max_steps: 7}\n")
    work.mkdir()
    (work / "study.yaml").write_text("name: k\nconf: pkg://kstudy/conf\n")
    env = clean_env(tmp_path / "home")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    out = run(["python", "-m", "ablate.run", "experiment=kx", "--cfg", "job"], work, env).stdout
    assert "experiment: kx" in out and "max_steps: 7" in out
