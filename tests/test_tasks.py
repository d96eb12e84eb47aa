"""Tasks are peers: shared code names none of them, a task is loaded by name, and a researcher's own task
(tests/user_task: reverse the source sentence, scored by exact match) runs through every command with
nothing under ablate/ edited."""

from __future__ import annotations

import ast
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import sacrebleu
from terminal import AS_TYPED

from ablate.config import ConfigError
from ablate.tasks import BUILTIN, Scored, task_of

ROOT = Path(__file__).resolve().parents[1]
USER_TASK = Path(__file__).resolve().parent / "user_task"
# The one place outside ablate/tasks/ that names a task: the config's default, which a record without a
# `task` field means too.
ALLOWED = {("ablate/config/schema.py", "DEFAULT_TASK")}


def task_mentions(path: Path, source: str, names: set[str]) -> list[str]:
    """Where a module names a task: a string that is a task's name (not a docstring), or a comparison of
    something called `task` with a string (`task == "x"`)."""
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    allowed = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and (path.as_posix(), t.id) in ALLOWED for t in node.targets)
    }
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and node.value in names and id(node) not in docstrings | allowed:
            out.append((node.lineno, f"{path}:{node.lineno}: the string {node.value!r}"))
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            named = any(_called_task(s) for s in sides)
            if named and any(isinstance(s, ast.Constant) and isinstance(s.value, str) for s in sides):
                out.append((node.lineno, f"{path}:{node.lineno}: a comparison of a task with a string"))
    return [text for _, text in sorted(out)]


def _called_task(node: ast.AST) -> bool:
    return (isinstance(node, ast.Name) and node.id == "task") or (
        isinstance(node, ast.Attribute) and node.attr == "task"
    )


def test_no_module_outside_the_tasks_names_a_task():
    names = set(BUILTIN)
    files = [
        p for p in (ROOT / "ablate").rglob("*.py") if "tasks" not in p.relative_to(ROOT / "ablate").parts
    ]
    files += list((ROOT / "hydra_plugins").rglob("*.py"))
    found = [m for p in files for m in task_mentions(p.relative_to(ROOT), p.read_text(), names)]
    assert not found, "\n".join(found)


def test_the_checker_finds_a_task_named_in_shared_code():
    code = (
        '"""parsing in a docstring is prose."""\n'
        'X = last_eval["parsing"]\n'
        'if cfg.task == "other":\n    pass\n'
        'DEFAULT_TASK = "translation"\n'
    )
    found = task_mentions(Path("ablate/training/x.py"), code, {"parsing", "translation"})
    assert found == [
        "ablate/training/x.py:2: the string 'parsing'",
        "ablate/training/x.py:3: a comparison of a task with a string",
        "ablate/training/x.py:5: the string 'translation'",
    ]
    assert (
        task_mentions(Path("ablate/config/schema.py"), 'DEFAULT_TASK = "translation"\n', {"translation"})
        == []
    )


@pytest.mark.parametrize(
    "name, says",
    [
        ("nope", "task=nope: not a task (translation, parsing, or an importable module:Class)"),
        ("no_such_module:Task", "task=no_such_module:Task: cannot load it (ModuleNotFoundError"),
        ("os.path:join", "task=os.path:join: os.path:join is not a subclass of ablate.tasks.Task"),
    ],
)
def test_a_task_that_does_not_load_is_one_line_naming_the_key(name, says):
    with pytest.raises(ConfigError) as e:
        task_of(name)
    assert str(e.value).startswith(says) and len(str(e.value).splitlines()) == 1


def test_every_task_declares_its_metrics_and_tables():
    """Each built-in task: at least one metric with a direction, record and curve keys, and each table
    it declares importable."""
    import importlib

    for name in BUILTIN:
        task = task_of(name)
        assert task.name == name and task.label and task.metrics
        for m in task.metrics:
            assert m.record_key and m.curve_key and m.accumulates and isinstance(m.higher_is_better, bool)
        for where in task.tables.values():
            module, _, fn = where.partition(":")
            assert callable(getattr(importlib.import_module(module), fn))


