"""Records travel between machines: a record names its inputs by what they are (a config key or its
environment variable, a content fingerprint, a place in the study), never by where one machine put them.
Read, identified, planned and reported on another machine (another HOME, the data in another folder, the
records not to be written), a committed table writes only to that machine's cache and where it was told;
the commands it prints carry no machine's path; a study moved elsewhere keeps its records current; a row's
own value given on the command line names the same run; a study's corpus follows the helpers its task
imports."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "reports" / "table3_multi30k" / "runs"
# an absolute path as a shell or Hydra would read one: '/' at the start or after a blank, '=', quote or '['
ABSOLUTE = re.compile(r"(^|[\s='\"\[])/\w")


def _tree(folder: Path) -> dict[str, str]:
    """Every file under `folder` by its path there, with the sha256 of its bytes."""
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _read_only(folder: Path) -> None:
    for p in [folder, *folder.rglob("*")]:
        p.chmod(p.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def _as_written_elsewhere(runs: Path, cache_dir: str, root: str) -> None:
    """The committed records as another machine wrote them: its cache folder and its data folder."""
    for p in runs.rglob("record.json"):
        rec = json.loads(p.read_text())
        rec["config"]["data"].update(cache_dir=cache_dir, root=root)
        p.write_text(json.dumps(rec))


def _machine(tmp_path: Path) -> tuple[dict, dict[str, Path]]:
    """Another machine's environment: an empty HOME and cache, a results folder of its own, matplotlib's
    font cache (not ablate's) outside HOME; nothing set that names the data."""
    where = {name: tmp_path / name for name in ("home", "cache", "results", "mpl", "work")}
    for p in where.values():
        p.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("MULTI30K_DIR", "ABLATE_STUDY")}
    env.update(
        HOME=str(where["home"]), ABLATE_CACHE=str(where["cache"]), ABLATE_RESULTS=str(where["results"]),
        MPLCONFIGDIR=str(where["mpl"]), PYTHONPATH=str(ROOT),
    )  # fmt: skip
    return env, where


def _run(args: list[str], env: dict, cwd: Path) -> subprocess.CompletedProcess:
    p = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, (args, p.stdout[-2000:], p.stderr[-3000:])
    return p


IDENTIFY = """
import json, sys
from pathlib import Path
from ablate.config import to_dataclass
from ablate.records import identity, store
runs = sorted(Path(sys.argv[1]).rglob("record.json"))
read = [identity.run_id(to_dataclass(store.read_record(p)["config"])) == p.parent.name for p in runs]
written = [identity.run_id(to_dataclass(json.loads(p.read_text())["config"])) for p in runs]
print(json.dumps({"n": len(runs), "same": sum(read)}))
"""


def test_a_committed_table_read_identified_planned_and_reported_elsewhere_writes_only_where_told(
    tmp_path, multi30k_dir
):
    """The Multi30k table's records, as a machine wrote them whose cache and data folders exist here (a
    colleague's, here writable), read-only, on a machine with an empty HOME and cache and the data in a
    folder of its own too: identifying every record (read back: each its folder's id; as written), the
    report and its two commands, and the plan of seed 1 write nothing into the records (but the decide
    command's look, appended to looks.jsonl), HOME or the writing machine's folders, and into this
    machine's cache only content fingerprints; the plan finds every run finished in the other folder (the
    same files, the same runs); the commands carry no path."""
    env, where = _machine(tmp_path)
    theirs, their_data = tmp_path / "their_cache", tmp_path / "their_data" / "multi30k"
    theirs.mkdir()
    shutil.copytree(multi30k_dir, their_data)
    data = tmp_path / "data" / "multi30k"
    shutil.copytree(multi30k_dir, data)
    runs = where["work"] / "runs"
    shutil.copytree(COMMITTED, runs)
    _as_written_elsewhere(runs, str(theirs), str(their_data))
    _read_only(runs)
    _read_only(their_data)
    before, their_files = _tree(runs), _tree(their_data)
    env["MULTI30K_DIR"] = str(data)

    ids = json.loads(_run(["-c", IDENTIFY, "runs"], env, where["work"]).stdout)
    assert ids["n"] >= 78 and ids["same"] == ids["n"]
    report = ["-m", "ablate.report", "--results", "runs", "--preset", "multi30k_table3+paper"]
    _run([*report, "--out", "out/t3.md", "--plots", "out/plots"], env, where["work"])
    assert "| base |" in (where["work"] / "out" / "t3.md").read_text()
    for flag in ("--missing-command", "--decide-command"):
        cmd = _run([*report, flag], env, where["work"]).stdout.strip()
        assert cmd.startswith("python -m ablate.run -m") and "data=multi30k" in cmd, cmd
        assert not ABSOLUTE.search(cmd), cmd
    plan = ["-m", "ablate.run", "-m", "experiment=table3_multi30k", "seed=1", "results_dir=runs", "--plan"]
    done = _run(plan, env, where["work"])
    said = done.stdout + done.stderr
    assert "plan of 20 runs: 20 finished" in said, said[-2000:]

    # the decide command's look is the one thing written beside the records: appended to looks.jsonl,
    # under its lock (a lock file, as a run's, ignored by git), never over a line
    after = _tree(runs)
    changed = {p for p in set(before) | set(after) if before.get(p) != after.get(p)}
    assert changed <= {"looks.jsonl", ".looks.jsonl.lock"}, sorted(changed)
    assert (runs / "looks.jsonl").read_text().startswith((COMMITTED / "looks.jsonl").read_text())
    assert _tree(their_data) == their_files
    assert _tree(theirs) == {} and _tree(where["home"]) == {}
    assert {Path(p).parts[0] for p in _tree(where["cache"])} <= {"fingerprints"}
    assert {Path(p).parts[0] for p in _tree(where["work"])} == {"runs", "out"}
    assert _tree(where["results"]) == {}


