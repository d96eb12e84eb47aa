"""What a run shows of its progress: a bar over optimizer steps on a terminal (`StepProgress`), plain
lines elsewhere (`ProgressLines`: a SLURM job log, CI, `> log`)."""

from __future__ import annotations

import time
from typing import Protocol

from pytorch_lightning.callbacks import Callback, TQDMProgressBar


class TrainClock(Protocol):
    """Training seconds across restarts (ablate.training.callbacks.TrainClock)."""

    def elapsed(self) -> float: ...


class StepProgress(TQDMProgressBar):
    """A bar over optimizer steps (the training stream is endless, so Lightning cannot know its length)."""

    def __init__(self, total_micro: int):
        super().__init__(refresh_rate=5)
        self.total_micro = total_micro

    def on_train_start(self, trainer, *_):
        super().on_train_start(trainer, *_)
        self._set_total(trainer)  # a resumed run goes on inside its epoch: no epoch start comes

    def on_train_epoch_start(self, trainer, *_):
        super().on_train_epoch_start(trainer, *_)
        self._set_total(trainer)

    def _set_total(self, trainer) -> None:
        self.train_progress_bar.reset(total=self.total_micro)
        self.train_progress_bar.initial = trainer.global_step * trainer.lightning_module.accumulate


class ProgressLines(Callback):
    """Where stdout is no terminal (a SLURM job log, CI, `> log`): one plain line every `every` optimizer
    steps, as fairseq's --log-interval, instead of a bar redrawn with carriage returns. A resumed run's
    lines go on from its step; elapsed is training time across restarts (TrainClock)."""

    def __init__(self, total_steps: int, clock: TrainClock):
        self.total, self.clock = total_steps, clock
        self.every = max(1, min(100, total_steps // 20))

    def on_train_start(self, trainer, module):
        self.t0, self.step0 = time.perf_counter(), trainer.global_step

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        mb, _ = batch
        step = trainer.global_step
        if mb.micro != module.accumulate - 1 or (step % self.every and step != self.total):
            return
        m = trainer.callback_metrics
        rate = (time.perf_counter() - self.t0) / max(step - self.step0, 1)  # seconds a step, this process
        parts = [
            f"step {step}/{self.total} ({100 * step / self.total:.0f}%)",
            f"loss {float(m['train/loss']):.3f}" if "train/loss" in m else None,
            f"lr {trainer.optimizers[0].param_groups[0]['lr']:.2e}",
            f"{float(m['train/tokens_per_s']):,.0f} tok/s" if "train/tokens_per_s" in m else None,
            f"elapsed {_clock(self.clock.elapsed())}",
            f"eta {_clock(rate * (self.total - step))}",
        ]
        print("[ablate] " + "  ".join(x for x in parts if x), flush=True)


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"
