"""hydra/launcher=slurm against a real SLURM cluster (tests/slurm/cluster.sh: Debian's slurm-wlm, one node,
started by .ci/run), and the pieces it is built of against hand-written cluster answers.

Slow tests need the cluster and skip with the reason where it is not up. What they hold to: a 2-row array
sweep finishes; 2 devices run as 2 tasks of one job and match the same run on local processes; a requeue
and a 1-minute time limit end in a finished run with exactly the metrics of an uninterrupted one; scancel
leaves `cancelled` and a non-zero sweep; a sweep whose members all fail exits non-zero under every
launcher.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ablate.cluster import slurm_job, slurm_request
from ablate.jobs.sweep import summary
from ablate.records.status import TRANSITIONS

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = "bash tests/slurm/cluster.sh up"

# -- what the launcher asks for (no cluster) -----------------------------------------------------------

SINFO = """gpu|g1|64|512000|gpu:a100:8(S:0-1)|2-00:00:00
gpu|g2|64|512000|gpu:a100:8(S:0-1)|2-00:00:00
cpu*|c1|32|128000|(null)|infinite
cpu*|c2|32|128000|(null)|infinite
"""


def test_sinfo_is_read_into_partitions():
    parts = slurm_request.parse_sinfo(SINFO)
    assert set(parts) == {"gpu", "cpu"} and parts["cpu"].default and not parts["gpu"].default
    assert parts["gpu"].max_minutes == 2 * 24 * 60 and parts["cpu"].max_minutes is None
    assert [(n.cpus, n.gpus, n.mem_mb) for n in parts["gpu"].nodes] == [(64, 8, 512000)] * 2
    assert slurm_request.gpus_in("gpu:2,shard:4") == 2 and slurm_request.gpus_in("(null)") == 0
    assert slurm_request.parse_minutes("30:00") == 30 and slurm_request.parse_minutes("1:00:00") == 60


@pytest.mark.parametrize(
    "trainer, part, gpus, tasks, cpus",
    [
        ({"accelerator": "cpu", "devices": 1, "threads": None}, "cpu", 0, 1, 8),
        ({"accelerator": "cpu", "devices": 2, "threads": 3}, "gpu", 0, 2, 3),  # CPU run: no GPU asked
        ({"accelerator": "gpu", "devices": 8, "threads": None}, "gpu", 8, 8, 8),
        ({"accelerator": "auto", "devices": 4, "threads": None}, "gpu", 4, 4, 8),
        ({"accelerator": "auto", "devices": 4, "threads": None}, "cpu", 0, 4, 8),
        ({"accelerator": "gpu", "devices": 16, "threads": None}, "gpu", 16, 16, 4),  # 64 CPUs / 16 tasks
    ],
)
def test_the_request_follows_the_trainer(trainer, part, gpus, tasks, cpus):
    p = slurm_request.parse_sinfo(SINFO)[part]
    req = slurm_request.resolve({"timeout_min": 60}, {"num_nodes": 1, **trainer}, p)
    assert (req.gpus_per_node, req.tasks_per_node, req.cpus_per_task, req.nodes) == (gpus, tasks, cpus, 1)


@pytest.mark.parametrize(
    "launcher, trainer, part, message",
    [
        ({"cpus_per_task": 40}, {}, "cpu", "hydra.launcher.cpus_per_task=40: .* at most 32 CPUs"),
        ({}, {"accelerator": "gpu"}, "cpu", "hydra.launcher.gpus_per_node=1: no node has that many GPUs"),
        ({"mem_gb": 200}, {}, "cpu", "hydra.launcher.mem_gb=200: no node has that much memory"),
        ({}, {"num_nodes": 3}, "gpu", "trainer.num_nodes=3: only 2 node"),
        ({"timeout_min": 4320}, {}, "gpu", "hydra.launcher.timeout_min=4320: .* at most 2880 minutes"),
    ],
)
def test_a_request_no_node_can_hold_is_refused_naming_the_key(launcher, trainer, part, message):
    p = slurm_request.parse_sinfo(SINFO)[part]
    t = {"accelerator": "cpu", "devices": 1, "num_nodes": 1, "threads": 1, **trainer}
    req = slurm_request.resolve({"timeout_min": 60, **launcher}, t, p)
    with pytest.raises(slurm_request.SlurmError, match=message):
        slurm_request.check(req, p)


def test_partition_by_name_or_default():
    parts = slurm_request.parse_sinfo(SINFO)
    assert slurm_request.pick_partition(parts, None).name == "cpu"
    with pytest.raises(slurm_request.SlurmError, match="partition=big: no such partition .*gpu, cpu"):
        slurm_request.pick_partition(parts, "big")


def test_multi_node_request_becomes_the_sbatch_script(tmp_path, monkeypatch):
    """trainer.num_nodes=2 with 4 GPUs a node: the script submitit writes asks for exactly that, with the
    warning signal, requeueing and the delay the job's stop is timed by."""
    submitit = pytest.importorskip("submitit")
    # the script is only written, never submitted: no `srun` needed on this machine
    monkeypatch.setattr(submitit.SlurmExecutor, "affinity", classmethod(lambda cls: 1))
    from hydra_plugins.ablate_slurm.slurm_launcher import AblateSlurmLauncher

    p = slurm_request.parse_sinfo(SINFO)["gpu"]
    trainer = {"accelerator": "gpu", "devices": 4, "num_nodes": 2, "threads": None}
    launcher = AblateSlurmLauncher(timeout_min=600, signal_delay_s=90, name="ablate", array_parallelism=8)
    req = slurm_request.resolve(launcher.params, trainer, p)
    slurm_request.check(req, p)
    ex = submitit.AutoExecutor(folder=tmp_path, cluster="slurm")
    ex.update_parameters(**launcher._sbatch(req))
    script = ex._executor._make_submission_file_text("python -m x", "%j")
    for line in (
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=4",
        "#SBATCH --gpus-per-node=4",
        "#SBATCH --cpus-per-task=8",
        "#SBATCH --partition=gpu",
        "#SBATCH --time=600",
        "#SBATCH --signal=USR2@90",
        "#SBATCH --requeue",
        f"export {slurm_job.DELAY_ENV}=90",
    ):
        assert line in script, line


