"""The optimizer and the learning-rate schedule: the paper's (section 5.3) by default, any other by name.

A run's `optim` node names a `torch.optim` class (or a researcher's) and its settings; its `schedule` node
names one of the schedules below (or a researcher's) and theirs. Both are Hydra `_target_` nodes, built
partially (`_partial_`) and completed here with what only the run knows: the parameters, d_model and the
step count. The rate is the schedule's alone: the optimizer is built at lr 1.0 and LambdaLR multiplies it
by the schedule's value, so a config never states a rate twice.
"""

from __future__ import annotations

import inspect
import math

import torch


def inverse_sqrt_lr(step: int, d_model: int, warmup: int, scale: float = 1.0) -> float:
    """lrate = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5) (equation 3), step counted from 1.

    Rises linearly for `warmup` steps, then decays as 1/sqrt(step). `scale` is a named multiplier (1.0 is the
    paper)."""
    step = max(step, 1)
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def linear_warmup_cosine_lr(
    step: int, peak: float, warmup: int, total: int, time_progress: float = 0.0
) -> float:
    """An option, not the paper's: linear warmup to `peak`, cosine decay to 0 at `total`.

    `time_progress` (0..1, train.budget_minutes) is the fraction of the post-warmup time budget already
    spent; the decay follows whichever of steps and time is further along, so the rate reaches 0 at the
    deadline when the deadline comes before step `total`."""
    step = max(step, 1)
    if step <= warmup:
        return peak * step / warmup
    return peak * 0.5 * (1 + math.cos(math.pi * decay_progress(step, warmup, total, time_progress)))


def warmup_factor(step: int, warmup: int) -> float:
    """step / warmup during a linear warmup (step counted from 1), 1 after it and without one."""
    return min(1.0, max(step, 1) / warmup) if warmup > 0 else 1.0


def decay_progress(step: int, warmup: int, total: int, time_progress: float = 0.0) -> float:
    """How far a decay after warmup is along, 0..1: by steps, or by the time budget where that is further."""
    if step <= warmup:
        return 0.0
    return min(1.0, max((step - warmup) / max(1, total - warmup), time_progress))


class Schedule:
    """The learning rate of optimizer step `step` (counted from 1, as equation 3 counts). `progress` is the
    fraction of train.budget_minutes spent (0 without a budget): a schedule that decays to an end follows
    whichever of steps and time is further along.

    Every schedule takes the run's facts, d_model and total_steps, whether it reads them or not, and
    `warmup_steps` and `scale`. A schedule with a peak of its own (cosine, linear, constant) peaks at
    `peak` where given, else at equation 3's peak for this d_model and warmup times `scale`: a schedule
    row compares shapes at the recipe's rate. A researcher's schedule subclasses this."""

    decays_to_end = False  # whether train.budget_minutes can end its decay at the deadline

    def __init__(
        self,
        *,
        d_model: int,
        total_steps: int,
        warmup_steps: int = 4000,
        scale: float = 1.0,
        peak: float | None = None,
    ):
        if warmup_steps < 0:
            raise ValueError(f"schedule.warmup_steps={warmup_steps} must be 0 or more")
        self.d_model, self.total_steps = d_model, total_steps
        self.warmup_steps, self.scale = warmup_steps, scale
        if peak is None and warmup_steps > 0:
            peak = inverse_sqrt_lr(warmup_steps, d_model, warmup_steps, scale)  # equation 3 at its top
        self.peak = peak

    def __call__(self, step: int, progress: float = 0.0) -> float:
        raise NotImplementedError


class InverseSqrt(Schedule):
    """Equation 3 (the paper's): d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), times `scale`."""

    def __init__(self, *, d_model: int, total_steps: int, warmup_steps: int = 4000, scale: float = 1.0):
        if warmup_steps < 1:
            raise ValueError(f"schedule.warmup_steps={warmup_steps}: equation 3 needs a warmup of 1 or more")
        super().__init__(d_model=d_model, total_steps=total_steps, warmup_steps=warmup_steps, scale=scale)

    def __call__(self, step: int, progress: float = 0.0) -> float:
        return inverse_sqrt_lr(step, self.d_model, self.warmup_steps, self.scale)


class _Peaked(Schedule):
    """A schedule that rises to `peak` over the warmup (linearly) and then follows its own shape."""

    def __init__(self, **kw):
        super().__init__(**kw)
        if self.peak is None:
            raise ValueError(
                "schedule.peak: needed with schedule.warmup_steps=0 "
                "(the default peak is equation 3's at the end of the warmup)"
            )


class Cosine(_Peaked):
    """Linear warmup to the peak, then cosine decay to 0 at the last step (Loshchilov & Hutter 2017)."""

    decays_to_end = True

    def __call__(self, step: int, progress: float = 0.0) -> float:
        if self.warmup_steps == 0:
            done = decay_progress(step, 0, self.total_steps, progress)
            return self.peak * 0.5 * (1 + math.cos(math.pi * done))
        return linear_warmup_cosine_lr(step, self.peak, self.warmup_steps, self.total_steps, progress)


class Linear(_Peaked):
    """Linear warmup to the peak, then linear decay to `end` x peak at the last step (as BERT's)."""

    decays_to_end = True

    def __init__(self, *, end: float = 0.0, **kw):
        super().__init__(**kw)
        self.end = end

    def __call__(self, step: int, progress: float = 0.0) -> float:
        done = decay_progress(step, self.warmup_steps, self.total_steps, progress)
        return self.peak * warmup_factor(step, self.warmup_steps) * (1.0 - (1.0 - self.end) * done)


class Constant(_Peaked):
    """The peak at every step after the warmup (warmup_steps 0: from the first step)."""

    def __call__(self, step: int, progress: float = 0.0) -> float:
        return self.peak * warmup_factor(step, self.warmup_steps)


def build_optimizer(factory, params) -> torch.optim.Optimizer:
    """The optimizer of a partial `optim` node over `params`, at lr 1.0 (the schedule sets the rate). Where
    the class has a fused kernel (Adam, AdamW: CUDA, and CPU since torch 2.4) and the node does not say,
    it is used; where fused is refused (a dtype, a device), the plain loop."""
    params = list(params)
    cls = getattr(factory, "func", factory)
    given = getattr(factory, "keywords", {}) or {}
    if "fused" in inspect.signature(cls).parameters and "fused" not in given:
        try:
            return factory(params, lr=1.0, fused=True)
        except (RuntimeError, TypeError):
            pass
    return factory(params, lr=1.0)


def make_adam(params, betas=(0.9, 0.98), eps: float = 1e-9, weight_decay: float = 0.0) -> torch.optim.Adam:
    """Adam with beta1 = 0.9, beta2 = 0.98, epsilon = 1e-9 (5.3), at lr 1.0."""
    from functools import partial

    return build_optimizer(partial(torch.optim.Adam, betas=betas, eps=eps, weight_decay=weight_decay), params)
