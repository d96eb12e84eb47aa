"""A run inside a SLURM job: the warning before the time limit, and what follows a stop on a signal.

Training stops only at an optimizer-step boundary, with a checkpoint (callbacks.Preemption: SIGTERM and
SIGUSR1). Here, for the job as a whole:

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

A job of several tasks (DDP) cannot take the timed stop safely: each rank would stop at the step boundary
where its own timer lands, and ranks that stop at different steps wait for each other for ever. There,
global rank 0 alone requeues the job at the stop time, and SLURM ends the tasks and starts the job again:
the run resumes from its newest periodic checkpoint (train.checkpoint_every), losing the steps since it,
and an allocation that wrote no checkpoint is not requeued.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

from ablate.records import folder, status, store

DELAY_ENV = "ABLATE_SLURM_SIGNAL_DELAY_S"  # S of --signal=USR2@S, exported by hydra/launcher=slurm
ALLOCATIONS = "allocations.jsonl"


def job_id() -> str | None:
    """The id `scontrol requeue` takes: '<array job>_<task>' for a job array member."""
    if "SLURM_ARRAY_JOB_ID" in os.environ and "SLURM_ARRAY_TASK_ID" in os.environ:
        return f"{os.environ['SLURM_ARRAY_JOB_ID']}_{os.environ['SLURM_ARRAY_TASK_ID']}"
    return os.environ.get("SLURM_JOB_ID")


def global_rank() -> int:
    return int(os.environ.get("SLURM_PROCID", os.environ.get("RANK", "0")))


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
        self.ranks = int(os.environ.get("SLURM_NTASKS") or 1)
        self.run_dir: Path | None = None
        self.start_step: int | None = None  # the newest checkpoint's step when this allocation began
        self.requeued: str | None = None  # a multi-task job's requeue at the time limit (its reason)

    def install(self) -> None:
        if self.id is None or self.installed:
            return
        self.installed = True
        signal.signal(signal.SIGUSR2, self._warning)  # replaces submitit's (which exits mid-step)
        signal.signal(signal.SIGUSR1, lambda *_: None)  # until training's own handler (Preemption) is set
        signal.signal(signal.SIGALRM, _request_stop)

    def watch(self, run_dir: Path) -> None:
        """The run this job trains, and how far its checkpoints reached when the allocation began."""
        self.run_dir, self.start_step = run_dir, folder.checkpoint_step(run_dir / "checkpoints")

    def _warning(self, signum: int, _frame) -> None:
        """Time the stop: S seconds before the job's end (now, if that has passed or is unknown); then ask
        for it each second until training takes it (before training starts, nothing listens yet). With
        several tasks, rank 0 requeues the job at that time instead (see the module's docstring)."""
        self.warned = signal.Signals(signum).name
        if self.ranks > 1 and global_rank() != 0:
            return
        delay = float(os.environ.get(DELAY_ENV) or 0)
        end = _epoch(show_job(self.id).get("EndTime", ""))
        wait = max(0.01, end - delay - time.time()) if end else 0.01
        if self.ranks > 1:
            signal.signal(signal.SIGALRM, lambda *_: self._requeue_from_checkpoint())
            signal.setitimer(signal.ITIMER_REAL, wait)
            print(f"[ablate] SLURM {self.warned}: requeueing the job in {wait:.0f} s", flush=True)
            return
        signal.setitimer(signal.ITIMER_REAL, wait, 1.0)
        print(f"[ablate] SLURM {self.warned}: stopping at a checkpoint in {wait:.0f} s", flush=True)

    def _requeue_from_checkpoint(self) -> None:
        """Rank 0 of a multi-task job, at the stop time: requeue, where this allocation wrote a checkpoint.
        The record says so once training has stopped (after_stop)."""
        if self.run_dir is None:
            return
        step = folder.checkpoint_step(self.run_dir / "checkpoints")
        reason = self.requeued = self._requeue_reason(step)
        _append(self.run_dir / ALLOCATIONS, self._line(step, "timed_out", reason))
        print(f"[ablate] timed_out: {reason}", flush=True)

    def _requeue_reason(self, step: int | None) -> str:
        if step is None or (self.start_step is not None and step <= self.start_step):
            return (
                "no checkpoint written in this allocation: not requeued; lengthen hydra.launcher.timeout_min "
                "or lower train.checkpoint_every, and resubmit the sweep to resume"
            )
        done = subprocess.run(["scontrol", "requeue", self.id], capture_output=True, text=True, timeout=60)
        if done.returncode:
            return f"time limit: requeue failed ({done.stderr.strip()[:200]}): resubmit the sweep to resume"
        return f"time limit: job {self.id} requeued; resumes from the checkpoint of step {step}"

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
        if self.requeued:  # rank 0 requeued the job already; its tasks stopped together at a checkpoint
            name, reason = "time_out", f"{self.requeued}; stopped at step {step} with a checkpoint"
        else:
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


def _request_stop(_signum: int, frame) -> None:
    """SIGALRM (the timed stop): hand the request to whatever SIGUSR1 means now (training: stop at the
    next step boundary with a checkpoint)."""
    handler = signal.getsignal(signal.SIGUSR1)
    if callable(handler):
        handler(signal.SIGUSR1, frame)


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
