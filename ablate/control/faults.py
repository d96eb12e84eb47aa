"""Faults injected on purpose, for the tests of the failure paths; inert unless their variable is set.

ABLATE_FAULT_NAN_AT_STEP=k   the weights are NaN for the batches of optimizer step k (a diverging run)
ABLATE_FAULT_RANK=r          rank r of a multi-device job raises at start-up
ABLATE_FAULT_SIGINT_AT_STEP=k  after optimizer step k, SIGINT to the process group (Ctrl-C in a terminal)
ABLATE_FAULT_STOP=PHASE@k:HOW   once, in PHASE at step k, the process is stopped HOW (the stop-anywhere test):
    PHASE  step (optimizer step k, its gradients computed, its update not made), checkpoint (a checkpoint
           of step k half written: the temporary file, before its rename), dev (the dev pass at step k,
           after its first batch), final (the final dev decode), evaluation (the run's own test
           evaluation, train.average_last, after its first batch); k is ignored by the last two
    HOW    SIGINT (Ctrl-C), SIGTERM (a stop signal), SIGKILL (kill -9), raise (an exception in the code
           running then, as a scorer's would be, fixed before the run is started again)
"""

from __future__ import annotations

import os

import torch
from pytorch_lightning.callbacks import Callback

RANK_ENV = "ABLATE_FAULT_RANK"
ROW_ENV = "ABLATE_FAULT_ROW"
NAN_ENV = "ABLATE_FAULT_NAN_AT_STEP"
SIGINT_ENV = "ABLATE_FAULT_SIGINT_AT_STEP"
STOP_ENV = "ABLATE_FAULT_STOP"
PHASES = ("step", "checkpoint", "dev", "final", "evaluation")
HOWS = ("SIGINT", "SIGTERM", "SIGKILL", "raise")
_fired: list[str] = []  # a stop fault fires once in a process


def callbacks() -> list[Callback]:
    out: list[Callback] = [FaultInjection()] if os.environ.get(NAN_ENV) else []
    out += [StopInPhase()] if os.environ.get(STOP_ENV) else []
    return out + ([CtrlC(int(os.environ[SIGINT_ENV]))] if os.environ.get(SIGINT_ENV) else [])


def stop_fault() -> tuple[str, int, str] | None:
    """ABLATE_FAULT_STOP as (phase, step, how); None where unset. A malformed value is refused."""
    value = os.environ.get(STOP_ENV)
    if not value:
        return None
    phase, _, rest = value.partition("@")
    step, _, how = rest.partition(":")
    if phase not in PHASES or how not in HOWS or not step.isdigit():
        raise ValueError(f"{STOP_ENV}={value}: not PHASE@STEP:HOW ({'|'.join(PHASES)}; {'|'.join(HOWS)})")
    return phase, int(step), how


def at(phase: str, step: int | None = None) -> None:
    """Where `phase` is under way (at `step`, where the phase has one): stop here if ABLATE_FAULT_STOP says
    so, once."""
    fault = stop_fault()
    if fault is None or _fired or fault[0] != phase or (step is not None and fault[1] != step):
        return
    _fired.append(phase)
    how = fault[2]
    print(f"[ablate] injected fault: {how} in {phase} at step {fault[1]} ({STOP_ENV})", flush=True)
    if how == "raise":
        raise RuntimeError(f"injected fault in {phase} at step {fault[1]} ({STOP_ENV})")
    import signal

    os.kill(os.getpid(), getattr(signal, how))


class StopInPhase(Callback):
    """ABLATE_FAULT_STOP in the phases a callback sees: an optimizer step, a dev pass, the final decode."""

    def on_before_optimizer_step(self, trainer, module, optimizer):
        at("step", trainer.global_step + 1)

    def on_validation_batch_end(self, trainer, module, outputs, batch, batch_idx, dataloader_idx=0):
        if trainer.state.fn == "fit":
            at("dev", trainer.global_step)
        else:
            at("final")


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