def test_a_recorded_data_folder_missing_here_is_this_machines_where_the_content_agrees(
    tmp_path, multi30k_dir, monkeypatch
):
    """A record whose data folder does not exist here reads with the folder this machine's preset gives
    (data=multi30k: MULTI30K_DIR) where its id comes out the record's; a folder of other content is not
    its data: the record reads as written. Neither a record read back nor a new one names a cache folder."""
    from ablate.config import to_dataclass
    from ablate.records import identity, store

    src = next(COMMITTED.glob("base/*-s1/record.json"))
    run = tmp_path / "runs" / "base" / src.parent.name
    run.mkdir(parents=True)
    rec = json.loads(src.read_text())
    rec["config"]["data"]["root"] = "/nonexistent/their/multi30k"
    (run / "record.json").write_text(json.dumps(rec))
    same = tmp_path / "same"
    shutil.copytree(multi30k_dir, same)
    other = tmp_path / "other"
    shutil.copytree(multi30k_dir, other)
    shutil.copyfile(other / "test_2016_flickr.de.gz", other / "val.de.gz")

    monkeypatch.setenv("MULTI30K_DIR", str(same))
    config = store.read_record(run / "record.json")["config"]
    assert config["data"]["root"] == str(same) and "cache_dir" not in config["data"]
    assert identity.run_id(to_dataclass(config)) == run.name
    monkeypatch.setenv("MULTI30K_DIR", str(other))
    assert store.read_record(run / "record.json")["config"]["data"]["root"] == "/nonexistent/their/multi30k"
    assert "cache_dir" not in store.new_record(to_dataclass(config))["config"]["data"]  # a new record: none


def test_the_printed_commands_name_data_by_the_variable_that_names_it(tmp_path, monkeypatch, capsys):
    """A record's data folder, kept or launched, is left to the preset that reads it from a variable
    (data=multi30k: MULTI30K_DIR), a file inside the current folder given relative to it, any other as a
    variable of its own; the launching machine's cache is never repeated; a variable not set here is said
    once on stderr."""
    from ablate.report.collect import Run
    from ablate.report.missing import command_overrides

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MULTI30K_DIR", raising=False)
    (tmp_path / "corpus").mkdir()
    old = {"config": {"recipe": "multi30k_table3", "scale": {"name": "paper"}, "data": {
        "name": "multi30k", "root": "/their/multi30k", "cache_dir": "/their/.cache/ablate"}}}  # fmt: skip
    over = command_overrides(Run(old))
    assert over[:3] == ["recipe=multi30k_table3", "scale=paper", "data=multi30k"], over
    assert not any("/their" in o or "data.root" in o for o in over), over
    assert "reads data.root from $MULTI30K_DIR, not set here" in capsys.readouterr().err

    launch = {"overrides": ["experiment=table3_multi30k", "model=base", "seed=1", "data.root=/their/multi30k",
                            "data.cache_dir=/their/.cache/ablate", "data.train_src=/their/train.en",
                            f"data.train_tgt={tmp_path / 'corpus' / 'train.de'}"]}  # fmt: skip
    assert command_overrides(Run({"launch": launch, "config": {}})) == [
        "experiment=table3_multi30k",
        "data.train_src=${oc.env:ABLATE_DATA_TRAIN_SRC}",
        "data.train_tgt=corpus/train.de",
    ]
    err = capsys.readouterr().err
    assert "$MULTI30K_DIR" in err and "$ABLATE_DATA_TRAIN_SRC" in err


