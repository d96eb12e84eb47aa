"""Staleness (ablate.records.staleness), decided when a record is read: the committed Multi30k records stay
current through refactors listed as result-neutral and go stale, naming what changed, on a real change;
reading them never writes them."""

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ablate.records import staleness
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


def test_the_neutral_list_is_read_by_task(tmp_path):
    f = tmp_path / "revs"
    f.write_text("# a comment\n" + "a" * 40 + " translation,parsing  # moved\n" + "b" * 40 + " parsing\n\n")
    assert staleness.neutral_revs(f) == {"translation": {"a" * 40}, "parsing": {"a" * 40, "b" * 40}}


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


def _stale(clone: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    p = subprocess.run([sys.executable, "-c", CHECK, RUNS], cwd=clone, env=env, capture_output=True,
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
    assert out == {"n": 60, "errors": [], "stale": ["None"]}


@needs_git
def test_the_committed_table4_records_are_current():
    """The Transformer's run and the three baselines behind reports/table4_ptb_sample.md (task parsing)."""
    if staleness.uncommitted("parsing"):
        pytest.skip("the working tree has uncommitted changes to result code")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    p = subprocess.run([sys.executable, "-c", CHECK, "reports/table4_ptb_sample/runs"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert json.loads(p.stdout) == {"n": 4, "errors": [], "stale": ["None"]}, p.stderr[-2000:]


@needs_git
def test_refactors_listed_as_neutral_keep_the_records_current_and_a_real_change_stales_them(tmp_path):
    """Both sides on the 60 committed records, in a clone: a move and a reformatting of result code, each
    committed and listed as neutral, leave them current; the label-smoothing formula changed stales them,
    uncommitted and then committed, naming the file and the commit. No record changes by a byte."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--shared", str(ROOT), str(clone)], check=True)
    for k, v in (("user.name", "t"), ("user.email", "t@t")):
        _git(clone, "config", k, v)
    before = _digest(clone / RUNS)
    assert _stale(clone)["stale"] == ["None"]

    def neutral(message: str) -> None:
        _git(clone, "commit", "-qam", message)
        with open(clone / ".result-neutral-revs", "a") as f:
            f.write(f"{_git(clone, 'rev-parse', 'HEAD')} translation,parsing  # {message}\n")
        _git(clone, "commit", "-qam", "list it as neutral")

    _git(clone, "mv", "ablate/nn/optim.py", "ablate/nn/schedule.py")
    for p in [*clone.glob("ablate/**/*.py"), *clone.glob("tests/*.py")]:
        p.write_text(p.read_text().replace("ablate.nn.optim", "ablate.nn.schedule"))
    neutral("move the optimizer's module")
    loss = clone / "ablate/nn/loss.py"
    loss.write_text(loss.read_text().replace("\n\n\n", "\n\n\n# reformatted\n\n\n", 1))
    neutral("reformat loss.py")
    assert _stale(clone)["stale"] == ["None"]

    text = loss.read_text()
    assert text.count("1.0 - eps") >= 1, "the label-smoothing formula moved: point this test at it"
    loss.write_text(text.replace("1.0 - eps", "0.99 - eps", 1))
    assert _stale(clone)["stale"] == ["code changed: uncommitted change to ablate/nn/loss.py"]
    _git(clone, "commit", "-qam", "smooth differently")
    sha = _git(clone, "rev-parse", "HEAD")[:10]
    assert _stale(clone)["stale"] == [f"code changed: {sha} (ablate/nn/loss.py)"]

    shutil.rmtree(clone / "ablate/tasks/parsing/__pycache__", ignore_errors=True)
    (clone / "ablate/tasks/parsing/note.py").write_text("# the parser's own code\n")
    _git(clone, "reset", "-q", "--hard", "HEAD~1")  # back to before the real change
    (clone / "ablate/tasks/parsing/note.py").write_text("# the parser's own code\n")
    _git(clone, "add", ".")
    _git(clone, "commit", "-qm", "a parser change, unlisted")
    assert _stale(clone)["stale"] == ["None"]  # translation runs never run the parser
    assert _digest(clone / RUNS) == before
