"""A CPU run says when its threads and the machine's other running threads do not fit the cores, and its
waiting threads then sleep instead of spinning; the libraries' own notices (Lightning's tips, its `srun`
hint, W&B's deprecation notes) stay out of a run's output."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ablate.cluster import cpu_load
from ablate.cluster.cpu_load import oversubscription, running_threads
from ablate.records.tracking import THIRD_PARTY_NOISE

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "threads, cores, others, advice",
    [
        (2, 2, 0.0, None),  # the machine is free
        (1, 2, 1.0, None),  # one job of 1 thread beside another: fits
        (2, 2, 2.0, "; trainer.threads=1 fits the free cores"),  # the README's two jobs of 2 threads
        (1, 2, 2.0, "; this run goes slower than on a free machine"),
        (2, 2, 1.4, "; trainer.threads=1 fits the free cores"),
        (8, 4, 0.0, "; trainer.threads=4 fits the free cores"),  # more threads than cores
        (4, 16, 13.0, "; trainer.threads=3 fits the free cores"),
    ],
)
def test_threads_that_do_not_fit_the_free_cores_are_named(threads, cores, others, advice):
    note = oversubscription(threads, cores, others)
    if advice is None:
        assert note is None
    else:
        busy = int(round(others))
        assert note.startswith(
            f"[ablate] note: {threads} thread(s) on {cores} core(s) while about {busy} other thread(s) run"
        )
        assert advice in note


def test_evaluate_names_its_own_knob():
    """ablate.evaluate's threads are set by --threads, and its note says so."""
    assert "; --threads 1 fits the free cores" in oversubscription(2, 2, 2.0, knob="--threads ")


def test_running_threads_reads_procs_running_less_the_reader(monkeypatch):
    stat = "cpu  1 2 3\nctxt 99\nprocs_running 5\nprocs_blocked 0\n"
    assert running_threads(stat) == 4.0
    assert running_threads("cpu 1 2 3\n") == 0.0
    # the machine's own /proc/stat, read five times: the median of 3, 7, 5, 9, 4 running, less the reader
    readings = iter(f"cpu  1 2 3\nprocs_running {n}\n" for n in (3, 7, 5, 9, 4))
    read = []

    class Proc(type(Path())):
        def read_text(self, *args, **kwargs):
            read.append(str(self))
            return next(readings)

    monkeypatch.setattr(cpu_load, "Path", Proc)
    assert running_threads() == 4.0 and read == ["/proc/stat"] * 5

    class NoProc(type(Path())):
        def read_text(self, *args, **kwargs):
            raise FileNotFoundError(2, "No such file or directory", str(self))

    monkeypatch.setattr(cpu_load, "Path", NoProc)
    assert running_threads() == 0.0  # no /proc: nothing known to run beside


