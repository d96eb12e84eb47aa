"""Label-smoothed cross-entropy (section 5.4) and the unsmoothed sums behind per-wordpiece perplexity."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class LossSums:
    """Sums over the real (non-pad) target tokens of a batch; divide once, after summing across batches and
    devices, to get token-weighted figures."""

    smoothed: Tensor  # scalar: label-smoothed loss, summed
    nll: Tensor  # scalar: -log p(y), summed (no smoothing): perplexity = exp(nll / tokens)
    tokens: Tensor  # scalar: number of target tokens
    nll_per_sentence: Tensor | None = None  # (B,)
    tokens_per_sentence: Tensor | None = None  # (B,)


def label_smoothed_loss(
    logits: Tensor, target: Tensor, eps: float, pad_id: int, per_sentence: bool = False
) -> LossSums:
    """Cross-entropy against q = (1 - eps) on the reference token and eps / (V - 1) on each other token.

    Computed from logsumexp and two reductions, without materializing the (B, T, V) log-softmax:
    log p(v) = z_v - lse, so  sum_v log p(v) = sum_v z_v - V * lse.
    logits (B, T, V) in any float dtype; target (B, T) with pad_id where there is no token.
    """
    z = logits.float()
    V = z.shape[-1]
    lse = torch.logsumexp(z, dim=-1)  # (B, T)
    z_y = z.gather(-1, target[..., None])[..., 0]  # (B, T)
    nll = lse - z_y  # -log p(y)
    mask = target != pad_id
    if eps > 0:
        e = eps / (V - 1)
        sum_logp = z.sum(-1) - V * lse  # (B, T)
        # -[(1 - eps) log p(y) + e * sum_{v != y} log p(v)] = (1 - eps - e) nll - e * sum_v log p(v)
        smoothed = (1.0 - eps - e) * nll - e * sum_logp
    else:
        smoothed = nll
    nll = nll.masked_fill(~mask, 0.0)
    smoothed = smoothed.masked_fill(~mask, 0.0)
    out = LossSums(smoothed.sum(), nll.sum(), mask.sum())
    if per_sentence:
        out.nll_per_sentence = nll.sum(-1)
        out.tokens_per_sentence = mask.sum(-1)
    return out