def test_a_warning_as_long_as_the_job_is_refused_and_extra_parameters_reach_sbatch(tmp_path, monkeypatch):
    """signal_delay_s >= timeout_min: refused in one line naming both keys; the documented syntax for
    anything else (+hydra.launcher.additional_parameters.<key>=<value>) reaches the sbatch script."""
    with pytest.raises(slurm_request.SlurmError, match=r"signal_delay_s=120: .*timeout_min=2, 120 s\)"):
        slurm_request.check_warning({"signal_delay_s": 120, "timeout_min": 2})
    slurm_request.check_warning({"signal_delay_s": 119, "timeout_min": 2})
    submitit = pytest.importorskip("submitit")
    from hydra import compose, initialize_config_dir

    from ablate.config import register_configs
    from hydra_plugins.ablate_slurm.slurm_launcher import AblateSlurmLauncher

    register_configs()
    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        extra = "+hydra.launcher.additional_parameters.mail_type=END"
        cfg = compose("config", ["hydra/launcher=slurm", extra], return_hydra_config=True)
    params = dict(cfg.hydra.launcher)
    assert params["additional_parameters"] == {"mail_type": "END"}
    monkeypatch.setattr(submitit.SlurmExecutor, "affinity", classmethod(lambda cls: 1))
    launcher = AblateSlurmLauncher(**{k: v for k, v in params.items() if k != "_target_"})
    trainer = {"accelerator": "cpu", "devices": 1, "num_nodes": 1, "threads": 1}
    req = slurm_request.resolve(launcher.params, trainer, slurm_request.parse_sinfo(SINFO)["gpu"])
    ex = submitit.AutoExecutor(folder=tmp_path, cluster="slurm")
    ex.update_parameters(**launcher._sbatch(req))
    assert "#SBATCH --mail-type=END" in ex._executor._make_submission_file_text("python -m x", "%j")


