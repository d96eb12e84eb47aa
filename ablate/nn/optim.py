"""Optimizer and learning-rate schedule of section 5.3."""

from __future__ import annotations

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
    import math

    step = max(step, 1)
    if step <= warmup:
        return peak * step / warmup
    progress = min(1.0, max((step - warmup) / max(1, total - warmup), time_progress))
    return peak * 0.5 * (1 + math.cos(math.pi * progress))


def make_adam(
    params, betas=(0.9, 0.98), eps: float = 1e-9, weight_decay: float = 0.0, fused: bool | None = None
) -> torch.optim.Adam:
    """Adam with beta1 = 0.9, beta2 = 0.98, epsilon = 1e-9 (5.3). The learning rate is set by the schedule,
    so the base lr is 1.0 and LambdaLR multiplies it by the schedule's value."""
    params = list(params)
    if fused is None:  # the fused kernel exists for CUDA and (since torch 2.4) CPU tensors
        fused = True
    try:
        return torch.optim.Adam(params, lr=1.0, betas=betas, eps=eps, weight_decay=weight_decay, fused=fused)
    except (RuntimeError, TypeError):
        return torch.optim.Adam(params, lr=1.0, betas=betas, eps=eps, weight_decay=weight_decay)
