"""Every commit listed in .result-neutral-revs is result-neutral for the tasks it names: a tiny training run
of each at the commit and at its parent gives every number equal (tests/neutral_revs.py). Staleness
(ablate.records.staleness) trusts the list; this test is what makes the list true."""

import re
import subprocess
from pathlib import Path

import pytest
from neutral_revs import check, differences
from test_staleness import _full_history

from ablate.records.staleness import NEUTRAL_REVS, neutral_revs

ROOT = Path(__file__).resolve().parents[1]


def test_the_fingerprint_tells_a_change():
    a = {"params": 1, "steps": 2, "dev_hyp": "x", "metrics": {"dev_ppl": 5.0}, "curves": [{"step": 1}]}
    assert differences(a, dict(a)) == []
    b = {**a, "metrics": {"dev_ppl": 5.000001}, "curves": [{"step": 2}]}
    assert differences(a, b) == ["metrics.dev_ppl: 5.0 != 5.000001", "curves differ (line 0, 1 vs 1 lines)"]
    dropped = {**a, "metrics": {}, "curves": [{"step": 1}, {"step": 2}]}
    assert differences(a, dropped) == [
        "metrics.dev_ppl: 5.0 != missing",
        "curves differ (line None, 1 vs 2 lines)",
    ]


def test_a_figure_the_commit_adds_is_no_difference():
    """A new metric (an interval beside F1) leaves every figure the parent wrote as it was."""
    a = {
        "params": 1,
        "steps": 2,
        "dev_hyp": "x",
        "metrics": {"f1": 50.0},
        "curves": [{"step": 1, "f1": 50.0}],
    }
    b = {**a, "metrics": {"f1": 50.0, "f1_lo": 40.0}, "curves": [{"step": 1, "f1": 50.0, "f1_lo": 40.0}]}
    assert differences(a, b) == []


def test_every_line_names_a_whole_commit_and_known_tasks():
    """Staleness compares whole commit ids: a line with an abbreviated one would be read and match
    nothing, leaving the records it was written for stale."""
    from ablate.config import TASKS

    for n, line in enumerate(NEUTRAL_REVS.read_text().splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        assert len(words) == 2, f"{NEUTRAL_REVS.name} line {n}: '<sha> <task>[,<task>]  # why'"
        sha, tasks = words
        assert re.fullmatch("[0-9a-f]{40}", sha), f"{NEUTRAL_REVS.name} line {n}: {sha} is not a whole id"
        assert set(tasks.split(",")) <= set(TASKS), f"{NEUTRAL_REVS.name} line {n}: tasks are {list(TASKS)}"


@pytest.mark.slow
@pytest.mark.skipif(not _full_history(), reason="needs the repository's whole history")
def test_every_listed_commit_is_result_neutral(tmp_path):
    listed: dict[str, list[str]] = {}
    for task, revs in neutral_revs(NEUTRAL_REVS).items():
        for rev in revs:
            listed.setdefault(rev, []).append(task)
    assert listed, f"{NEUTRAL_REVS} lists nothing"
    cache: dict = {}
    problems = []
    try:
        for rev, tasks in sorted(listed.items()):
            problems += check(rev, sorted(tasks), tmp_path, cache)
    finally:
        subprocess.run(["git", "worktree", "prune"], cwd=ROOT, check=False)
    assert not problems, "\n".join(problems)
