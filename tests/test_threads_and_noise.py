"""A CPU run says when its threads and the machine's other running threads do not fit the cores; the
libraries' own notices (Lightning's tips, its `srun` hint, W&B's deprecation notes) stay out of a run's
output."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

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


def test_running_threads_reads_procs_running_less_the_reader():
    stat = "cpu  1 2 3\nctxt 99\nprocs_running 5\nprocs_blocked 0\n"
    assert running_threads(stat) == 4.0
    assert running_threads("cpu 1 2 3\n") == 0.0
    assert running_threads() >= 0.0


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
