"""Every anchor of .result-anchors holds: the tiny runs of its task's configurations at its revision and in
the working tree give every number equal, and its runs write the code hash the line names
(tests/result_anchors.py). Staleness (ablate.records.staleness) trusts the anchors; this test is what makes
them true, and it fails on a change that alters a result until the anchor is moved."""

import re
import subprocess
from pathlib import Path

import pytest
from result_anchors import CONFIGS, MULTI30K, PTB_SAMPLE, STUDY_OF, check_all, differences
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
    runs = [
        args
        for cfgs in CONFIGS.values()
        for name, args in cfgs.items()
        if args[0] != "ablate.baseline" and name not in STUDY_OF
    ]
    for e in sorted(experiments):
        assert any(_shortened_alike(e, args) for args in runs), f"experiment={e}: no anchor configuration"
    for name, folder in STUDY_OF.items():  # a shipped study's records: its own configuration, in its folder
        conf = [f"hydra.searchpath=[file://{ROOT / folder / 'conf'}]"]
        ran = {
            json.loads(p.read_text())["config"].get("experiment")
            for p in (ROOT / folder).rglob("record.json")
        }
        assert ran == {name} and _shortened_alike(name, [*CONFIGS["translation"][name], *conf]), folder
    shipped = {p.parents[3].name for p in ROOT.glob("studies/*/results/*/*/record.json")}
    assert shipped <= {Path(f).name for f in STUDY_OF.values()}, (
        "a shipped study with no anchor configuration"
    )
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


COMMITTED = sorted(ROOT.glob("reports/*/runs*/**/record.json"))
RECORDED_DATA = {"/work/shared/data/multi30k": MULTI30K, "/work/shared/data/ptb_sample": PTB_SAMPLE}


@pytest.mark.skipif(
    not all(Path(p).is_dir() for p in RECORDED_DATA), reason="needs the records' corpora where they were read"
)
def test_every_committed_record_keeps_its_run_id_and_reads_current():
    """Each committed record's id, recomputed from its config as written (keys of an earlier layout, such
    as data.treebank_dir and train.bleu_every) through the migration (config.RENAMED), is its folder's; its
    config reads in the current layout, the parsing task's keys typed by its own dataclass. A baseline's id
    is a hash of its own config, as written."""
    import hashlib
    import json

    from ablate.config import RENAMED, to_dataclass
    from ablate.records import identity, store
    from ablate.tasks.parsing import ParsingConfig

    assert len(COMMITTED) >= 87
    moved = 0
    for path in COMMITTED:
        written = json.loads(path.read_text())["config"]
        if "baseline" in written:
            digest = hashlib.sha256(json.dumps(written, sort_keys=True).encode()).hexdigest()[:12]
            assert f"{path.parent.parent.name}-{digest}" == path.parent.name, path
            continue
        cfg = to_dataclass(store.read_record(path)["config"])
        assert identity.run_id(cfg) == path.parent.name, path
        assert identity.run_id(to_dataclass(written)) == path.parent.name, path  # migrated by to_dataclass
        assert cfg.train.decode_every == written["train"]["bleu_every"]
        if written.get("task") == "parsing":
            assert isinstance(cfg.task_cfg, ParsingConfig), path
            assert cfg.task_cfg.treebank_dir == written["data"]["treebank_dir"]
            assert cfg.task_cfg.well_formed == written["decode"]["well_formed"]
            moved += any(
                written[old.split(".")[0]].get(old.split(".")[1]) not in (None, False, 0) for old in RENAMED
            )
    assert moved >= 4  # the migration is what keeps these ids: they set moved keys


@pytest.mark.parametrize(
    ("command", "committed"),
    [
        (["experiment=wsj_parsing_cpu_steps", "seed=1"], "parsing-b982fdae0b1f-s1"),
        (["experiment=wsj_parsing_cpu", "seed=1"], "parsing-cf0904a3bf62-s1"),
    ],
)
def test_a_committed_parsing_run_configured_with_the_new_keys_is_found_as_it_was(command, committed):
    """The same run, composed today (task_cfg.treebank_dir, task_cfg.well_formed, train.decode_every from
    its experiment), names the committed run's folder: it is found finished, not trained again."""
    if not PTB_SAMPLE.is_dir() or str(PTB_SAMPLE) != "/work/shared/data/ptb_sample":
        pytest.skip("needs the Penn Treebank sample where the committed runs read it")
    from hydra import compose, initialize_config_dir

    from ablate.config import register_configs, to_dataclass
    from ablate.records.identity import run_id
    from ablate.tasks.parsing import ParsingConfig

    register_configs()
    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        cfg = to_dataclass(compose("config", overrides=[*command, f"task_cfg.treebank_dir={PTB_SAMPLE}"]))
    assert isinstance(cfg.task_cfg, ParsingConfig) and cfg.task_cfg.well_formed
    assert run_id(cfg) == committed
    assert (ROOT / "reports/table4_ptb_sample/runs/parsing" / committed).is_dir()
