"""The `ablate` sweeper (hydra_plugins/ablate_sweeper): Table 3 group letters in `-m model=...`, the sweep
configs in conf/experiment/, and the launcher configs. Fast tests need no training; the end-to-end sweep is
marked slow (`pytest -m slow tests/test_sweeps.py`)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser

# Used as `ab.name`, never imported by name: Hydra's plugin scan (on the first config loader) re-executes
# plugin modules in place, so classes and functions are looked up at call time.
import hydra_plugins.ablate_sweeper.ablate_sweeper as ab
import hydra_plugins.ablate_sweeper.rows as rows_mod

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
A = ["A1", "A2", "A3", "A4"]
B = ["B1", "B2"]
C = [f"C{i}" for i in range(1, 8)]
D = ["D1", "D2", "D3", "D4"]
TABLE3 = ["base", *A, *B, *C, *D, "E", "big"]


@pytest.fixture(scope="module")
def rows():
    return rows_mod.rows_in_dir(CONF)


def test_rows_and_groups_come_from_the_row_files(rows):
    assert list(rows)[:20] == list(rows_mod.PAPER_ROWS) == TABLE3  # the paper's order first
    assert rows["A3"] == "A" and rows["C7"] == "C" and rows["E"] == "E" and rows["big"] == "big"
    assert rows["base"] == "base" and rows["pre_ln"] == "extra"


def test_group_letters_expand_in_the_papers_order(rows):
    assert rows_mod.expand_models(["A"], rows) == A
    assert rows_mod.expand_models(["A", "B", "C"], rows) == A + B + C  # 13 jobs
    assert rows_mod.expand_models(["A", "base"], rows) == A + ["base"]
    assert rows_mod.expand_models(["base", "A", "B", "C", "D", "E", "big"], rows) == TABLE3
    assert rows_mod.expand_models(["extra"], rows) == ["pre_ln"]


def test_row_names_stay_rows(rows):
    assert rows_mod.expand_models(["A1", "A2"], rows) == ["A1", "A2"]
    assert rows_mod.expand_models(["E"], rows) == ["E"] and rows_mod.expand_models(["big"], rows) == ["big"]
    assert rows_mod.expand_models(["C3", "A", "A2"], rows) == [
        "C3",
        *A,
    ]  # given order kept, a repeat runs once


def test_unknown_name_is_a_one_line_error_with_the_choices(rows):
    with pytest.raises(rows_mod.UnknownRowError) as e:
        rows_mod.expand_models(["A", "Z9"], rows)
    msg = str(e.value)
    assert "'Z9'" in msg and "\n" not in msg
    assert "Rows: base, A1, A2" in msg and "pre_ln" in msg and "Groups: A, B, C, D, extra" in msg


def test_override_lines_other_keys_and_glob_untouched(rows):
    parser = OverridesParser.create()

    def expand(*lines):
        return rows_mod.expand_override_lines(list(lines), parser, lambda: rows)

    assert expand("model=A,base", "seed=1,2,3") == ["model=A1,A2,A3,A4,base", "seed=1,2,3"]
    assert expand("model=B") == ["model=B1,B2"]  # a single group value becomes a sweep
    assert expand("model=choice(B,E)") == ["model=B1,B2,E"]
    assert expand("model=A1,A2") == ["model=A1,A2"]
    assert expand("model=glob(*)", "model=glob(C*)") == ["model=glob(*)", "model=glob(C*)"]
    assert expand("trainer.devices=1,2", "+model.foo=1") == ["trainer.devices=1,2", "+model.foo=1"]
    with pytest.raises(rows_mod.UnknownRowError, match="model=nope"):
        expand("model=nope")


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_a_users_row_file_makes_a_new_group(tmp_path):
    _write(tmp_path / "model" / "base.yaml", (CONF / "model" / "base.yaml").read_text())
    _write(tmp_path / "model" / "A1.yaml", (CONF / "model" / "A1.yaml").read_text())
    _write(tmp_path / "model" / "X10.yaml", "defaults: [base, _self_]\nname: X10\ngroup: X\nd_ff: 10\n")
    _write(tmp_path / "model" / "X2.yaml", "defaults: [base, _self_]\nname: X2\ngroup: X\nd_ff: 2\n")
    # no group key: the group of the row it builds on, as the composed config would have it
    _write(tmp_path / "model" / "X3.yaml", "defaults: [X2, _self_]\nname: X3\nd_ff: 3\n")
    rows = rows_mod.rows_in_dir(tmp_path)
    assert rows == {"base": "base", "A1": "A", "X2": "X", "X3": "X", "X10": "X"}
    assert rows_mod.expand_models(["X", "A"], rows) == ["X2", "X3", "X10", "A1"]
    # The same through Hydra's config sources (what the sweeper reads: search path, ConfigStore).
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra._internal.utils import create_config_search_path

    loader = ConfigLoaderImpl(config_search_path=create_config_search_path(str(tmp_path)))
    assert rows_mod.rows_from_sources(loader.get_sources()) == rows


def _loader():
    """Hydra's config loader on the project's conf/. conf/config.yaml needs the `schema` node that
    ablate.config registers; importing it means importing torch (seconds), so when no test has imported it
    yet an untyped stand-in is stored instead (the sweeper and launchers only read hydra.* and trainer.*)."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra._internal.utils import create_config_search_path
    from hydra.core.config_store import ConfigStore
    from hydra.core.utils import setup_globals

    setup_globals()  # the ${now:} resolver
    if "ablate.config" in sys.modules:
        sys.modules["ablate.config"].register_configs()
    elif "schema.yaml" not in ConfigStore.instance().repo:
        stand_in = {"results_dir": "results", "seed": 1, "trainer": {"devices": 1, "num_nodes": 1}}
        ConfigStore.instance().store(name="schema", node=stand_in)
    return ConfigLoaderImpl(config_search_path=create_config_search_path(str(CONF)))