def test_the_sentence_statistics_of_bleu_sum_to_sacrebleus_corpus_score():
    """The per-sentence statistics come from sacreBLEU's public fields; their sums give its corpus BLEU
    (an independent path: the report's corpus_bleu of the summed statistics)."""
    from ablate.report.stats import corpus_bleu
    from ablate.tasks.bleu import bleu_scored

    hyps = ["the cat sat on the mat .", "a dog", "", "Ein Mann fährt Fahrrad ."]
    refs = ["the cat is on the mat .", "the dog barks", "nothing here", "Ein Mann fährt ein Fahrrad ."]
    scored = bleu_scored(hyps, refs)
    stats = scored.sentences["bleu_stats"]
    assert stats.shape == (4, 10) and stats[0].tolist() == [7, 7, 6, 4, 2, 1, 7, 6, 5, 4]
    assert float(corpus_bleu(stats.sum(0))) == pytest.approx(scored.figures["dev_bleu"], abs=1e-9)
    assert scored.figures["dev_bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score, abs=1e-9)


def test_the_user_task_scores_exact_match_by_hand():
    sys.path.insert(0, str(USER_TASK))
    try:
        task = task_of("reverse_task:ReverseTask")
    finally:
        sys.path.remove(str(USER_TASK))
    scored = task.dev_scorer(None, None, None)(["c b a", "b a", " a  b "], ["c b a", "a b", "a b"])
    assert scored.figures == {"dev_acc": pytest.approx(200 / 3)}
    assert scored.sentences["exact"].tolist() == [1, 0, 1]
    assert task.own_code == () and task.metrics[0].higher_is_better


def test_a_metric_declares_its_direction_by_either_field_and_nothing_else():
    from ablate.tasks import PPL, Metric, TaskError

    keys = dict(accumulates="a", record_key="dev_e", curve_key="dev_e")
    assert Metric("e", "E", direction="lower", **keys).higher_is_better is False
    assert Metric("e", "E", True, **keys).direction == "higher" and PPL.direction == "lower"
    assert Metric("e", "E", False, "a", "dev_e", "dev_e") == Metric("e", "E", direction="lower", **keys)
    for bad, says in [
        (dict(higher_is_better="False"), "metric 'e': higher_is_better='False' is not True or False"),
        (dict(higher_is_better=1), "metric 'e': higher_is_better=1 is not True or False"),
        (dict(direction="down"), "metric 'e': direction='down' is not 'higher' or 'lower'"),
        ({}, "metric 'e': no direction (declare direction='higher' or 'lower')"),
        (
            dict(direction="lower", higher_is_better=True),
            "metric 'e': direction='lower' and higher_is_better",
        ),
        (dict(direction="lower", record_key=""), "metric 'e': record_key='' is not a non-empty string"),
    ]:
        with pytest.raises(TaskError) as e:
            Metric("e", "E", **{**keys, **bad})
        assert str(e.value).startswith(says) and len(str(e.value).splitlines()) == 1


def test_the_dev_scorer_is_checked_for_every_declared_metric():
    """No scorer with metrics declared is refused as it is built; a scorer that gives other keys, or not
    a Scored, at its first call; one that gives each metric's key and statistics passes as it is."""
    from ablate.tasks import Metric, Task, TaskError, dev_scorer

    class Two(Task):
        name = "two"
        metrics = (
            Metric("a", "A", direction="higher", accumulates="x", record_key="dev_a", curve_key="dev_a"),
            Metric("b", "B", direction="lower", accumulates="x", record_key="dev_b", curve_key="dev_b",
                   sentence_stats="b_stats"),
        )  # fmt: skip

        def __init__(self, scorer=None):
            self.scorer = scorer

        def dev_scorer(self, cfg, prepared, dm):
            return self.scorer

    with pytest.raises(TaskError, match=r"^task two: declares metric\(s\) 'a', 'b' but no dev_scorer"):
        dev_scorer(Two(), None, None, None)
    for returned, says in [
        (Scored({"dev_a": 1.0, "dev_c": 2.0}),
         "metric 'b': its dev scorer reported no 'dev_b' (its figures: dev_a, dev_c)"),
        (Scored({"dev_a": 1.0, "dev_b": 2.0}),
         "metric 'b': its dev scorer gave no per-sentence statistics 'b_stats'"),
        ({"dev_a": 1.0}, "its dev scorer returned dict, not ablate.tasks.Scored"),
    ]:  # fmt: skip
        with pytest.raises(TaskError) as e:
            dev_scorer(Two(lambda h, r, x=returned: x), None, None, None)(["h"], ["r"])
        assert str(e.value).startswith(f"task two: {says}")
    good = Scored({"dev_a": 1.0, "dev_b": 2.0}, {"b_stats": np.ones(1)})
    assert dev_scorer(Two(lambda h, r: good), None, None, None)(["h"], ["r"]) is good


def test_the_command_for_more_cells_is_the_one_the_run_was_launched_with():
    """A record that kept its launch: its config folders, experiment and every override but row, seed,
    resume and results_dir, as argv words (shell-quoted where printed); a record without it: rebuilt from
    its config (the package's tasks' committed records)."""
    from ablate.report.collect import Run
    from ablate.report.missing import command_overrides

    launch = {
        "overrides": ["experiment=reverse", "model=wide", "seed=3", "trainer.threads=1", "resume=true",
                      "model.dropout=0.2", "data.train_src='my file.txt'"],
        "searchpath": ["file:///home/r/conf"],
    }  # fmt: skip
    over = command_overrides(Run({"launch": launch, "config": {}}), "out")
    assert over == [
        "hydra.searchpath=[file:///home/r/conf]",
        "experiment=reverse",
        "trainer.threads=1",
        "data.train_src='my file.txt'",
        "results_dir=out",
    ]
    from ablate.jobs.command import run_command

    assert run_command(over) == (
        "python -m ablate.run 'hydra.searchpath=[file:///home/r/conf]' experiment=reverse trainer.threads=1 "
        "'data.train_src='\"'\"'my file.txt'\"'\"'' results_dir=out"
    )
    old = {"config": {"recipe": "tiny", "scale": {"name": "tiny"}, "data": {"name": "builtin"}}}
    assert command_overrides(Run(old))[:2] == ["recipe=tiny", "scale=tiny"]


def _cmd(args: list[str], env: dict, cwd: Path = ROOT, ok: tuple[int, ...] = (0,)):
    p = subprocess.run([sys.executable, "-m", *args], cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=600, **AS_TYPED)  # fmt: skip
    assert p.returncode in ok, (args, p.returncode, p.stderr[-3000:])
    return p


def test_a_group_of_a_researchers_rows_expands_as_a_projects_group(tmp_path):
    """`-m model=W` names the rows of the researcher's folder whose `group:` is W (wide): one value is no
    sweep to Hydra, which composes it before the sweeper expands it; `model=W` for one run is refused."""
    env = dict(os.environ, PYTHONPATH=str(USER_TASK), ABLATE_RESULTS=str(tmp_path / "r"))
    common = [f"hydra.searchpath=[file://{USER_TASK}/conf]", "experiment=reverse", "logger=none"]
    plan = _cmd(["ablate.run", "-m", *common, "model=W", "seed=1,2", "--plan"], env).stdout
    lines = [line for line in plan.splitlines() if line.startswith("[plan] wide s")]
    assert len(lines) == 2 and "d_ff 256" in lines[0] and "plan of 2 runs: 2 to train" in plan
    one = _cmd(["ablate.run", *common, "model=W"], env, ok=(2,)).stderr.strip()
    assert one.endswith(
        "model=W is a Table 3 group (wide), not a row: run its rows with `-m model=W`, or name one row"
    )
    assert not list(tmp_path.rglob("record.json"))


@pytest.mark.slow
def test_a_researchers_own_task_goes_through_every_command(tmp_path):
    """docs/tasks.md's walk-through: train (stopped by Ctrl-C, then resumed), a sweep of its own rows with
    --plan first, ablate.evaluate, its report table with its metric and intervals, and its records
    stale once its own code changes; nothing under ablate/ edited."""
    user = tmp_path / "user_task"
    shutil.copytree(USER_TASK, user, ignore=shutil.ignore_patterns("__pycache__"))
    env = dict(os.environ, PYTHONPATH=str(user), ABLATE_RESULTS=str(tmp_path / "r"))
    env["ABLATE_CACHE"] = str(tmp_path / "c")
    common = [f"hydra.searchpath=[file://{user}/conf]", "experiment=reverse", "logger=none",
              "trainer.threads=1", "trainer.progress_bar=false"]  # fmt: skip
    prepared = _cmd(["ablate.prepare", *common[:2]], env).stdout.splitlines()[-1]  # the experiment's corpus
    stop = dict(env, ABLATE_FAULT_SIGINT_AT_STEP="10")
    p = _cmd(["ablate.run", *common], stop, ok=(130,))
    (rec_path,) = (tmp_path / "r").rglob("record.json")
    assert json.loads(rec_path.read_text())["status"] == "interrupted", p.stderr[-2000:]
    assert f"{prepared}: already prepared" in p.stdout  # prepare's corpus is the run's
    _cmd(["ablate.run", *common], env)  # the same command resumes it from its step-10 checkpoint
    rec = json.loads(rec_path.read_text())
    assert rec["status"] == "finished" and rec["steps"] == 20 and rec["task"] == "reverse_task:ReverseTask"
    assert set(rec["metrics"]) >= {"dev_acc", "dev_ppl"} and "dev_bleu" not in rec["metrics"]
    curves = [json.loads(line) for line in (rec_path.parent / "curves.jsonl").read_text().splitlines()]
    assert sorted({c["step"] for c in curves if "dev_ppl" in c}) == [10, 20] and "dev_acc" in curves[-1]
    with np.load(rec_path.parent / "dev_sentences.npz") as z:
        assert sorted(z) == ["exact", "nll", "tokens"] and len(z["exact"]) == 30

    sweep = ["ablate.run", "-m", *common, "model=base,wide", "seed=1,2"]
    plan = _cmd([*sweep, "--plan"], env).stdout
    assert "plan of 4 runs: 1 finished, 3 to train" in plan and "d_ff 256" in plan  # wide: its own row
    _cmd(sweep, env)
    wide = next((tmp_path / "r" / "wide").glob("wide-*-s1"))
    out = _cmd(["ablate.evaluate", str(wide), "--split", "test"], env).stdout
    assert "test_acc" in out
    report = ["ablate.report", "metrics", "--task", "reverse_task:ReverseTask", "--conf",
              str(user / "conf" / "model"), "--out", "-"]  # fmt: skip
    table = _cmd(report, env).stdout
    assert "| row | seeds | exact match dev | 95% interval | Δ base |" in table
    assert "| wide | 2 |" in table and "pooled over the rows" in table and "†" not in table

    # the commands the report prints, run as printed: each trains exactly the cells it names
    results = tmp_path / "r"
    missing = _cmd([*report, "--missing-command", "--seeds", "1,2,3"], env).stdout.splitlines()
    assert len(missing) == 1 and f"hydra.searchpath=[file://{user}/conf]" in missing[0]
    assert _run_printed(missing[0], env, results) == {("base", 3), ("wide", 3)}
    # the decide command names its rows and seeds, and trains exactly the cells it names that are not
    # trained yet (on every path: no branch of this test asserts nothing)
    said = _cmd([*report, "--decide-command"], env)
    lines = said.stdout.strip().splitlines()  # undecided rows: one command a distinct list of seeds
    assert all(ln.startswith("python -m ablate.run ") and _asked(ln) for ln in lines), said.stdout
    # a command exactly where some decision line of the table says how many seeds would decide it
    decisions = [ln for ln in _cmd(report, env).stdout.splitlines() if ln.startswith("decision: ")]
    assert decisions and bool(lines) == any("would decide it" in ln for ln in decisions), (decisions, said)
    for line in lines:
        expected = _asked(line) - set(_cells(results))
        assert _run_printed(line, env, results) == expected

    # one token of the task's own code: its records read stale, by the file; the sweep says it skips them
    source = (user / "reverse_task.py").read_text()
    (user / "reverse_task.py").write_text(source.replace("100.0 * hits.mean()", "99.0 * hits.mean()"))
    table = _cmd(report, env).stdout
    assert "| base † | 3 |" in table and "its task's user_task/reverse_task.py" in table
    assert str(user) not in table  # the file by its place in the study, not by this machine's path
    said = _cmd(sweep, env).stdout
    assert (
        said.count("is finished but stale (code changed") == 4 and "with resume=false trains it again" in said
    )
    rerun = _cmd([*report, "--missing-command", "--rows", "wide", "--seeds", "1"], env).stdout.strip()
    assert rerun.endswith(" resume=false") and _run_printed(rerun, env, results) == {("wide", 1)}
    assert "| wide † | 3 |" in _cmd(report, env).stdout  # seeds 2 and 3 still stale, seed 1 current


def _cells(results: Path) -> dict[tuple[str, int], str]:
    """(row, seed) -> when its record started, for every finished record."""
    recs = [json.loads(p.read_text()) for p in results.rglob("record.json") if ".old-" not in str(p)]
    return {(r["row"], r["seed"]): r["started"] for r in recs if r["status"] == "finished"}


def _asked(command: str) -> set[tuple[str, int]]:
    words = dict(w.split("=", 1) for w in shlex.split(command) if w.startswith(("model=", "seed=")))
    return {(row, int(s)) for row in words["model"].split(",") for s in words["seed"].split(",")}


def _run_printed(command: str, env: dict, results: Path) -> set[tuple[str, int]]:
    """Run a printed `python -m ablate.run ...` as a shell would split it; the cells it trained."""
    args = shlex.split(command)
    assert args[:3] == ["python", "-m", "ablate.run"], command
    before = _cells(results)
    _cmd(args[2:], env)
    after = _cells(results)
    return {cell for cell, started in after.items() if before.get(cell) != started}


def test_the_report_names_a_task_it_cannot_load_by_its_option(tmp_path, capsys):
    from ablate.report.__main__ import main

    assert main(["metrics", "--task", "nope", "--results", str(tmp_path), "--out", "-"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == "error: --task nope: not a task (translation, parsing, or an importable module:Class)"


def test_the_papers_figures_are_translations_alone():
    """Table 3's figures by row for translation (what its W&B runs carry beside their own), none for
    another task: a researcher's `base` row carries no paper_dev_bleu 25.8."""
    sys.path.insert(0, str(USER_TASK))
    try:
        user = task_of("reverse_task:ReverseTask")
    finally:
        sys.path.remove(str(USER_TASK))
    table3 = task_of("translation").paper_figures()
    assert table3["base"] == {"paper_dev_ppl": 4.92, "paper_dev_bleu": 25.8} and list(table3)[:2] == [
        "base",
        "A1",
    ]
    assert task_of("parsing").paper_figures() == {} and user.paper_figures() == {}
