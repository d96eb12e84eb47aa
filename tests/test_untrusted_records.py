"""Records are untrusted input: reading one never imports a module it names (ablate.records.trust).

A copy of a results folder in a study, with records that name planted modules (each writes a marker file
when imported) as their task, their config's task, their model.arch and their model.criterion: every
command that reads records (the report and its --missing-command and --decide-command, a sweep's --plan,
the staleness function) leaves the markers unwritten and says of each such record that its code is not
this study's. The study's own task is still imported, and its records read current."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from test_report_table3 import ROW_YAML, _write_run

ROOT = Path(__file__).resolve().parents[1]
USER_TASK = ROOT / "tests" / "user_task"
EVIL_TASK, EVIL_ARCH, EVIL_LOSS = "evil_task:EvilTask", "evil_pkg.model:Net", "evil_loss:Loss"
PLANTED = ("evil_task", "evil_pkg", "evil_pkg.model", "evil_loss")


def _plant(folder: Path, markers: Path) -> None:
    """Modules that write a marker file each the moment they are imported."""

    def body(name: str) -> str:
        return f"open({str(markers / name)!r}, 'w').write('imported')\n"

    (folder / "evil_task.py").write_text(body("evil_task") + "class EvilTask:\n    pass\n")
    (folder / "evil_loss.py").write_text(body("evil_loss") + "class Loss:\n    pass\n")
    (folder / "evil_pkg").mkdir()
    (folder / "evil_pkg" / "__init__.py").write_text(body("evil_pkg"))  # find_spec of a.b imports a
    (folder / "evil_pkg" / "model.py").write_text(body("evil_pkg.model") + "class Net:\n    pass\n")


def _py(args: list[str], cwd: Path, env: dict, ok: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess:
    p = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode in ok, (args, p.returncode, p.stdout[-2000:], p.stderr[-3000:])
    return p


STALENESS = (
    "import json, sys; from ablate.records.staleness import why_stale; "
    "from ablate.records.store import find_records; records, _ = find_records(sys.argv[1]); "
    "print(json.dumps({r['run_id']: why_stale(r) for r in records}))"
)


def _here(cwd: Path, env: dict) -> tuple[str, str]:
    """(translation's code hash, this machine's CPU as a record names it)."""
    code = (
        "from ablate.records.staleness import code_hash; from ablate.records.store import machine; "
        "print(code_hash('translation')); print(machine()['cpu'])"
    )
    today, cpu = _py(["-c", code], cwd, env).stdout.strip().splitlines()
    return today, cpu


def _edit(folder: Path, **fields) -> Path:
    """A record's fields set, its config's too (`config` merged)."""
    rec = json.loads((folder / "record.json").read_text())
    rec["config"].update(fields.pop("config", {}))
    (folder / "record.json").write_text(json.dumps({**rec, **fields}))
    return folder


def test_no_command_that_reads_records_imports_a_module_a_record_names(tmp_path):
    study, markers = tmp_path / "study", tmp_path / "markers"
    (study / "conf" / "model").mkdir(parents=True)
    markers.mkdir()
    (study / "study.yaml").write_text("name: probe\n")  # its task: the package's translation
    for row in ("base", "A1", "D3", "B1"):  # B1: no records (its estimate scales the others' by their cost)
        (study / "conf" / "model" / f"{row}.yaml").write_text(ROW_YAML[row])
    _plant(study, markers)  # in the study's folder: on the module path of every command in it, and the cwd
    env = {k: v for k, v in os.environ.items() if k not in ("ABLATE_STUDY", "PYTHONPATH")}
    env.update(PYTHONPATH=f"{study}{os.pathsep}{ROOT}", ABLATE_RESULTS=str(study / "results"))
    today, cpu = _here(study, env)
    here = {"machine": {"cpu": cpu}, "device": "cpu (1 threads)"}  # the plan's machine: its estimates

    def write(row: str, seed: int, **kwargs) -> Path:
        return _edit(_write_run(results, row, seed, code=today, **kwargs), **here)

    results = study / "results"
    for seed in (1, 2):
        for row in ("base", "A1", "D3"):
            write(row, seed)
    theirs = {
        write("base", 3, task=EVIL_TASK).name: EVIL_TASK,
        write("A1", 3, model_over={"arch": EVIL_ARCH}).name: EVIL_ARCH,
        write("D3", 3, model_over={"criterion": EVIL_LOSS}).name: EVIL_LOSS,
        _edit(write("base", 4), config={"task": EVIL_TASK}).name: EVIL_TASK,  # typing its config imports it
    }

    def untouched(after: str) -> None:
        assert not list(markers.iterdir()), f"{after} imported {sorted(p.name for p in markers.iterdir())}"

    said = json.loads(_py(["-c", STALENESS, str(results)], study, env).stdout)
    untouched("why_stale")
    for run_id, name in theirs.items():
        assert said[run_id] == f"its code is not this study's: {name}", (run_id, said[run_id])
    assert all(why is None for run_id, why in said.items() if run_id not in theirs), said

    report = ["-m", "ablate.report", "--results", "results", "--out", "-"]
    table = _py(report, study, env)
    untouched("the report")
    assert "1 record(s) of another task" in table.stderr  # the record whose task is evil_task's: left out
    out = table.stdout
    for name in (EVIL_ARCH, EVIL_LOSS, EVIL_TASK):  # the others are in the table, stale, by the name
        assert f"its code is not this study's: {name}" in out, (name, out[-3000:])
    _py([*report, "--missing-command"], study, env)
    untouched("--missing-command")
    _py([*report, "--decide-command"], study, env, ok=(0, 2))
    untouched("--decide-command")

    # a sweep's plan: its estimates read every finished record; a forged record where its runs' own
    # records go is read, stale, not imported
    sweep = ["-m", "ablate.run", "-m", "model=base,A1,D3,B1", "seed=1", "recipe=tiny", "scale=tiny",
             "logger=none", "trainer.accelerator=cpu", "trainer.threads=1"]  # fmt: skip
    plan = _py([*sweep, "--plan"], study, env).stdout
    untouched("--plan")
    run_ids = re.findall(r"\b((?:base|A1|D3)-[0-9a-f]{12}-s1)\b", plan)
    assert len(set(run_ids)) == 3 and "scaled" in plan, plan
    forged = {"base": {"task": EVIL_TASK}, "A1": {"arch": EVIL_ARCH}, "D3": {"criterion": EVIL_LOSS}}
    for run_id in set(run_ids):
        row = run_id.split("-")[0]
        folder = _write_run(results / "forged", row, 1, code=today, **_forged(forged[row]))
        rec = json.loads((folder / "record.json").read_text())
        (results / row / run_id).mkdir(parents=True)
        (results / row / run_id / "record.json").write_text(json.dumps({**rec, "run_id": run_id}))
    shutil.rmtree(results / "forged")
    plan = _py([*sweep, "--plan"], study, env).stdout
    untouched("--plan over forged records")
    for name in (EVIL_TASK, EVIL_ARCH, EVIL_LOSS):
        assert f"finished (its code is not this study's: {name}: resume=false trains it again)" in plan, plan


def _forged(what: dict) -> dict:
    return {"task": what["task"]} if "task" in what else {"model_over": what}


def test_the_studys_own_task_is_imported_and_its_records_read_current(tmp_path):
    """tests/user_task's task (its study's experiment names it): a record made of its code reads current in
    the study, its code imported to hash it; the same record read outside the study names it, unimported."""
    user = tmp_path / "user_task"
    shutil.copytree(USER_TASK, user, ignore=shutil.ignore_patterns("__pycache__"))
    env = {k: v for k, v in os.environ.items() if k not in ("ABLATE_STUDY", "PYTHONPATH")}
    env["PYTHONPATH"] = f"{user}{os.pathsep}{ROOT}"
    task = "reverse_task:ReverseTask"
    make = (
        "import json; from ablate.config.study import enter; enter(); from ablate.tasks import task_of; "
        f"from ablate.records import staleness; task_of({task!r}); "
        f"print(json.dumps({{'task': {task!r}, 'git': None, **staleness.outside_facts({task!r})}}))"
    )
    rec = json.loads(_py(["-c", make], user, env).stdout)
    assert rec["task_files"] and "user_task/reverse_task.py" in rec["task_files"], rec
    (tmp_path / "record.json").write_text(json.dumps(rec))
    read = (
        "import json, sys; from ablate.config.study import enter; enter(); "
        "from ablate.records.staleness import why_stale; "
        "why = why_stale(json.load(open(sys.argv[1]))); "
        "print(json.dumps([why, 'reverse_task' in sys.modules]))"
    )
    assert json.loads(_py(["-c", read, str(tmp_path / "record.json")], user, env).stdout) == [None, True]
    outside = json.loads(_py(["-c", read, str(tmp_path / "record.json")], tmp_path, env).stdout)
    assert outside == [f"its code is not this study's: {task}", False]