def _sweeper_run(tmp_path, arguments, params=None, max_batch_size=None):
    """The sweeper on the project's conf/, with a launcher that records the jobs instead of running them."""
    from hydra._internal.callbacks import Callbacks
    from hydra.core.utils import JobReturn, JobStatus
    from hydra.types import HydraContext, RunMode

    loader = _loader()
    config = loader.load_configuration(
        "config", [f"hydra.sweep.dir={tmp_path}/sweep", *arguments], run_mode=RunMode.MULTIRUN
    )
    assert config.hydra.sweeper._target_.endswith("AblateSweeper")  # the default through conf/config.yaml
    batches = []

    class Recorder:
        def launch(self, job_overrides, initial_job_idx):
            batches.append([list(o) for o in job_overrides])
            done = {"run_id": "x", "status": "finished"}  # what ablate.run's main returns for a finished run
            return [JobReturn(status=JobStatus.COMPLETED, _return_value=done) for _ in job_overrides]

    sweeper = ab.AblateSweeper(max_batch_size=max_batch_size, params=params)
    sweeper.hydra_context = HydraContext(config_loader=loader, callbacks=Callbacks())
    sweeper.config = config
    sweeper.launcher = Recorder()
    sweeper.sweep(list(arguments))
    return batches


def test_sweeper_makes_the_cartesian_product_and_keeps_basic_sweeper_options(tmp_path):
    batches = _sweeper_run(
        tmp_path, ["model=A,B,C", "seed=1,2", "scale=tiny", "recipe=tiny"], max_batch_size=5
    )
    jobs = [j for b in batches for j in b]
    assert [len(b) for b in batches] == [5, 5, 5, 5, 5, 1]  # max_batch_size kept
    assert jobs[:3] == [
        ["model=A1", "seed=1", "scale=tiny", "recipe=tiny"],
        ["model=A1", "seed=2", "scale=tiny", "recipe=tiny"],
        ["model=A2", "seed=1", "scale=tiny", "recipe=tiny"],
    ]
    assert [j[0] for j in jobs[::2]] == [f"model={r}" for r in A + B + C]
    # hydra.sweeper.params (what the experiment configs use): groups there too; the command line wins.
    jobs = _sweeper_run(tmp_path, ["seed=3"], params={"model": "D,E", "seed": "1,2"})[0]
    assert jobs == [[f"model={r}", "seed=3"] for r in [*D, "E"]]
    with pytest.raises(rows_mod.UnknownRowError, match="'F'"):
        _sweeper_run(tmp_path, ["model=A,F"])


