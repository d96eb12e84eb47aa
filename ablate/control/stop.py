"""The one owner of a stop: SIGTERM (a kill, SLURM's preemption and time limit), SIGUSR1, and the timed stop
a SLURM job asks for before its time limit (ablate.cluster.slurm_job calls `request`). Each only asks;
training stops at the next optimizer-step boundary that every rank agrees on, writes last.ckpt there and
raises Lightning's SIGTERMException, so that the checkpoint is a consistent state (never inside a
gradient-accumulation step) and the resumed run repeats nothing. Who sent the signal then decides the
record's status (ablate.jobs.train: interrupted, or SLURM's preempted / timed_out / cancelled).

Replaced here, explicitly: Lightning's own SIGTERM handler (a flag that stops after the current
micro-batch), whose handlers `StopAtStep.on_train_start` takes over once Lightning has set them, and
Lightning's SLURM auto-requeue, switched off where the trainer is built (`slurm_environment`): a SLURM
job's requeue belongs to ablate.cluster.slurm_job.
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path

from pytorch_lightning.callbacks import Callback
from pytorch_lightning.utilities.exceptions import SIGTERMException

SIGNALS = (signal.SIGTERM, signal.SIGUSR1)
_asked: list[str] = []  # why a stop was asked for; a request may come before training starts


def request(why: str) -> None:
    """Ask training to stop at the next step boundary (from a signal handler or a timer)."""
    _asked.append(why)


def asked() -> str | None:
    return _asked[0] if _asked else None


def install() -> None:
    """Take SIGTERM and SIGUSR1 in this process: each asks for the stop (main thread only, as Python's
    signal module requires)."""
    if threading.current_thread() is threading.main_thread():
        for s in SIGNALS:
            signal.signal(s, _on_signal)


def _on_signal(signum: int, _frame) -> None:
    request(signal.Signals(signum).name)


def slurm_environment():
    """Lightning's SLURM environment with its auto-requeue off, where this process is a SLURM task (None
    elsewhere): Lightning then sets no requeue handler and says nothing of one."""
    from lightning_fabric.plugins.environments import SLURMEnvironment

    return SLURMEnvironment(auto_requeue=False) if SLURMEnvironment.detect() else None


class StopAtStep(Callback):
    """Stop at an optimizer-step boundary once any rank was asked to, with last.ckpt written there. The
    stop itself comes at the next hook that follows the step (the next batch, or the dev evaluation due at
    that step), so that every callback has ended the step first (its curve row, its periodic checkpoint);
    an evaluation due at the stop step is the resumed run's to make (training.module.redo_dev_pass)."""

    def __init__(self, last: Path):
        self.last, self.stopping = last, False

    def on_train_start(self, trainer, module):
        install()  # after Lightning's fit has set its own handlers: ours replace its SIGTERM flag

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        mb, _ = batch
        if mb.micro != module.accumulate - 1:
            return
        # every rank takes part in this decision at every step boundary, so that all stop at the same one
        if trainer.strategy.reduce_boolean_decision(asked() is not None, all=False):
            trainer.save_checkpoint(self.last)
            self.stopping = True

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if self.stopping:
            raise SIGTERMException

    def on_validation_start(self, trainer, module):
        if self.stopping:
            raise SIGTERMException
