"""Staleness (ablate.records.staleness), decided when a record is read: comments, docstrings and blank lines
never stale a record; the committed records stay current through their anchors; an uncommitted change, or
a committed one to a record that has no anchor, stales them, naming what changed; reading them never
writes them."""

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ablate.records import staleness, trust
from ablate.records.staleness import runs

ROOT = Path(__file__).resolve().parents[1]
RUNS = "reports/table3_multi30k/runs"


def _full_history() -> bool:
    done = subprocess.run(
        ["git", "rev-parse", "--is-shallow-repository"], cwd=ROOT, capture_output=True, text=True
    )
    return done.returncode == 0 and done.stdout.strip() == "false"


needs_git = pytest.mark.skipif(
    not _full_history(), reason="needs the repository's whole history (not shallow)"
)


RESULT = (
    "ablate/nn/model.py", "ablate/nn/loss.py", "ablate/data/subword.py", "ablate/config/__init__.py",
    "ablate/training/fit.py", "ablate/training/evaluation.py", "ablate/tasks/__init__.py",
)  # fmt: skip
NOT_RESULT = (
    "ablate/report/table3.py", "ablate/records/store.py", "ablate/jobs/train.py",
    "ablate/cluster/slurm_job.py", "ablate/run.py", "ablate/evaluate.py", "conf/model/A1.yaml", "README.md",
)  # fmt: skip


def test_the_code_each_task_runs():
    for task in ("translation", "parsing"):
        for path in RESULT:
            assert runs(task, path), (task, path)
        for path in NOT_RESULT:
            assert not runs(task, path), (task, path)
    for path in ("ablate/tasks/parsing/constrain.py", "ablate/data/treebank/linearize.py"):
        assert runs("parsing", path) and not runs("translation", path)


def test_the_anchors_are_read_by_task(tmp_path):
    f = tmp_path / "anchors"
    f.write_text(f"# a comment\n{'a' * 40} translation 0123456789ab  # why\n\n{'b' * 40} parsing x\n")
    assert staleness.anchors(f) == {"translation": {"0123456789ab": "a" * 40}, "parsing": {"x": "b" * 40}}
    f.write_text("a" * 40 + " translation\n")
    with pytest.raises(ValueError, match="anchors line 1: expected '<revision> <task> <code hash>"):
        staleness.anchors(f)


SOURCE = '''"""The module's docstring."""

import math  # a comment


def f(x):
    """f's docstring,
    on two lines."""
    # a comment alone
    s = "a string that is a value"
    return math.exp(x) + 1


class C:
    'doc'

    y = 2
'''


def test_comments_docstrings_and_blank_lines_are_not_result_text():
    """Python's tokenizer decides: what is left is the code as it runs, a string that is a value kept."""
    assert staleness.result_text("m.py", SOURCE.encode()).decode() == (
        'import math\ndef f(x):\n    s = "a string that is a value"\n    return math.exp(x) + 1\n'
        "class C:\n    y = 2"
    )
    edited = SOURCE.replace("# a comment alone", "# another comment\n\n").replace("f's doc", "F's")
    same = staleness.result_text("m.py", edited.encode())
    assert same == staleness.result_text("m.py", SOURCE.encode())
    for token in (("+ 1", "+ 2"), ("value", "Value"), ("math.exp", "math.log")):
        changed = staleness.result_text("m.py", SOURCE.replace(*token).encode())
        assert changed != same, token
    assert staleness.result_text("rows.csv", b"# kept\n") == b"# kept\n"  # not Python: its bytes


def test_a_record_made_from_uncommitted_code_is_current_while_that_code_is(monkeypatch):
    monkeypatch.setattr(staleness, "code_hash", lambda task: "abc")
    rec = {"task": "translation", "git": "0" * 40, "uncommitted": ["ablate/nn/loss.py"], "code_hash": "abc"}
    assert staleness.why_stale(rec) is None
    assert "uncommitted code (ablate/nn/loss.py)" in staleness.why_stale({**rec, "code_hash": "abd"})
    assert "names no revision" in staleness.why_stale({"task": "translation", "code_hash": "abd"})


def _digest(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(folder)).encode() + p.read_bytes())
    return h.hexdigest()


CHECK = """
import json, sys
from ablate.records.staleness import why_stale
from ablate.records.store import find_records
recs, errors = find_records(sys.argv[1])
print(json.dumps({"n": len(recs), "errors": errors, "stale": sorted({str(why_stale(r)) for r in recs})}))
"""


def _stale(clone: Path, runs: Path | str = RUNS) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    p = subprocess.run([sys.executable, "-c", CHECK, str(runs)], cwd=clone, env=env, capture_output=True,
                       text=True, timeout=120)  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout)