def test_a_rows_own_value_on_the_command_line_keeps_its_run_id(monkeypatch):
    """`model.arch=<the row's own>` (a researcher's model) and `model.dropout=<the row's>` name the run the
    row alone names; a key whose being given changes the model built (C3's N taken as given, not relative
    to the recipe's base of 3 layers) names another."""
    from hydra import compose, initialize_config_dir

    from ablate.config import register_configs, row_arch
    from ablate.jobs.sweep import member_config
    from ablate.records.identity import run_id

    user = ROOT / "tests" / "user_model"
    monkeypatch.syspath_prepend(str(user))
    register_configs()

    def rid(overrides: list[str]) -> tuple[str, int]:
        with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
            extra = [f"hydra.searchpath=[file://{user / 'conf'}]"]
            cfg = member_config(compose("config", overrides=[*extra, *overrides]), overrides, None)
        return run_id(cfg), row_arch(cfg).n_layers

    gru = ["experiment=gru", "model=gru"]
    assert rid([*gru, "model.arch=gru_model:GRUSeq2Seq"]) == rid(gru)
    assert rid([*gru, "model.criterion=gru_model:ZLossCrossEntropy"]) == rid(gru)
    c3 = ["recipe=multi30k_table3", "data=multi30k", "model=C3"]
    assert rid([*c3, "model.dropout=0.1", "model.arch=transformer"]) == rid(c3)
    (given, n_given), (alone, n_alone) = rid([*c3, "model.n_layers=8"]), rid(c3)
    assert (n_given, n_alone) == (8, 4) and given != alone


STUDY_TASK = """
import random
from ablate.tasks import Metric, Scored, Task

EXACT = Metric("acc", "exact match", direction="higher", accumulates="a", record_key="dev_acc",
               curve_key="dev_acc")


class MovedTask(Task):
    metrics = (EXACT,)
    data_name = "moved_words"

    def splits(self, cfg):
        from words import WORDS

        rng = random.Random(1)
        pairs = [(w, w[::-1]) for w in rng.choices(WORDS, k=40)]
        return {"train": pairs[:30], "dev": pairs[30:]}
"""

MAKE = """
import json, sys
from pathlib import Path
from ablate.records import staleness
from ablate.tasks import task_of
task = "moved_task:MovedTask"
task_of(task).splits(None)  # as a run prepares its corpus: the helper imported
import models.tiny_model  # the row's model, as a run builds it
import torch  # its modules torch.ops and torch.classes name files by relative paths: none of the study's
row, model = str(Path("conf/model/wide.yaml").resolve()), str(Path("models").resolve())
facts = staleness.outside_facts(task, [row], (model,))
rec = {"task": task, "git": sys.argv[1], "config": {"model": {"arch": "models.tiny_model:Tiny"}}, **facts}
print(json.dumps(rec))
"""
CHECK = """
import json, sys
from ablate.records.staleness import why_stale
print(json.dumps(why_stale(json.loads(open(sys.argv[1]).read()))))
"""


def test_a_study_moved_elsewhere_keeps_its_records_current(tmp_path):
    """A study (its task, a helper its splits import, a model in a package of its own, a row file) whose
    record was made in one folder, then moved and renamed (no byte changed): its record is current there,
    run from the new folder; an edit to its helper stales it, the reason naming the file by its place in
    the study, not the machine's path."""
    study = tmp_path / "first" / "kernels"
    (study / "conf" / "model").mkdir(parents=True)
    (study / "models").mkdir()
    (study / "study.yaml").write_text("name: kernels\ntask: moved_task:MovedTask\n")  # its own: imported
    (study / "moved_task.py").write_text(STUDY_TASK)
    (study / "words.py").write_text("WORDS = ['alpha', 'beta', 'gamma', 'delta']\n")
    (study / "models" / "__init__.py").write_text("")
    (study / "models" / "tiny_model.py").write_text("class Tiny:\n    pass\n")
    (study / "conf" / "model" / "wide.yaml").write_text("name: wide\narch: models.tiny_model:Tiny\n")
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}."}
    env.pop("ABLATE_STUDY", None)
    made = _run(["-c", MAKE, head], env, study).stdout
    rec = json.loads(made)
    assert sorted(rec["task_files"]) == [
        f"kernels/{f}" for f in ("conf/model/wide.yaml", "models/__init__.py", "models/tiny_model.py",
                                 "moved_task.py", "words.py")
    ]  # fmt: skip
    (tmp_path / "record.json").write_text(made)

    moved = tmp_path / "elsewhere" / "kernels_v2"
    moved.parent.mkdir()
    study.rename(moved)
    check = ["-c", CHECK, str(tmp_path / "record.json")]
    assert json.loads(_run(check, env, moved).stdout) is None
    (moved / "words.py").write_text("WORDS = ['alpha', 'beta', 'gamma', 'epsilon']\n")
    why = json.loads(_run(check, env, moved).stdout)
    assert why is not None and "words.py" in why and str(tmp_path) not in why, why
    assert not ABSOLUTE.search(why), why