def test_the_sweep_line_names_what_did_not_finish():
    line, ok = summary([{"run_id": "a", "status": "finished"}, {"run_id": "b", "status": "cancelled"}, None])
    assert not ok and line == "sweep of 3 runs: 1 finished, 1 cancelled (b), 1 failed (?)"
    assert summary([{"run_id": "a", "status": "finished"}]) == ("sweep of 1 run: 1 finished", True)
    skipped = {"run_id": "b", "status": "finished", "skipped": True}
    assert summary([skipped, skipped]) == ("sweep of 2 runs: 2 already finished", True)
    line, ok = summary([{"run_id": "a", "status": "finished"}, skipped])
    assert ok and line == "sweep of 2 runs: 1 finished, 1 already finished"


# -- what a job does after a stop on a signal (SLURM's answers written by hand) --------------------------


@pytest.fixture
def job(monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "41")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "2")
    calls = []

    def run(cmd, **_):
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(slurm_job.subprocess, "run", run)
    j = slurm_job.Job()
    return j, calls


@pytest.mark.parametrize(
    "answer, warned, last, status, requeued",
    [
        ({"JobState": "RUNNING", "Restarts": "2"}, "SIGUSR2", 10, "timed_out", True),  # the warning
        ({"JobState": "COMPLETING", "Reason": "TimeLimit", "Restarts": "2"}, None, 10, "timed_out", True),
        ({"JobState": "RUNNING", "Restarts": "2"}, None, 10, "preempted", True),  # a site's SIGTERM
        ({"JobState": "COMPLETING", "Restarts": "3"}, None, 10, "preempted", False),  # SLURM requeues it
        ({"JobState": "COMPLETING", "Reason": "None", "Restarts": "2"}, None, 10, "cancelled", False),
        ({"JobState": "RUNNING", "Restarts": "2"}, "SIGUSR2", 50, "timed_out", False),  # no progress
        ({}, "SIGUSR2", 10, "preempted", False),  # scontrol gave no answer: never called cancelled
    ],
)
def test_a_stopped_job_is_requeued_left_or_cancelled(
    job, monkeypatch, answer, warned, last, status, requeued
):
    j, calls = job
    j.warned = warned
    monkeypatch.setattr(slurm_job, "show_job", lambda jid: answer)
    name, reason = j._decide(step=50, last=last)
    assert TRANSITIONS[name][1] == status, reason
    assert (["scontrol", "requeue", "41"] in calls) == requeued
    if last == 50:
        assert "no training step in this allocation" in reason


def test_array_members_are_requeued_by_their_own_id(monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "57")
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "55")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "2")
    assert slurm_job.job_id() == "55_2"


def test_a_missing_submitit_is_named_in_one_line(tmp_path):
    (tmp_path / "submitit.py").write_text("raise ImportError('no submitit here')\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path), WANDB_MODE="offline")
    cmd = [sys.executable, "-m", "ablate.run", "-m", "model=base", "hydra/launcher=slurm"]
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    assert p.stderr.strip() == "error: hydra/launcher=slurm needs submitit: pip install -e '.[slurm]'"


# -- the real cluster -----------------------------------------------------------------------------------


def _cluster_problem() -> str | None:
    if shutil.which("sinfo") is None:
        return f"no SLURM client here ({CLUSTER} installs and starts a one-node cluster)"
    p = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, timeout=30)
    if p.returncode or not re.search(r"idle|mix|alloc", p.stdout):
        return f"SLURM is not up ({(p.stderr or p.stdout).strip()[:120]}); {CLUSTER}"
    return None


@pytest.fixture(scope="module")
def cluster():
    """Skips where the cluster is not up, except in CI (CI=true): CI has root and Debian's packages, so
    there a cluster that did not start is a failure, never a skipped guarantee."""
    if problem := _cluster_problem():
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI: {problem}")
        pytest.skip(problem)


# Timeouts are several times what a test takes beside the other worker's tests (CI runs both suites a worker
# a core): a slow machine makes a test slow, never wrong.
TINY = ["recipe=tiny", "scale=tiny", "trainer=cpu", "trainer.threads=1", "logger=none"]
LONG = [*TINY, "train.max_steps=4000", "trainer.progress_bar=false"]  # about 90 s of training


