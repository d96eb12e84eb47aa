"""Every anchor of .result-anchors holds: the tiny runs of its task's configurations at its revision and in
the working tree give every number equal, and its runs write the code hash the line names
(tests/result_anchors.py). Staleness (ablate.records.staleness) trusts the anchors; this test is what makes
them true, and it fails on a change that alters a result until the anchor is moved."""

import re
import subprocess
from pathlib import Path

import pytest
from result_anchors import CONFIGS, MULTI30K, PTB_SAMPLE, check_all, differences
from test_staleness import _full_history

from ablate.records.staleness import ANCHORS, anchors
from ablate.tasks import BUILTIN as TASKS

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
    """A new metric (an interval beside F1) leaves every figure the anchor's run wrote as it was."""
    a = {"params": 1, "steps": 2, "dev_hyp": "x", "metrics": {"f1": 50.0}}
    a["curves"] = [{"step": 1, "f1": 50.0}]
    b = {**a, "metrics": {"f1": 50.0, "f1_lo": 40.0}, "curves": [{"step": 1, "f1": 50.0, "f1_lo": 40.0}]}
    assert differences(a, b) == []


def test_every_line_names_a_whole_commit_a_known_task_and_a_hash():
    """Anchors are matched by code hash and run at their revision: an abbreviated id or an unknown task
    would be read and hold nothing."""
    for n, line in enumerate(ANCHORS.read_text().splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        assert len(words) == 3, f"{ANCHORS.name} line {n}: '<revision> <task> <code hash>  # why'"
        sha, task, code = words
        assert re.fullmatch("[0-9a-f]{40}", sha), f"{ANCHORS.name} line {n}: {sha} is not a whole id"
        assert task in TASKS, f"{ANCHORS.name} line {n}: tasks are {list(TASKS)}"
        assert re.fullmatch("[0-9a-f]{12}", code), f"{ANCHORS.name} line {n}: {code} is not a code hash"


def test_the_anchors_cover_every_configuration_of_the_committed_records():
    """Each committed report's records ran a configuration the anchor check runs, shortened: its experiment
    is named there, or composes to the config of one that is once that configuration's keys are set alike
    (an experiment that changes only what the shortening sets, such as the length of training)."""
    import json

    records = list(ROOT.glob("reports/*/runs/*/*/record.json"))
    experiments = {json.loads(p.read_text())["config"].get("experiment") for p in records} - {None}
    assert len(records) >= 64 and {"table3_multi30k", "wsj_parsing_cpu"} <= experiments
    runs = [args for cfgs in CONFIGS.values() for args in cfgs.values() if args[0] != "ablate.baseline"]
    for e in sorted(experiments):
        assert any(_shortened_alike(e, args) for args in runs), f"experiment={e}: no anchor configuration"
    assert set(anchors(ANCHORS)) == set(TASKS)


def _shortened_alike(experiment: str, args: list[str]) -> bool:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from ablate.config import register_configs

    register_configs()  # the schema the config composes over
    over = [a for a in args if "=" in a and not a.startswith("experiment=")]
    named = next((a for a in args if a.startswith("experiment=")), None)
    if named is None:
        return False
    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        mine, theirs = (
            OmegaConf.to_container(compose("config", overrides=[e, *over]), resolve=False)
            for e in (f"experiment={experiment}", named)
        )
    return {**mine, "experiment": None} == {**theirs, "experiment": None}


@pytest.mark.slow
@pytest.mark.skipif(not _full_history(), reason="needs the repository's whole history")
@pytest.mark.skipif(not (MULTI30K.is_dir() and PTB_SAMPLE.is_dir()), reason="needs ../shared/data")
def test_every_anchor_holds(tmp_path):
    try:
        problems = check_all(None, list(CONFIGS), tmp_path)
    finally:
        subprocess.run(["git", "worktree", "prune"], cwd=ROOT, check=False)
    assert not problems, "\n".join(problems)