def test_a_single_group_value_composes_for_multirun_and_fails_for_one_run(tmp_path):
    """`-m model=B` is no sweep to Hydra: the sweep's own config is composed with it first (a stand-in row
    from the ablaterows:// source), then the sweeper makes B1, B2. Without -m, the stand-in's name fails."""
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    assert _sweeper_run(tmp_path, ["model=B", "seed=2"]) == [[["model=B1", "seed=2"], ["model=B2", "seed=2"]]]
    cfg = _loader().load_configuration("config", ["model=C"], run_mode=RunMode.RUN)
    with pytest.raises(Exception, match=r"model=C is a Table 3 group \(C1 C2 C3 C4 C5 C6 C7\), not a row"):
        OmegaConf.to_container(cfg.model, resolve=True)
    # The stand-ins are never listed: glob(*), --help and the sweeper see the row files only.
    assert _loader().get_group_options("model") == sorted(rows_mod.rows_in_dir(CONF))


@pytest.mark.parametrize(
    "name,rows",
    [
        ("table3_A", A),
        ("table3_B", B),
        ("table3_C", C),
        ("table3_D", D),
        ("table3_E", ["E"]),
        ("table3_big", ["big"]),
        ("table3", TABLE3),
    ],
)
def test_experiment_sweeps_cover_each_group(rows, name):
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(CONF / "experiment" / f"{name}.yaml")
    assert (
        cfg.experiment == name
        and f"-m experiment={name}" in (CONF / "experiment" / f"{name}.yaml").read_text()
    )
    assert (
        rows_mod.expand_models(cfg.hydra.sweeper.params.model.split(","), rows_mod.rows_in_dir(CONF)) == rows
    )


def test_table3_seeds_is_every_row_times_three_seeds():
    from omegaconf import OmegaConf

    params = OmegaConf.load(CONF / "experiment" / "table3_seeds.yaml").hydra.sweeper.params
    assert rows_mod.expand_models(params.model.split(","), rows_mod.rows_in_dir(CONF)) == TABLE3
    assert params.seed == "1,2,3"


def test_launcher_configs_resolve(tmp_path):
    """Both launcher files compose and resolve against the run config; SLURM's request is derived per
    member at launch (tests/test_slurm.py), so its keys stay null unless set."""
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    loader = _loader()

    def launcher(*overrides):
        cfg = loader.load_configuration("config", list(overrides), run_mode=RunMode.MULTIRUN)
        return OmegaConf.to_container(cfg.hydra.launcher, resolve=True)

    j = launcher("hydra/launcher=joblib_cpu", "model=A1,A2")
    assert j["_target_"].endswith("JoblibLauncher") and j["n_jobs"] == 2
    os.environ["ABLATE_SLURM_PARTITION"] = "gpu-test"
    try:
        s = launcher("hydra/launcher=slurm", "trainer.devices=4", "trainer.num_nodes=2")
    finally:
        del os.environ["ABLATE_SLURM_PARTITION"]
    assert s["_target_"].endswith("SlurmLauncher") and s["partition"] == "gpu-test"
    assert s["tasks_per_node"] is s["gpus_per_node"] is s["cpus_per_task"] is s["nodes"] is None
    assert launcher("hydra/launcher=slurm")["partition"] is None