def test_threads_asked_are_the_command_lines(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert cpu_load.threads_asked(["trainer.threads=3"]) == 3
    assert cpu_load.threads_asked(["model=A", "trainer.threads=1,4", "+trainer.devices=2"]) == 8
    assert cpu_load.threads_asked(["trainer.threads=2", "trainer.threads=1"]) == 1  # Hydra's last wins
    assert cpu_load.threads_asked(["seed=1"]) == cpu_load.cores()  # torch's default: a thread a core
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # torch's default where it is set
    assert cpu_load.threads_asked(["seed=1"]) == 1
    assert cpu_load.threads_asked(["trainer.threads=2"]) == 2


ASLEEP = "(waiting threads sleep instead of spinning: OMP_WAIT_POLICY=PASSIVE, the same sums)"
SPINNING = "(OMP_WAIT_POLICY=PASSIVE keeps waiting threads from spinning)"


@pytest.mark.parametrize(
    "argv, others, env, applied, note_ends",
    [
        ([], 1.0, {}, True, ASLEEP),  # 2 threads on 2 cores beside a busy loop: the README's command 1
        (["trainer.threads=1"], 1.0, {}, False, None),  # fits the free core: no note
        ([], 0.0, {}, False, None),  # a free machine: threads spin as OpenMP's default has them
        (["trainer.threads=3"], 0.0, {}, True, ASLEEP),  # more threads than cores
        ([], 1.0, {"OMP_WAIT_POLICY": "ACTIVE"}, False, SPINNING),  # the user's policy is kept, and named
        ([], 1.0, {"SLURM_JOB_ID": "7"}, False, SPINNING),  # a SLURM job's CPUs are its own
        ([], 1.0, {"OMP_NUM_THREADS": "1"}, False, None),  # torch's default threads set to fit the free core
    ],
)
def test_waiting_threads_sleep_where_the_load_leaves_too_few_cores(
    monkeypatch, argv, others, env, applied, note_ends
):
    for k in ("OMP_WAIT_POLICY", "SLURM_JOB_ID", "OMP_NUM_THREADS"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(cpu_load, "cores", lambda: 2)
    monkeypatch.setattr(cpu_load, "machine_load", lambda: others)
    assert cpu_load.wait_without_spinning(argv) is applied
    assert os.environ.get("OMP_WAIT_POLICY") == ("PASSIVE" if applied else env.get("OMP_WAIT_POLICY"))
    note = cpu_load.busy_cores_note(cpu_load.threads_asked(argv))
    if note_ends is None:
        assert note is None
    else:  # the one line says what the run does
        assert note.startswith("[ablate] note: ") and note.endswith(note_ends), note


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs CPU affinity (Linux)")
def test_a_run_on_too_few_cores_loads_openmp_with_waiting_threads_asleep(tmp_path):
    """2 threads on one core: OpenMP, as it reports its settings when it loads (OMP_DISPLAY_ENV), waits
    passively in the process that trains, and the run's note says so."""
    one = min(os.sched_getaffinity(0))
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "SLURM_JOB_ID")}
    cmd = [
        sys.executable, "-m", "ablate.run", "recipe=tiny", "scale=tiny", "trainer=cpu", "trainer.threads=2",
        "train.max_steps=2", "trainer.progress_bar=false", "logger=none", f"results_dir={tmp_path}/results",
        f"data.cache_dir={tmp_path}/cache",
    ]  # fmt: skip
    p = subprocess.run(
        cmd, cwd=ROOT, env={**env, "OMP_DISPLAY_ENV": "true"}, capture_output=True, text=True, timeout=300,
        preexec_fn=lambda: os.sched_setaffinity(0, {one}),
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    assert "OMP_WAIT_POLICY = 'PASSIVE'" in p.stderr and "OMP_WAIT_POLICY = 'ACTIVE'" not in p.stderr
    assert "[ablate] note: 2 thread(s) on 1 core(s) while about" in p.stdout
    assert "(waiting threads sleep instead of spinning: OMP_WAIT_POLICY=PASSIVE, the same sums)" in p.stdout


def test_a_run_prints_none_of_the_libraries_notices(tmp_path):
    """A W&B (offline) run on a machine where `srun` is on PATH: each notice of THIRD_PARTY_NOISE would
    appear without the filter (Lightning's srun hint needs only the command to exist)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "srun").chmod(0o755)
    env = dict(os.environ, WANDB_MODE="offline", PATH=f"{bin_dir}:{os.environ['PATH']}", PYTHONUNBUFFERED="1")
    env.pop("SLURM_JOB_ID", None)
    cmd = [
        sys.executable, "-m", "ablate.run", "recipe=tiny", "scale=tiny", "trainer=cpu", "trainer.threads=1",
        "trainer.progress_bar=false", "logger=wandb", f"results_dir={tmp_path}/results",
        f"data.cache_dir={tmp_path}/cache",
    ]  # fmt: skip
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    out = p.stdout + p.stderr
    assert "run        base-" in out and "W&B offline" in out
    assert [n for n in THIRD_PARTY_NOISE if n in out] == []


def test_a_resumed_runs_progress_bar_keeps_its_total(capsys):
    """A resumed run goes on inside its epoch, so Lightning sends no epoch start: the bar must get its total
    (optimizer steps x micro-batches) and its starting point when training starts, not `425/?`."""
    from types import SimpleNamespace

    from ablate.control.progress import StepProgress

    bar = StepProgress(total_micro=300)
    trainer = SimpleNamespace(
        global_step=40, lightning_module=SimpleNamespace(accumulate=2), is_global_zero=True, current_epoch=0
    )
    bar._trainer = trainer
    bar.on_train_start(trainer)
    assert (bar.train_progress_bar.total, bar.train_progress_bar.initial) == (300, 80)
    bar.train_progress_bar.close()
    capsys.readouterr()
