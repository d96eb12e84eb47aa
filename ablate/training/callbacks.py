"""The Lightning callbacks of a training run: each gets what it needs in its constructor and steers only
the trainer (stop, checkpoint) or its own files; the LightningModule reads `Budget.progress`."""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch
from pytorch_lightning.callbacks import Callback


class TrainClock(Callback):
    """Training wall clock across restarts: a resumed run's clock goes on from its checkpoint's time.

    One per run, saved once in each checkpoint; Curves, Budget and TimeLimit read it. Put it before them in
    the callback list, so that its on_train_start has run when theirs do."""

    def __init__(self):
        self.resumed_s = 0.0  # training seconds before this process (restored from the checkpoint)

    def on_train_start(self, trainer, module):
        self.t0 = time.perf_counter() - self.resumed_s

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0 if hasattr(self, "t0") else self.resumed_s

    def state_dict(self) -> dict:
        return {"time_s": self.elapsed()}

    def load_state_dict(self, state: dict) -> None:
        self.resumed_s = float(state.get("time_s", 0.0))


class Curves(Callback):
    """Appends train and dev figures to curves.jsonl (rank 0), read by the report."""

    def __init__(self, path: Path, clock: TrainClock, every: int = 10):
        self.path, self.clock, self.every = path, clock, every

    def _write(self, trainer, row: dict) -> None:
        if trainer.global_rank == 0:
            with open(self.path, "a") as f:
                f.write(json.dumps(row) + "\n")

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        mb, _ = batch
        step = trainer.global_step
        if mb.micro == module.accumulate - 1 and step % self.every == 0:
            m = trainer.callback_metrics
            row = {"step": step, "lr": module.lr_at(step), "time_s": round(self.clock.elapsed(), 2)}
            if "train/loss" in m:
                row["train_loss"] = float(m["train/loss"])
            for name in sorted(module.aux_names):  # a criterion's auxiliary terms, under their names
                if f"train/{name}" in m:
                    row[f"train_{name}"] = float(m[f"train/{name}"])
            self._write(trainer, row)

    def on_validation_end(self, trainer, module):  # after the module's own epoch-end hook has computed
        if trainer.sanity_checking or not module.last_eval:
            return
        row = {"step": trainer.global_step, "dev_ppl": module.last_eval["dev_ppl"]}
        figures = module.last_eval["figures"]
        row |= {m.curve_key: figures[m.record_key] for m in module.metrics if m.record_key in figures}
        self._write(trainer, row)


class Preempted(SystemExit):
    """Training stopped on SIGTERM / SIGUSR1 at `step`, its checkpoint written; exit code 143. Whoever sent
    the signal decides the record's status (ablate.jobs.train)."""

    CODE = 143

    def __init__(self, step: int | None, checkpoint: Path):
        self.step = step
        print(f"[ablate] stopped at step {step}: checkpoint {checkpoint}", flush=True)
        super().__init__(self.CODE)


class Budget(Callback):
    """train.budget_minutes: the cosine decay follows the clock, ends at the deadline; training stops there.

    The clock is training wall time across restarts (dev passes included: the minutes the Multi30k curve
    counts). Under DDP every rank takes the slowest rank's clock, so that all apply the same rate and stop
    at the same step. The stop step gets its own checkpoint (the last ones are averaged at the end)."""

    def __init__(
        self, minutes: float, ckpt_dir: Path, clock: TrainClock, warmup_steps: int, checkpoint_every: int
    ):
        self.budget_s, self.ckpt_dir, self.clock = minutes * 60, ckpt_dir, clock
        self.warmup_steps, self.checkpoint_every = warmup_steps, checkpoint_every
        self.warm_end_s = None  # clock time at the end of warmup (restored from the checkpoint)
        self.progress = 0.0  # post-warmup share of the budget spent: the module's cosine schedule reads it

    def on_train_start(self, trainer, module):
        if self.warm_end_s is not None:  # resumed: the first step's rate goes on from where the clock was
            self.progress = self._progress(self.clock.resumed_s)

    def state_dict(self) -> dict:
        return {"warm_end_s": self.warm_end_s}

    def load_state_dict(self, state: dict) -> None:
        self.warm_end_s = state.get("warm_end_s")

    def _progress(self, elapsed: float) -> float:
        left = max(self.budget_s - self.warm_end_s, 1e-9)  # the post-warmup part of the budget
        return min(1.0, (elapsed - self.warm_end_s) / left)

    def _elapsed(self, trainer, module) -> float:
        local = torch.tensor(self.clock.elapsed(), dtype=torch.float64, device=module.device)
        return float(trainer.strategy.reduce(local, reduce_op="max"))

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if batch[0].micro != module.accumulate - 1:  # once per optimizer step (one collective under DDP)
            return
        elapsed = self._elapsed(trainer, module)
        if self.warm_end_s is None and trainer.global_step >= self.warmup_steps:
            self.warm_end_s = elapsed
        if self.warm_end_s is not None:  # read by the scheduler when it sets the next step's rate
            self.progress = self._progress(elapsed)
        if elapsed < self.budget_s:
            return
        step = trainer.global_step
        if step % self.checkpoint_every:  # else ModelCheckpoint (run after us) writes this step
            trainer.save_checkpoint(self.ckpt_dir / f"step{step:07d}.ckpt")
        trainer.should_stop = True


class TimeLimit(Callback):
    """train.max_minutes: stop once the run has trained this long, counted across restarts (TrainClock)."""

    def __init__(self, minutes: float | None, clock: TrainClock):
        self.seconds = None if minutes is None else minutes * 60
        self.clock = clock

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if self.seconds is not None and self.clock.elapsed() > self.seconds:
            trainer.should_stop = True