def _cmd(tmp: Path, *args: str, launcher: str = "slurm") -> list[str]:
    return [
        sys.executable, "-m", "ablate.run", "-m", f"hydra/launcher={launcher}", *args,
        f"results_dir={tmp}/results", f"data.cache_dir={tmp}/cache",
    ]  # fmt: skip


def _run(tmp: Path, *args: str, launcher: str = "slurm", timeout: int = 2400) -> subprocess.CompletedProcess:
    env = dict(os.environ, WANDB_MODE="offline")
    return subprocess.run(
        _cmd(tmp, *args, launcher=launcher),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _job_logs(tmp: Path) -> str:
    """Every SLURM job log (submitit's <job>_<task>_log.out / .err) the sweep under `tmp` wrote."""
    logs = sorted(tmp.rglob("*_log.*"))
    assert logs, f"no job logs under {tmp}"
    return "".join(p.read_text(errors="replace") for p in logs)


def _records(tmp: Path) -> dict[str, dict]:
    return {r["run_id"]: r for r in map(_read, (tmp / "results").rglob("record.json"))}


def _read(p: Path) -> dict:
    return json.loads(p.read_text())


def _curves(run: dict) -> list[dict]:
    """A run's curves without wall-clock times (which differ between two runs of the same computation)."""
    folder = Path(run["_dir"])
    rows = [json.loads(line) for line in (folder / "curves.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k != "time_s"} for r in rows]


def _only(tmp: Path) -> dict:
    (path,) = (tmp / "results").rglob("record.json")
    return {**_read(path), "_dir": str(path.parent)}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The LONG run on local processes, started at once and read when a test needs it (it runs beside
    the SLURM job of the test that asks first)."""
    tmp = tmp_path_factory.mktemp("uninterrupted")
    env = dict(os.environ, WANDB_MODE="offline")
    cmd = [sys.executable, "-m", "ablate.run", *LONG, f"results_dir={tmp}/results", f"data.cache_dir={tmp}/c"]
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )

    def result() -> dict:
        _, err = proc.communicate(timeout=2400)
        assert proc.returncode == 0, err[-2000:]
        return _only(tmp)

    return result


def _same_run(a: dict, b: dict, stops: list[int] = ()) -> None:
    """The same run: final figures equal, curves equal. A stop that lands on a dev evaluation's step
    (train.val_every) checkpoints before that evaluation and the resumed run does not make it up: that one
    dev point may be missing (docs/reliability.md), nothing else."""
    assert a["run_id"] == b["run_id"] and a["status"] == b["status"] == "finished"
    assert a["steps"] == b["steps"]
    for k in ("dev_ppl", "dev_bleu", "dev_nll_sum", "dev_tokens"):
        assert a["metrics"][k] == b["metrics"][k], k
    ours = _curves(a)
    lost = [r for r in _curves(b) if "dev_ppl" in r and r["step"] in stops and r not in ours]
    assert ours == [r for r in _curves(b) if r not in lost]


def _start(tmp: Path, *args: str) -> subprocess.Popen:
    env = dict(os.environ, WANDB_MODE="offline")
    return subprocess.Popen(
        _cmd(tmp, *args), cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _wait_for_step(tmp: Path, step: int, timeout: float = 1200) -> str:
    """Wait until the run's curve passed `step`; returns its SLURM job id (from its record)."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        for c in (tmp / "results").rglob("curves.jsonl"):
            rows = [json.loads(line) for line in c.read_text().splitlines() if line.strip()]
            if rows and rows[-1]["step"] >= step:
                out = subprocess.run(
                    ["squeue", "-h", "-o", "%i"], capture_output=True, text=True
                ).stdout.split()
                assert len(out) == 1, out
                return out[0]
        time.sleep(0.5)
    raise AssertionError(f"the run did not reach step {step} in {timeout} s")


@pytest.mark.slow
def test_a_two_row_array_sweep_finishes(cluster, tmp_path):
    t0 = time.time()
    p = _run(tmp_path, "model=base,A1", *TINY)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "sweep of 2 runs: 2 finished" in p.stdout
    jobs = re.findall(r"SLURM job (\d+)_(\d+)", p.stdout)
    assert len(jobs) == 2 and jobs[0][0] == jobs[1][0]  # one array
    recs = _records(tmp_path)
    assert sorted(r["row"] for r in recs.values()) == ["A1", "base"]
    assert all(r["status"] == "finished" for r in recs.values())
    print(f"2-row sweep, submit to records: {time.time() - t0:.1f} s")


@pytest.mark.slow
def test_two_devices_run_as_two_tasks_of_one_job(cluster, tmp_path):
    """trainer.devices=2: two SLURM tasks (ranks by SLURM_PROCID, DDP over gloo); the same numbers as the
    same run on two local processes (cluster.ddp.spawn_job)."""
    args = ["model=base", *TINY, "trainer.devices=2", "train.max_tokens=512"]
    p = _run(tmp_path / "slurm", *args)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "1 node(s) x 2 task(s) x 1 CPUs" in p.stdout
    q = _run(tmp_path / "local", *args, launcher="basic")
    assert q.returncode == 0, q.stderr[-3000:]
    a, b = _only(tmp_path / "slurm"), _only(tmp_path / "local")
    assert a["world_size"] == b["world_size"] == 2
    _same_run(a, b)


@pytest.mark.slow
def test_two_nodes_run_as_one_ddp_job(cluster, tmp_path):
    """trainer.num_nodes=2: one job over two nodes (cluster.sh up --nodes 2 starts two slurmd on this
    machine), one rank on each; the same numbers as two ranks on one node."""
    nodes = subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True).stdout.split()
    if len(set(nodes)) < 2:
        pytest.skip("the test cluster has one node (bash tests/slurm/cluster.sh up --nodes 2)")
    common = ["model=base", *TINY, "train.max_tokens=512"]
    p = _run(tmp_path / "two", *common, "trainer.num_nodes=2")
    assert p.returncode == 0, p.stderr[-3000:]
    assert "2 node(s) x 1 task(s) x 1 CPUs" in p.stdout
    q = _run(tmp_path / "one", *common, "trainer.devices=2")
    assert q.returncode == 0, q.stderr[-3000:]
    a, b = _only(tmp_path / "two"), _only(tmp_path / "one")
    assert a["world_size"] == b["world_size"] == 2
    assert a["metrics"]["dev_nll_sum"] == b["metrics"]["dev_nll_sum"]
    assert a["metrics"]["dev_bleu"] == b["metrics"]["dev_bleu"]
    assert _curves(a) == _curves(b)


@pytest.mark.slow
def test_scontrol_requeue_mid_run_ends_with_the_uninterrupted_metrics(cluster, tmp_path, uninterrupted):
    proc = _start(tmp_path, *LONG)
    jid = _wait_for_step(tmp_path, 400)
    subprocess.run(["scontrol", "requeue", jid], check=True)
    out, err = proc.communicate(timeout=2400)
    assert proc.returncode == 0, err[-3000:]
    run = _only(tmp_path)
    lines = [json.loads(x) for x in (Path(run["_dir"]) / slurm_job.ALLOCATIONS).read_text().splitlines()]
    assert [x["status"] for x in lines] == ["preempted", "finished"], lines
    assert "SLURM requeues job" in lines[0]["reason"] and lines[0]["step"] >= 400
    _same_run(run, uninterrupted(), stops=[lines[0]["step"]])


@pytest.mark.slow
def test_a_one_minute_time_limit_finishes_by_itself(cluster, tmp_path, uninterrupted):
    """A run of about a minute of training under a 1-minute limit: stopped at a checkpoint before each
    limit, requeued, resumed, until finished: the same metrics and curves as the uninterrupted run."""
    p = _run(tmp_path, *LONG, "hydra.launcher.timeout_min=1", "hydra.launcher.signal_delay_s=20")
    assert p.returncode == 0, p.stderr[-3000:]
    run = _only(tmp_path)
    lines = [json.loads(x) for x in (Path(run["_dir"]) / slurm_job.ALLOCATIONS).read_text().splitlines()]
    assert len(lines) >= 2 and lines[-1]["status"] == "finished", lines
    assert all(x["status"] == "timed_out" and "requeued" in x["reason"] for x in lines[:-1]), lines
    steps = [x["step"] for x in lines]
    assert steps == sorted(steps) and len(set(steps)) == len(steps)  # each allocation trained
    print(f"time-limit run: {len(lines)} allocations, stops at steps {steps}")
    _same_run(run, uninterrupted(), stops=steps[:-1])
    # one stop path: Lightning's SLURM auto-requeue is off, not silently blocked
    logs = _job_logs(tmp_path)
    assert "auto-requeueing enabled" not in logs and "exists and is not empty" not in logs
    # in our words: where each allocation stopped, that the job was requeued, where the next one resumed
    assert "stopped at step" in logs and "requeued" in logs and "resuming from" in logs
    assert "\r" not in logs


@pytest.mark.slow
def test_a_two_task_job_under_a_time_limit_finishes_by_itself(cluster, tmp_path):
    """DDP (two tasks) under a 1-minute limit: the ranks agree on one step boundary to stop at before the
    limit, checkpoint there, and the job is requeued; the next allocation resumes there, until finished.
    Up to the resume the curves are the uninterrupted run's, less a dev evaluation due at the stop step;
    after it they may differ within seed noise, as every rank takes rank 0's random state from the
    checkpoint (docs/reliability.md)."""
    common = [*TINY, "trainer.devices=2", "train.max_tokens=512", "train.max_steps=2500"]
    common.append("trainer.progress_bar=false")
    p = _run(tmp_path / "limit", *common, "hydra.launcher.timeout_min=1", "hydra.launcher.signal_delay_s=20")
    assert p.returncode == 0, p.stderr[-3000:]
    q = _run(tmp_path / "plain", *common, launcher="basic")
    assert q.returncode == 0, q.stderr[-3000:]
    run, plain = _only(tmp_path / "limit"), _only(tmp_path / "plain")
    assert run["status"] == "finished" and run["steps"] == plain["steps"] == 2500
    lines = [json.loads(x) for x in (Path(run["_dir"]) / slurm_job.ALLOCATIONS).read_text().splitlines()]
    assert len(lines) >= 2 and lines[-1]["status"] == "finished", lines
    assert all(x["status"] == "timed_out" and "requeued" in x["reason"] for x in lines[:-1]), lines
    assert "auto-requeueing enabled" not in _job_logs(tmp_path / "limit")
    first_stop = lines[0]["step"]
    upto = [r for r in _curves(run) if r["step"] <= first_stop]
    # a dev evaluation due at the stop step comes after its checkpoint and is not made up on resume
    # (ablate.control.stop, docs/reliability.md): the curve lacks that one dev point, and only that one
    due = [
        r
        for r in _curves(plain)
        if r["step"] < first_stop or (r["step"] == first_stop and "dev_ppl" not in r)
    ]
    assert upto == due and len(upto) > 10


def _jobs_in_sacct() -> int:
    p = subprocess.run(["sacct", "-X", "-n", "-a", "-S", "2020-01-01", "-o", "JobID"], capture_output=True,
                       text=True, timeout=60)  # fmt: skip
    return len([x for x in p.stdout.split() if x.strip()])


@pytest.mark.slow
def test_a_finished_sweep_run_again_submits_nothing(cluster, tmp_path):
    """Re-running a finished 2-row sweep submits no SLURM job (sacct counts none new) and says so; a sweep
    with one finished and one new member submits one."""
    p = _run(tmp_path, "model=base,A1", *TINY)
    assert p.returncode == 0, p.stderr[-3000:]
    before = _jobs_in_sacct()
    p = _run(tmp_path, "model=base,A1", *TINY)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "[ablate] sweep of 2 runs: 2 already finished" in p.stdout and "SLURM job" not in p.stdout
    assert _jobs_in_sacct() == before
    p = _run(tmp_path, "model=base,A2", *TINY)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "[ablate] sweep of 2 runs: 1 finished, 1 already finished" in p.stdout
    assert p.stdout.count("SLURM job") == 1 and _jobs_in_sacct() == before + 1


@pytest.mark.slow
def test_scancel_leaves_the_run_cancelled_and_the_sweep_fails(cluster, tmp_path):
    proc = _start(tmp_path, *LONG)
    jid = _wait_for_step(tmp_path, 200)
    subprocess.run(["scancel", jid], check=True)
    out, err = proc.communicate(timeout=1200)
    run = _only(tmp_path)
    assert proc.returncode == 1, err[-3000:]
    assert run["status"] == "cancelled", run.get("reason")
    assert f"1 cancelled ({run['run_id']})" in err


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["basic", "joblib_cpu", "gpus", "slurm"])
def test_a_sweep_whose_members_all_fail_exits_non_zero(tmp_path, launcher):
    """C1 and C2 are refused under scale=tiny (too shallow for their N): every member fails."""
    if launcher == "slurm" and (problem := _cluster_problem()):
        pytest.skip(problem)
    extra = ["trainer.device_pool=[5,7]", "hydra.launcher.n_jobs=2"] if launcher == "gpus" else []
    p = _run(tmp_path, "model=C1,C2", *TINY, *extra, launcher=launcher)
    assert p.returncode == 1, p.stderr[-3000:]
    (line,) = [x for x in p.stderr.splitlines() if "sweep of 2 runs" in x]
    assert re.fullmatch(r"\[ablate\] sweep of 2 runs: 2 failed \(C1-\w+-s1, C2-\w+-s1\)", line)


def test_a_member_is_submitits_checkpointable_and_the_launcher_copies_none_of_it():
    """The job submitit runs is a `SweepMember`, a submitit Checkpointable: its requeue resubmits the same
    member with the same arguments through submitit's own `checkpoint`; the launcher itself is no job."""
    submitit = pytest.importorskip("submitit")
    import cloudpickle

    from ablate.cluster.slurm_member import SweepMember
    from hydra_plugins.ablate_slurm.slurm_launcher import AblateSlurmLauncher

    assert SweepMember.checkpoint is submitit.helpers.Checkpointable.checkpoint
    assert not hasattr(AblateSlurmLauncher, "checkpoint") and not callable(AblateSlurmLauncher(name="x"))
    member = cloudpickle.loads(cloudpickle.dumps(SweepMember(None, None, {"a": 1})))
    again = member.checkpoint(["model=A1"], "hydra.sweep.dir", 3, {})
    assert isinstance(again, submitit.helpers.DelayedSubmission) and again.function is member
    assert again.args == (["model=A1"], "hydra.sweep.dir", 3, {}) and member.config == {"a": 1}


def test_a_warning_that_comes_while_the_job_loads_is_kept_and_times_the_stop():
    """SLURM may send the warning up to a minute early: one that comes while submitit still unpickles the
    member (before any handler of submitit's or ours) is kept, not SIGUSR2's default action (the job ends
    FAILED, as the bare process below does), and times the stop once the member runs."""
    env = {**os.environ, "SLURM_JOB_ID": "123", slurm_job.DELAY_ENV: "20"}
    env.pop("SLURM_ARRAY_JOB_ID", None)
    bare = subprocess.run([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGUSR2)"],
                          env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert bare.returncode == -signal.SIGUSR2
    code = (
        "import os, signal, time\n"
        "from ablate.cluster import slurm_job, slurm_member\n"
        "os.kill(os.getpid(), signal.SIGUSR2)\n"
        "print(slurm_member.EARLY_WARNINGS)\n"
        "end = time.strftime('%Y-%m-%dT%H:%M:%S', time.localtime(time.time() + 50))\n"
        "slurm_job.show_job = lambda jid: {'EndTime': end}\n"
        "slurm_job.job().install(slurm_member.EARLY_WARNINGS)\n"
    )
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=120)  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    lines = p.stdout.splitlines()
    assert lines[0] == f"[{int(signal.SIGUSR2)}]"
    assert re.fullmatch(r"\[ablate\] SLURM SIGUSR2: stopping at a checkpoint in (29|30) s", lines[1]), lines