@pytest.mark.slow
def test_group_sweep_end_to_end(tmp_path):
    env = dict(os.environ, WANDB_MODE="offline", PYTHONUNBUFFERED="1")
    cmd = [
        sys.executable,
        "-m",
        "ablate.run",
        "-m",
        "model=B",
        "scale=tiny",
        "recipe=tiny",
        "logger=none",
        f"results_dir={tmp_path}/results",
        f"data.cache_dir={tmp_path}/cache",
    ]
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    recs = [json.loads(f.read_text()) for f in (tmp_path / "results").rglob("record.json")]
    assert sorted(r["row"] for r in recs) == ["B1", "B2"]
    assert all(r["status"] == "finished" for r in recs)
    assert {r["config"]["model"]["d_k"] for r in recs} == {16, 32}


@pytest.mark.parametrize("launcher", ["basic", "joblib_cpu"])
def test_a_finished_sweep_run_again_starts_nothing(tmp_path, launcher):
    """The sweeper skips a member whose run is finished before any launcher sees it: no job, no process;
    the closing line counts it as already finished. A new member beside it is the only one launched."""
    env = dict(os.environ, WANDB_MODE="offline")
    args = ["recipe=tiny", "scale=tiny", "trainer=cpu", "trainer.threads=1", "logger=none",
            "trainer.progress_bar=false", f"hydra/launcher={launcher}", f"results_dir={tmp_path}/results",
            f"data.cache_dir={tmp_path}/cache"]  # fmt: skip

    def sweep(rows: str) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "ablate.run", "-m", f"model={rows}", *args]
        return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)

    assert sweep("base,A1").returncode == 0
    written = {p: p.read_bytes() for p in (tmp_path / "results").rglob("record.json")}
    p = sweep("base,A1")
    assert p.returncode == 0, p.stderr[-3000:]
    assert "[ablate] sweep of 2 runs: 2 already finished" in p.stdout
    assert "launching" not in (p.stdout + p.stderr).lower() and "already finished:" not in p.stdout
    p = sweep("A1,A2")
    assert p.returncode == 0, p.stderr[-3000:]
    assert "[ablate] sweep of 2 runs: 1 finished, 1 already finished" in p.stdout
    assert all(path.read_bytes() == data for path, data in written.items())


@pytest.mark.parametrize(
    "params, arguments",
    [
        ({}, ["model=A1,B1", "seed=1,2,3", "scale=tiny"]),
        ({"model": "A1,A2", "seed": "1,2"}, ["seed=3", "recipe=tiny,cpu"]),  # the command line's key wins
        ({}, ["seed=range(1,4)", "model=glob(A*)", "+train.warmup_steps=10,20"]),
    ],
)
def test_the_jobs_are_hydras_basic_product(params, arguments):
    """The jobs the sweeper makes (on Hydra's public Sweeper) are the ones Hydra's own basic sweeper makes
    of the same overrides, in the same order: the independent path is Hydra's internal class itself."""
    from hydra._internal.callbacks import Callbacks
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.types import HydraContext

    loader = _loader()
    sweeper = ab.AblateSweeper(params=params)
    sweeper.hydra_context = HydraContext(config_loader=loader, callbacks=Callbacks())
    parser = OverridesParser.create(config_loader=loader)
    lines = [*(f"{k}={v}" for k, v in params.items()), *arguments]
    (hydras,) = BasicSweeper.split_arguments(parser.parse_overrides(lines), None)
    assert sweeper.jobs(arguments) == hydras and len(hydras) > 1
    assert [len(b) for b in sweeper.batches(hydras)] == [len(hydras)]
    sweeper.max_batch_size = 4
    assert [len(b) for b in sweeper.batches(hydras)] == [4] * (len(hydras) // 4) + [len(hydras) % 4] * (
        len(hydras) % 4 > 0
    )