HELPER_TASK = """
from ablate.tasks import Task


class HelperTask(Task):
    data_name = "{data}"

    def splits(self, cfg):
        from {helper} import pairs

        return {{"train": pairs(20), "dev": pairs(5)}}
"""


def test_an_edited_helper_module_prepares_the_corpus_again(tmp_path, monkeypatch):
    """The prepared corpus of a task's splits is keyed by its module and the modules of its folder it
    imports (here inside splits()): an edited helper gives a new key, so the retrain prepares the corpus
    again, as its records go stale; a file the task does not import changes nothing."""
    from ablate.config import DataConfig, RunConfig
    from ablate.data.corpora import corpus_cache_key
    from ablate.tasks import task_of

    folder = tmp_path / "helped"
    folder.mkdir()
    (folder / "helped_task.py").write_text(HELPER_TASK.format(data="helped_words", helper="helped_pairs"))
    helper = folder / "helped_pairs.py"
    helper.write_text("def pairs(n):\n    return [(str(i), str(i)[::-1]) for i in range(n)]\n")
    (folder / "notes.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(folder))
    task = "helped_task:HelperTask"
    task_of(task)
    cfg = RunConfig(task=task, data=DataConfig(name="helped_words"))
    first = corpus_cache_key(cfg)
    (folder / "notes.py").write_text("X = 2\n")
    assert corpus_cache_key(cfg) == first
    helper.write_text(helper.read_text().replace("[::-1]", "[::-1] + 'x'"))
    assert corpus_cache_key(cfg) != first


def _mount_read_only(source: Path, target: Path) -> bool:
    """`source` at `target` as a read-only bind mount (root's; chmod does not stop root); False where this
    machine does not allow it."""
    target.mkdir()
    if subprocess.run(["mount", "--bind", str(source), str(target)], capture_output=True).returncode != 0:
        return False
    if subprocess.run(["mount", "-o", "remount,bind,ro", str(target)], capture_output=True).returncode != 0:
        subprocess.run(["umount", str(target)], check=False)
        return False
    return True


def test_a_read_only_mount_of_the_committed_table_reports_plans_and_decides_writing_nothing(
    tmp_path, multi30k_dir
):
    """The Multi30k table's records on a truly read-only mount (an archive, a colleague's share): the
    report is the committed report's (its summary, cell for cell), the plan finds every run finished, the
    decide command prints its commands with exit 0 and says its look is not kept, and not a byte of the
    mount changes."""
    env, where = _machine(tmp_path)
    runs = where["work"] / "runs"
    if not _mount_read_only(COMMITTED, runs):
        pytest.skip("read-only bind mounts need root and a kernel that allows them")
    try:
        before = _tree(runs)
        env["MULTI30K_DIR"] = str(multi30k_dir)
        report = ["-m", "ablate.report", "--results", "runs", "--preset", "multi30k_table3+paper"]
        _run([*report, "--out", "out/t3.md", "--plots", "out/plots"], env, where["work"])
        summary = (where["work"] / "out" / "t3.md").read_text().split("## Summary\n")[1].split("## Table")[0]
        committed = (ROOT / "reports" / "table3_multi30k.md").read_text()
        assert summary == committed.split("## Summary\n")[1].split("## Table")[0]
        decided = _run([*report, "--decide-command"], env, where["work"])
        assert decided.stdout.startswith("python -m ablate.run -m"), decided.stdout
        assert "cannot be written" in decided.stderr and "not kept" in decided.stderr, decided.stderr
        plan = [
            "-m",
            "ablate.run",
            "-m",
            "experiment=table3_multi30k",
            "seed=1",
            "results_dir=runs",
            "--plan",
        ]
        done = _run(plan, env, where["work"])
        assert "plan of 20 runs: 20 finished" in done.stdout + done.stderr
        assert _tree(runs) == before
    finally:
        subprocess.run(["umount", str(runs)], check=False)
