"""Label-smoothed cross-entropy (section 5.4) and the unsmoothed sums behind per-wordpiece perplexity."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

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
    # a criterion's auxiliary terms, each summed over the tokens with its weight: trained with `smoothed`,
    # logged and curved under its name
    aux: dict[str, Tensor] = field(default_factory=dict)

    def total(self) -> Tensor:  # the sum a training step minimizes
        out = self.smoothed
        for term in self.aux.values():
            out = out + term
        return out


class SmoothedCrossEntropy(torch.autograd.Function):
    """Per-token (label-smoothed loss, nll) from logits in one exp pass, with the closed-form gradient.

    The smoothed target q puts 1 - eps on the reference and e = eps / (V - 1) on every other token. With
    log p = z - lse:  loss = (1 - eps - e) * nll - e * sum_v log p(v),  and  d loss / dz = p - q
    (the coefficients of p add up to 1 - eps + e (V - 1) = 1). Saving p instead of the logits means the
    backward pass is one subtraction: no second exp, no (N, V) zero tensor for a gather's gradient, which
    is where autograd through logsumexp spends its time (measured with torch's profiler).
    """

    @staticmethod
    def forward(ctx, z: Tensor, target: Tensor, eps: float, inplace: bool) -> tuple[Tensor, Tensor]:
        # z (N, V), target (N,). inplace: z's memory becomes p (the caller never reads z again and autograd
        # saved no reference to it: a linear layer's backward keeps its input and weight, not its output).
        V = z.shape[-1]
        m = z.amax(-1, keepdim=True)  # (N, 1)
        z_ref = z.gather(-1, target[:, None])[:, 0]  # (N,)
        z_sum = z.sum(-1)  # (N,)
        # (N, V) unnormalized, one exp. Clamped at -80 (exp = 1.8e-35, nothing next to the maximum's 1):
        # exp of float32 inputs below about -87 takes a slow path that made this 3x slower once a model's
        # logits spread out (measured: 121 vs 39 ms for 12M logits).
        p = (z.sub_(m) if inplace else z - m).clamp_(min=-80.0).exp_()
        s = p.sum(-1, keepdim=True)  # (N, 1)
        lse = (m + s.log())[:, 0]  # (N,)
        nll = lse - z_ref  # (N,)
        e = eps / (V - 1)
        sum_logp = z_sum - V * lse  # (N,)
        smoothed = (1.0 - eps - e) * nll - e * sum_logp if eps > 0 else nll.clone()
        ctx.save_for_backward(p.div_(s), target)  # p is now softmax(z)
        ctx.eps = eps
        return smoothed, nll

    @staticmethod
    def backward(ctx, g_smoothed: Tensor, g_nll: Tensor):  # each (N,)
        p, target = ctx.saved_tensors
        eps, V = ctx.eps, p.shape[-1]
        e = eps / (V - 1)
        # smoothed: p - q (q = e off the reference, 1 - eps on it); nll: p - onehot
        grad = p.mul_((g_smoothed + g_nll)[:, None])  # p is not needed again: reuse its memory
        if eps > 0:
            grad.sub_(e * g_smoothed[:, None])
        on_ref = (1.0 - eps - e) * g_smoothed + g_nll  # (N,)
        grad.scatter_add_(-1, target[:, None], -on_ref[:, None])
        return grad, None, None, None


def _at_least_f32(x: Tensor) -> Tensor:
    return x if x.dtype == torch.float64 else x.float()


def _smoothed_ce_forward(z: Tensor, target: Tensor, eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """(smoothed, nll, lse), each (N,), from z (N, V) in any float dtype; the arithmetic in float32."""
    zf = _at_least_f32(z)
    V = zf.shape[-1]
    m = zf.amax(-1, keepdim=True)  # (N, 1)
    lse = (m + (zf - m).exp().sum(-1, keepdim=True).log())[:, 0]  # (N,)
    nll = lse - zf.gather(-1, target[:, None])[:, 0]
    e = eps / (V - 1)
    smoothed = (1.0 - eps - e) * nll - e * (zf.sum(-1) - V * lse)  # sum_v log p(v) = sum z - V lse
    return smoothed, nll, lse


def _smoothed_ce_backward(z: Tensor, target: Tensor, lse: Tensor, g_s: Tensor, g_n: Tensor, eps: float):
    """d/dz of sum(g_s * smoothed + g_n * nll) = (g_s + g_n) p - g_s q' - g_n onehot, in z's dtype: one
    elementwise pass (the reference column found by comparing with an iota, not by a scatter)."""
    V = z.shape[-1]
    e = eps / (V - 1)
    p = (_at_least_f32(z) - lse[:, None]).exp()  # (N, V) softmax
    on_ref = (1.0 - eps - e) * g_s + g_n  # (N,)
    is_ref = torch.arange(V, device=z.device)[None, :] == target[:, None]  # (N, V)
    grad = p * (g_s + g_n)[:, None] - e * g_s[:, None] - is_ref * on_ref[:, None]
    return grad.to(z.dtype)


class _Compiled:
    """torch.compile(fn) on first use, with dynamic shapes (N changes every batch); eager if that fails."""

    def __init__(self, fn):
        self.fn, self.compiled = fn, None

    def __call__(self, *args):
        if self.compiled is None:
            try:
                self.compiled = torch.compile(self.fn, dynamic=True)
                return self.compiled(*args)
            except Exception as e:  # no Triton, an unsupported GPU: the same math, unfused
                name = self.fn.__name__
                warnings.warn(f"torch.compile of {name} failed ({type(e).__name__}): eager", stacklevel=2)
                self.compiled = self.fn
        return self.compiled(*args)


_forward_compiled = _Compiled(_smoothed_ce_forward)
_backward_compiled = _Compiled(_smoothed_ce_backward)


class FusedSmoothedCrossEntropy(torch.autograd.Function):
    """SmoothedCrossEntropy for GPUs: the same loss and gradient from the logits in their own dtype.

    At the paper's batch (25K target tokens, 37K vocabulary) the logits are 1.9 GB in bf16; a float32 copy
    and the CPU version's elementwise passes over it (3.7 GB each) cost a quarter of a base training step
    on an H100 (79 -> 59 ms with this path; benchmarks/gpu_speed.py). Here torch.compile fuses the forward
    into one read of z (max, sum of exp, sum, the reference logit) and the backward into one read of z and
    one write of the gradient; what is kept for backward is z itself (no copy) and lse (N,).
    compiled=False: the same math, eager (tests).
    """

    @staticmethod
    def forward(ctx, z: Tensor, target: Tensor, eps: float, compiled: bool) -> tuple[Tensor, Tensor]:
        smoothed, nll, lse = (_forward_compiled if compiled else _smoothed_ce_forward)(z, target, eps)
        ctx.save_for_backward(z, target, lse)
        ctx.eps, ctx.compiled = eps, compiled
        return smoothed, nll

    @staticmethod
    def backward(ctx, g_smoothed: Tensor, g_nll: Tensor):
        z, target, lse = ctx.saved_tensors
        fn = _backward_compiled if ctx.compiled else _smoothed_ce_backward
        g_s, g_n = _at_least_f32(g_smoothed), _at_least_f32(g_nll)
        return fn(z, target, lse, g_s, g_n, ctx.eps), None, None, None


class _ProjectInto(torch.autograd.Function):
    """logits = hidden @ weight^T (the model's output projection), written into a given (N, V) tensor."""

    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, owner: LogitsBuffer) -> Tensor:
        ctx.save_for_backward(hidden, weight)  # not the output: a consuming loss may overwrite it
        ctx.owner = owner
        # (N, V) over the kept storage: a new tensor, not a view, so autograd treats it as any output
        out = hidden.new_empty(0).set_(owner.storage, 0, (hidden.shape[0], weight.shape[0]))
        return torch.mm(hidden, weight.t(), out=out)  # (N, d) x (d, V) -> (N, V)

    @staticmethod
    def backward(ctx, g: Tensor):  # g (N, V)
        hidden, weight = ctx.saved_tensors
        ctx.owner.busy = False  # the memory may be handed out again
        return g @ weight, g.t() @ hidden, None


class LogitsBuffer:
    """Memory for the training step's (N, V) logits, kept from one step to the next.

    Why: a fresh (N, V) tensor is larger than glibc's largest heap allocation (32 MiB; 49 MB at N 1,536,
    V 8,000), so every step maps new pages and faults them in while the projection writes them: measured
    here, the projection ran at 80 GFLOP/s into new memory and 121 GFLOP/s into reused memory. With a
    consuming loss (label_smoothed_loss(consume_logits=True)) the same memory then holds the softmax and
    the logits' gradient. Handed out again only after the backward pass that used it (otherwise a fresh
    tensor is made), so a second forward before a backward cannot overwrite logits still needed.
    """

    def __init__(self) -> None:
        self.storage: torch.UntypedStorage | None = None
        self.busy = False

    def project(self, hidden: Tensor, weight: Tensor) -> Tensor:  # hidden (N, d), weight (V, d) -> (N, V)
        plain = (
            self.busy
            or not torch.is_grad_enabled()
            or hidden.device.type != "cpu"
            or torch.is_autocast_enabled("cpu")
            or hidden.dtype != weight.dtype
        )
        if plain:
            return torch.nn.functional.linear(hidden, weight)
        nbytes = hidden.shape[0] * weight.shape[0] * hidden.element_size()
        if self.storage is None or self.storage.nbytes() < nbytes:
            self.storage = torch.UntypedStorage(nbytes)
        self.busy = True
        return _ProjectInto.apply(hidden, weight, self)


FUSED_ON_CUDA = True  # CUDA logits go through FusedSmoothedCrossEntropy (benchmarks turn it off to compare)


def label_smoothed_loss(
    logits: Tensor,
    target: Tensor,
    eps: float,
    pad_id: int,
    per_sentence: bool = False,
    consume_logits: bool = False,
) -> LossSums:
    """Cross-entropy against q = (1 - eps) on the reference token and eps / (V - 1) on each other token.

    logits (..., V) in any float dtype; target (...) with pad_id where there is no token: (B, T) for
    per-sentence sums, or any shape (e.g. only the real tokens, flattened) otherwise. Without materializing
    a (B, T, V) log-softmax (see SmoothedCrossEntropy). consume_logits: the caller will not read `logits`
    again, so their memory is reused for the softmax (one (N, V) allocation and pass fewer in training).
    """
    V = logits.shape[-1]
    flat_t = target.reshape(-1)
    if FUSED_ON_CUDA and logits.is_cuda and logits.dtype != torch.float64:
        smoothed, nll = FusedSmoothedCrossEntropy.apply(logits.reshape(-1, V), flat_t, float(eps), True)
    else:
        z = logits if logits.dtype == torch.float64 else logits.float()  # bf16 logits: the loss in fp32
        smoothed, nll = SmoothedCrossEntropy.apply(z.reshape(-1, V), flat_t, float(eps), consume_logits)
    mask = target != pad_id
    nll = nll.reshape(target.shape).masked_fill(~mask, 0.0)
    smoothed = smoothed.reshape(target.shape).masked_fill(~mask, 0.0)
    out = LossSums(smoothed.sum(), nll.sum(), mask.sum())
    if per_sentence:
        out.nll_per_sentence = nll.sum(-1)
        out.tokens_per_sentence = mask.sum(-1)
    return out


class Criterion:
    """The criterion seam (`model.criterion`, docs/models.md): built as `Criterion(label_smoothing, pad_id)`,
    called as `criterion(model, hidden (B, T, d), target (B, T))`, it returns the batch's LossSums. A
    researcher's criterion may subclass it or not: training checks what a call returns (LossSums, else one
    line naming the class), and calls each optional method below only where the criterion has it; here
    each does nothing."""

    def __init__(self, label_smoothing: float, pad_id: int):
        self.eps, self.pad_id = label_smoothing, pad_id

    def __call__(self, model: torch.nn.Module, hidden: Tensor, target: Tensor) -> LossSums:
        raise NotImplementedError(f"{type(self).__name__} does not compute a loss (its __call__)")

    def skipped(self) -> None:
        """train.on_nonfinite=skip: the step's loss was not finite, no backward runs through its graph."""


def optional(criterion: object, method: str):
    """A criterion's optional method (Criterion's), or Criterion's own (nothing) where it has none."""
    found = getattr(criterion, method, None)
    return found if callable(found) else getattr(Criterion, method).__get__(criterion)


class LabelSmoothedCrossEntropy(Criterion):
    """The paper's training loss (5.4) as a criterion: the default of `model.criterion`.

    A criterion is built with the row's eps_ls and the padding id, and called with the model, its
    teacher-forced hidden states (B, T, d) and the targets (B, T); it returns the batch's sums: `smoothed`
    the loss it trains, `nll` the unsmoothed -log p(y), and `aux` its other named terms (docs/models.md).
    Only the real target tokens are projected to logits: through the kept LogitsBuffer where the model
    names its output matrix (`output_weight`, logits = hidden @ W^T), else by the model's `logits`."""

    def __init__(self, label_smoothing: float, pad_id: int):
        super().__init__(label_smoothing, pad_id)
        self.buffer = LogitsBuffer()

    def logits(self, model: torch.nn.Module, hidden: Tensor) -> tuple[Tensor, bool]:
        """(logits (N, V) of hidden (N, d), whether the loss may overwrite them)."""
        weight = getattr(model, "output_weight", None)
        if weight is None:  # the model's own head may keep its output for backward: not consumed
            return model.logits(hidden), False
        return self.buffer.project(hidden, weight), True  # a linear layer keeps its input, not its output

    def __call__(self, model: torch.nn.Module, hidden: Tensor, target: Tensor) -> LossSums:
        real = target != self.pad_id  # (B, T)
        logits, consume = self.logits(model, hidden[real])
        return label_smoothed_loss(logits, target[real], self.eps, self.pad_id, consume_logits=consume)

    def skipped(self) -> None:
        """No backward will run through this step's graph: its logits' memory may be handed out again."""
        self.buffer.busy = False
