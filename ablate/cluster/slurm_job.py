"""A run inside a SLURM job: the warning before the time limit, and what follows a stop on a signal.

Training stops only at an optimizer-step boundary that every rank agrees on, with a checkpoint
(ablate.control.stop, the one owner of the stop: SIGTERM, SIGUSR1 and the timed stop below). Here, for
the job as a whole:

- the warning signal (`--signal=USR2@S`, hydra/launcher=slurm sends it with S = signal_delay_s) asks for
  the stop S seconds before the job's end time. SLURM may deliver it up to a minute early (its timer
  resolution), so the stop is timed from the job's end time, not from the signal;
- once training has stopped on a signal, global rank 0 asks SLURM what is happening to the job: a job
  still running (the time limit's warning, a site's preemption signal) or past its time limit is requeued
  with `scontrol requeue`; a job SLURM is requeueing already (preemption, `scontrol requeue`) is left to
  it; any other ending (`scancel`) leaves the run `cancelled`. The record says which while the job waits,
  and each allocation gets a line in <run>/allocations.jsonl. A requeued job runs the same sweep member
  again, which resumes from the checkpoint, until the run is finished.
- an allocation that ended without a training step is not requeued (a time limit too short to train):
  the record says `timed_out` with the reason, and resubmitting the sweep resumes the run.

A job of several tasks (DDP) takes the same path: whichever rank's timer fires first asks for the stop,
and all ranks stop together at the next step boundary (ablate.control.stop).

submitit's own handler of the warning signal (it requeues the job at once, mid-step) is replaced by
`Job.install` as the job starts, before anything else runs.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from ablate.control import stop
from ablate.records import folder, status, store
from ablate.training.hardware import global_rank

DELAY_ENV = "ABLATE_SLURM_SIGNAL_DELAY_S"  # S of --signal=USR2@S, exported by hydra/launcher=slurm
ALLOCATIONS = "allocations.jsonl"


def job_id() -> str | None:
    """The id `scontrol requeue` takes: '<array job>_<task>' for a job array member."""
    if "SLURM_ARRAY_JOB_ID" in os.environ and "SLURM_ARRAY_TASK_ID" in os.environ:
        return f"{os.environ['SLURM_ARRAY_JOB_ID']}_{os.environ['SLURM_ARRAY_TASK_ID']}"
    return os.environ.get("SLURM_JOB_ID")


def show_job(jid: str) -> dict[str, str]:
    """`scontrol show job` as {key: value} (JobState, Reason, Restarts, EndTime, ...); {} if unavailable."""
    try:
        out = subprocess.run(["scontrol", "show", "job", jid], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return {}
    return dict(re.findall(r"(\w+)=(\S*)", out.stdout))


class Job:
    """This process's SLURM job: installs the warning handler; after a stop on a signal, decides the
    run's fate (rank 0). Inert outside SLURM."""

    def __init__(self) -> None:
        self.id = job_id()
        self.restarts = int(os.environ.get("SLURM_RESTART_COUNT") or 0)
        self.started = folder.now()
        self.warned: str | None = None
        self.installed = False

    def install(self, early: Sequence[int] = ()) -> None:
        """Take the job's signals: the warning times the stop; SIGTERM and SIGUSR1 ask for it (training's
        stop owner, installed now so that a signal before training starts is not lost). `early`: warnings
        that came while the job loaded (slurm_member), timed now as if they came now."""
        if self.id is None or self.installed:
            return
        self.installed = True
        signal.signal(signal.SIGUSR2, self._warning)  # replaces submitit's, which requeues mid-step
        signal.signal(signal.SIGALRM, lambda *_: stop.request("time limit"))
        stop.install()
        if early:
            self._warning(early[0], None)

    def set_threads(self, cfg) -> None:
        """In a job, a run's threads are the CPUs SLURM gave its task (SLURM_CPUS_PER_TASK), not the node's,
        unless trainer.threads says otherwise; OpenMP gets the same count."""
        if self.id and cfg.trainer.threads is None and os.environ.get("SLURM_CPUS_PER_TASK"):
            cfg.trainer.threads = int(os.environ["SLURM_CPUS_PER_TASK"])
        if self.id and cfg.trainer.threads:  # else Lightning's DDP sets cores // local ranks
            os.environ.setdefault("OMP_NUM_THREADS", str(cfg.trainer.threads))

    @staticmethod
    def ranks_started() -> bool:
        """Whether this job's processes exist already: our own DDP workers (LOCAL_RANK), or SLURM's
        tasks (one process a rank)."""
        return "LOCAL_RANK" in os.environ or int(os.environ.get("SLURM_NTASKS") or 1) > 1

    def _warning(self, signum: int, _frame) -> None:
        """Time the stop: S seconds before the job's end (now, if that has passed or is unknown)."""
        self.warned = signal.Signals(signum).name
        delay = float(os.environ.get(DELAY_ENV) or 0)
        end = _epoch(show_job(self.id).get("EndTime", ""))
        wait = max(0.01, end - delay - time.time()) if end else 0.01
        signal.setitimer(signal.ITIMER_REAL, wait)
        print(f"[ablate] SLURM {self.warned}: stopping at a checkpoint in {wait:.0f} s", flush=True)

    def after_stop(self, run_dir: Path, step: int | None) -> None:
        """Training stopped at a checkpoint of `step` on a signal: rank 0 decides the record's status.
        Outside SLURM the run is interrupted; in a job, requeued, left to SLURM, or cancelled."""
        signal.setitimer(signal.ITIMER_REAL, 0)
        if global_rank() != 0:
            return
        rec_path = run_dir / store.RECORD_NAME
        if self.id is None:
            reason = f"stopped by a signal at step {step}; the same command resumes it from its checkpoint"
            status.settle(rec_path, "interrupt", reason, stopped_at_step=step)
            return
        name, reason = self._decide(step, _last_step(run_dir / ALLOCATIONS))
        _append(run_dir / ALLOCATIONS, self._line(step, status.TRANSITIONS[name][1], reason))
        if rec := status.settle(rec_path, name, reason, stopped_at_step=step, slurm_job=self.id):
            print(f"[ablate] {rec['run_id']}: {rec['status']}: {reason}", flush=True)

    def after_finish(self, run_dir: Path, rec: dict) -> None:
        """Rank 0, the run ended in this allocation: its line in allocations.jsonl."""
        signal.setitimer(signal.ITIMER_REAL, 0)
        trained_here = str(rec.get("finished", "")) >= self.started  # not a run skipped as finished
        if self.id is not None and global_rank() == 0 and rec.get("status") == "finished" and trained_here:
            _append(run_dir / ALLOCATIONS, self._line(rec.get("steps"), "finished", "finished"))

    def _decide(self, step: int | None, last: int | None) -> tuple[str, str]:
        """The transition (preempt, time_out, cancel) and its reason, from what SLURM says of the job."""
        info = show_job(self.id)
        state, why = info.get("JobState", "?"), info.get("Reason", "")
        at = f"step {step}" if step is not None else "its checkpoint"
        if not info:
            return "preempt", f"stopped at {at}; no answer from scontrol: resubmit the sweep to resume"
        if int(info.get("Restarts") or 0) > self.restarts or state.startswith(("PENDING", "REQUEUE")):
            return "preempt", f"stopped at {at}; SLURM requeues job {self.id}"
        timed = self.warned is not None or why == "TimeLimit" or state == "TIMEOUT"
        if state != "RUNNING" and not timed:
            return "cancel", f"job {self.id} cancelled ({state}); checkpoint at {at}"
        name = "time_out" if timed else "preempt"
        if step is not None and last is not None and step <= last:
            return name, f"no training step in this allocation (still {at}): not requeued; lengthen " \
                "hydra.launcher.timeout_min and resubmit the sweep to resume"  # fmt: skip
        done = subprocess.run(["scontrol", "requeue", self.id], capture_output=True, text=True, timeout=60)
        if done.returncode:
            why = done.stderr.strip()[:200]
            return name, f"stopped at {at}; requeue failed ({why}): resubmit the sweep to resume"
        return name, f"stopped at {at} ({self.warned or 'SIGTERM'}, {state}); job {self.id} requeued"

    def _line(self, step: int | None, status: str, reason: str) -> dict:
        return {
            "job": self.id,
            "restart": self.restarts,
            "started": self.started,
            "ended": folder.now(),
            "step": step,
            "signal": self.warned,
            "status": status,
            "reason": reason,
        }


_JOB: Job | None = None


def job() -> Job:
    """This process's Job (one per process: the launcher installs it as the job starts, train() uses it)."""
    global _JOB
    if _JOB is None:
        _JOB = Job()
    return _JOB


def _epoch(stamp: str) -> float | None:
    try:
        return time.mktime(time.strptime(stamp, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None  # 'Unknown', or no scontrol


def _last_step(path: Path) -> int | None:
    if not path.is_file():
        return None
    steps = [json.loads(line).get("step") for line in path.read_text().splitlines() if line.strip()]
    return steps[-1] if steps else None


def _append(path: Path, row: dict) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")
