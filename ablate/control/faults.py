"""Faults injected on purpose, for the tests of the failure paths; inert unless their variable is set.

ABLATE_FAULT_NAN_AT_STEP=k   the weights are NaN for the batches of optimizer step k (a diverging run)
ABLATE_FAULT_RANK=r          rank r of a multi-device job raises at start-up
ABLATE_FAULT_SIGINT_AT_STEP=k  after optimizer step k, SIGINT to the process group (Ctrl-C in a terminal)
"""

from __future__ import annotations

import os

import torch
from pytorch_lightning.callbacks import Callback

RANK_ENV = "ABLATE_FAULT_RANK"
ROW_ENV = "ABLATE_FAULT_ROW"
NAN_ENV = "ABLATE_FAULT_NAN_AT_STEP"
SIGINT_ENV = "ABLATE_FAULT_SIGINT_AT_STEP"


def callbacks() -> list[Callback]:
    out: list[Callback] = [FaultInjection()] if os.environ.get(NAN_ENV) else []
    return out + ([CtrlC(int(os.environ[SIGINT_ENV]))] if os.environ.get(SIGINT_ENV) else [])


class CtrlC(Callback):
    """ABLATE_FAULT_SIGINT_AT_STEP=k: what Ctrl-C in a terminal does at optimizer step k, SIGINT to every
    process of the foreground group (start the command in its own session to keep the signal there)."""

    def __init__(self, step: int):
        self.step = step

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_step == self.step:
            import signal

            self.step = -1
            os.killpg(os.getpgrp(), signal.SIGINT)


def check_start(row: str) -> None:
    """Called by each worker process of cluster.ddp.spawn_job before it trains."""
    if os.environ.get(RANK_ENV) is not None and os.environ.get(RANK_ENV) == os.environ.get("RANK"):
        raise RuntimeError(f"injected fault in rank {os.environ['RANK']} ({RANK_ENV})")
    if os.environ.get(ROW_ENV) == row:
        raise RuntimeError(f"injected fault in row {row} ({ROW_ENV})")


class FaultInjection(Callback):
    """For tests of the failure paths: ABLATE_FAULT_NAN_AT_STEP=k makes the weights NaN for the batches of
    optimizer step k (restored afterwards), as a diverging run would."""

    def __init__(self):
        self.step = int(os.environ.get(NAN_ENV, "0"))
        self.saved = None

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if self.step and trainer.global_step + 1 == self.step and self.saved is None:
            self.saved = module.model.embedding.weight.detach().clone()
            with torch.no_grad():
                module.model.embedding.weight.fill_(float("nan"))

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if self.saved is not None:
            with torch.no_grad():
                module.model.embedding.weight.copy_(self.saved)
            self.saved, self.step = None, 0