def _git(clone: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=clone, check=True, capture_output=True, text=True
    ).stdout.strip()


@needs_git
def test_the_committed_records_are_current():
    out = _stale(ROOT) if not staleness.uncommitted("translation") else None
    if out is None:
        pytest.skip("the working tree has uncommitted changes to result code")
    n = len(list((ROOT / RUNS).glob("*/*/record.json")))  # the 60 of Table 3 and the seeds added since
    assert n >= 60 and out == {"n": n, "errors": [], "stale": ["None"]}


@needs_git
def test_the_committed_table4_records_are_current():
    """The Transformer's runs (the 55-minute recipe, 3 seeds at a fixed step count) and the three
    baselines behind reports/table4_ptb_sample.md (task parsing): every record there, each current."""
    if staleness.uncommitted("parsing"):
        pytest.skip("the working tree has uncommitted changes to result code")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    p = subprocess.run([sys.executable, "-c", CHECK, "reports/table4_ptb_sample/runs"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    n = len(list((ROOT / "reports/table4_ptb_sample/runs").glob("*/*/record.json")))
    assert n >= 7 and json.loads(p.stdout) == {"n": n, "errors": [], "stale": ["None"]}, p.stderr[-2000:]


def _record_at_head(clone: Path) -> Path:
    """A copy of a committed record, as a run at the clone's HEAD would write it (its code hash, revision)."""
    code = "from ablate.records import staleness; print(staleness.code_hash('translation'))"
    hash_now = subprocess.run(
        [sys.executable, "-c", code],
        cwd=clone, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    rec = json.loads(next((clone / RUNS).rglob("record.json")).read_text())
    rec.update(code_hash=hash_now, git=_git(clone, "rev-parse", "HEAD"), uncommitted=[])
    folder = clone.parent / "made_at_head" / rec["run_id"]
    folder.mkdir(parents=True)
    (folder / "record.json").write_text(json.dumps(rec))
    return folder.parent


def _clone(tmp_path: Path) -> Path:
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--shared", str(ROOT), str(clone)], check=True)
    for k, v in (("user.name", "t"), ("user.email", "t@t")):
        _git(clone, "config", k, v)
    return clone


@needs_git
def test_comments_and_docstrings_cost_nothing_and_a_real_change_stales(tmp_path):
    """In a clone: a comment-only and a docstring-only commit to ablate/nn/model.py leave the committed
    records and a record made at HEAD current, with nothing declared; one token of the label smoothing
    changed stales all of them while uncommitted, and once committed those made at a revision, naming the
    file (the anchored ones are the anchor check's: the next test). No record changes by a byte."""
    clone = _clone(tmp_path)
    before = _digest(clone / RUNS)
    at_head = _record_at_head(clone)
    model = clone / "ablate/nn/model.py"
    text = model.read_text()
    model.write_text(text.replace("\n\n\nclass ", "\n\n\n# a comment, and a blank line\n\nclass ", 1))
    _git(clone, "commit", "-qam", "a comment")
    first_doc = text.index('"""') + 3
    model.write_text(model.read_text()[:first_doc] + "Reworded. " + model.read_text()[first_doc:])
    _git(clone, "commit", "-qam", "a docstring")
    assert _stale(clone)["stale"] == ["None"]
    assert _stale(clone, at_head)["stale"] == ["None"]

    loss = clone / "ablate/nn/loss.py"
    text = loss.read_text()
    assert text.count("1.0 - eps") >= 1, "the label-smoothing formula moved: point this test at it"
    loss.write_text(text.replace("1.0 - eps", "0.99 - eps", 1))
    # the anchored records: an uncommitted change; those made at a revision with today's code: since it
    stale = _stale(clone)["stale"]
    assert "code changed: uncommitted change to ablate/nn/loss.py" in stale
    assert all(
        re.fullmatch(r"code changed(: uncommitted change to| since \w{10}:) ablate/nn/loss.py", x)
        for x in stale
    )
    sha = json.loads(next(at_head.rglob("record.json")).read_text())["git"][:10]  # before the comments
    assert _stale(clone, at_head)["stale"] == [f"code changed since {sha}: ablate/nn/loss.py"]
    _git(clone, "commit", "-qam", "smooth differently")
    stale = _stale(clone)["stale"]  # the anchored ones current until the anchor check fails; the rest not
    assert "None" in stale
    assert all(re.fullmatch(r"None|code changed since \w{10}: ablate/nn/loss.py", x) for x in stale)
    assert _stale(clone, at_head)["stale"] == [f"code changed since {sha}: ablate/nn/loss.py"]

    _git(clone, "reset", "-q", "--hard", "HEAD~1")  # back to before the real change
    shutil.rmtree(clone / "ablate/tasks/parsing/__pycache__", ignore_errors=True)
    (clone / "ablate/tasks/parsing/note.py").write_text("X = 1\n")
    _git(clone, "add", ".")
    _git(clone, "commit", "-qm", "a parser change")
    assert _stale(clone, at_head)["stale"] == ["None"]  # translation runs never run the parser
    assert _digest(clone / RUNS) == before


@needs_git
@pytest.mark.slow
def test_the_anchor_check_fails_on_a_real_change(tmp_path):
    """The other half: in a clone, the anchor check of translation's built-in configuration fails once one
    token of the label smoothing is changed and committed (that it holds at HEAD, for every configuration
    of every task, is test_result_anchors.py's test_every_anchor_holds)."""
    clone = _clone(tmp_path)
    cmd = [sys.executable, "tests/result_anchors.py", "", "translation", "--configs", "builtin"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    loss = clone / "ablate/nn/loss.py"
    loss.write_text(loss.read_text().replace("1.0 - eps", "0.99 - eps", 1))
    _git(clone, "commit", "-qam", "smooth differently")
    failed = subprocess.run(cmd, cwd=clone, env=env, capture_output=True, text=True, timeout=1200)
    assert failed.returncode == 1, failed.stdout + failed.stderr[-2000:]
    assert "translation: builtin base: curves differ" in failed.stdout, failed.stdout  # the loss logged


def test_a_task_outside_the_package_stales_a_record_only_for_the_files_it_read(tmp_path, monkeypatch):
    """A record keeps the files of the researcher's folder its run read (task_files): the task's modules it
    imported and the config files its command composed. A notes file, a YAML comment or a comment in the
    code stale nothing; a value in a row's file stales that row's records alone; a token of the code, all."""
    from ablate.tasks import task_of

    folder = tmp_path / "probe"
    (folder / "conf" / "model").mkdir(parents=True)
    (folder / "probe_task.py").write_text(
        "from ablate.tasks import Metric, Task\n\n"
        "M = Metric('m', 'M', direction='lower', accumulates='a', record_key='dev_m',\n"
        "           curve_key='dev_m')\n\n\n"
        "class ProbeTask(Task):\n    metrics = (M,)\n"
    )
    (folder / "conf" / "model" / "wide.yaml").write_text("defaults:\n  - base\n  - _self_\n\nd_ff: 4096\n")
    (folder / "conf" / "model" / "deep.yaml").write_text("defaults:\n  - base\n  - _self_\n\nn_layers: 8\n")
    monkeypatch.syspath_prepend(str(folder))
    task = "probe_task:ProbeTask"
    task_of(task)
    monkeypatch.setattr(trust, "_GIVEN", set())  # what this test's "command" was given, and nothing else
    trust.allow(trust.TASK, task)  # its own task, as a run's is (reading imports no other)
    rows = {row: [str(folder / "conf" / "model" / f"{row}.yaml")] for row in ("wide", "deep")}
    head = _git_head()
    recs = {row: {"task": task, "git": head, **staleness.outside_facts(task, f)} for row, f in rows.items()}
    assert sorted(recs["wide"]["task_files"]) == ["probe/conf/model/wide.yaml", "probe/probe_task.py"]

    def stale() -> dict:
        staleness.code_hash.cache_clear()  # a process hashes its code once; the edits come between
        return {row: staleness.why_stale(rec) for row, rec in recs.items()}

    assert stale() == {"wide": None, "deep": None}
    (folder / "notes.md").write_text("what I tried\n")
    wide = folder / "conf" / "model" / "wide.yaml"
    wide.write_text("# twice base's width\n" + wide.read_text().replace("4096", "4096  # 4 x d_model"))
    code = folder / "probe_task.py"
    code.write_text(code.read_text().replace("metrics = (M,)", "metrics = (M,)  # its one metric"))
    assert stale() == {"wide": None, "deep": None}
    wide.write_text(wide.read_text().replace("4096", "2048"))
    said = stale()
    assert (
        said["deep"] is None
        and said["wide"] == f"code changed since {head[:10]}: its task's probe/conf/model/wide.yaml"
    )
    code.write_text(code.read_text().replace("direction='lower'", "direction='higher'"))
    assert all("its task's " in why and "probe/probe_task.py" in why for why in stale().values())
    assert not any(
        str(tmp_path) in why for why in stale().values()
    )  # a place in the study, no machine's path


def _git_head() -> str:
    return subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
