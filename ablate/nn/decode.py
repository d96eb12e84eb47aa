"""Greedy and beam search (section 6.1: beam 4, length penalty alpha 0.6, max length input + 50, early stop).

The search talks to a `Stepper`: `start` encodes a batch, `step` returns next-token logits for one token per
row, `reorder` keeps the rows the search chose. `CachedStepper` uses the model's cache: the Transformer's KV
cache, or that of any model implementing the search contract (`Searchable`, docs/models.md); `UncachedStepper`
re-runs the decoder over the whole prefix each step and is the reference the cached path must match;
`EnsembleStepper` searches several models as one. Tests
plug in a hand-built probability table. Only torch is imported here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor

from ablate.nn.model import Transformer


class Stepper(Protocol):
    # rows: `beams` decoder rows per source sentence, sentence b's at b * beams .. b * beams + beams - 1
    def start(self, src: Tensor, max_len: int, beams: int = 1) -> object: ...
    def step(self, tokens: Tensor, state: object) -> Tensor: ...  # tokens (R,) -> logits (R, V)
    # same_source: each row's new parent decodes the same sentence (a beam step), so per-source state stays
    def reorder(self, state: object, index: Tensor, same_source: bool = False) -> object: ...


class Searchable(Protocol):
    """What a model implements to be searched: encode once, then one step a token on its cache."""

    def encode(self, src: Tensor) -> tuple[Any, Any]: ...  # src (B, S) -> (memory, mask)
    # a cache of `group` rows per sentence, with reorder(index, same_source) as KVCache's
    def start_cache(self, memory: Any, mask: Any, max_len: int, group: int = 1) -> Any: ...
    def step(self, tokens: Tensor, cache: Any) -> Tensor: ...  # tokens (R,) -> logits (R, V)


class CachedStepper:
    def __init__(self, model: Searchable):
        self.model = model

    def start(self, src: Tensor, max_len: int, beams: int = 1) -> Any:  # the model's cache (KVCache)
        memory, mask = self.model.encode(src)
        return self.model.start_cache(memory, mask, max_len, group=beams)

    def step(self, tokens: Tensor, state: Any) -> Tensor:
        return self.model.step(tokens, state)

    def reorder(self, state: Any, index: Tensor, same_source: bool = False) -> Any:
        state.reorder(index, same_source)
        return state


class EnsembleStepper:
    """Several models with one vocabulary searched as one: the next-token distribution is the mean of the
    models' probabilities, log(1/n sum_i softmax(logits_i)), as Vinyals et al. (2015) ensemble parsers and
    fairseq's EnsembleModel averages them. Each member keeps its own state (its KV cache)."""

    def __init__(self, steppers: list[Stepper]):
        self.steppers = list(steppers)

    def start(self, src: Tensor, max_len: int, beams: int = 1) -> list[object]:
        return [s.start(src, max_len, beams) for s in self.steppers]

    def step(self, tokens: Tensor, state: list[object]) -> Tensor:
        pairs = zip(self.steppers, state, strict=True)
        logp = torch.stack([_wide(s.step(tokens, st)).log_softmax(-1) for s, st in pairs])  # (n, R, V)
        return torch.logsumexp(logp, dim=0) - math.log(len(self.steppers))  # (R, V) log-probabilities

    def reorder(self, state: list[object], index: Tensor, same_source: bool = False) -> list[object]:
        return [s.reorder(st, index, same_source) for s, st in zip(self.steppers, state, strict=True)]


def _wide(logits: Tensor) -> Tensor:
    """float16 and bfloat16 to float32 before a softmax; float32 and float64 as they are."""
    return logits.to(torch.promote_types(logits.dtype, torch.float32))


@dataclass
class Prefix:
    memory: Tensor  # (R, S, d)
    mask: Tensor  # (R, 1, 1, S)
    tokens: Tensor  # (R, t) decoder inputs so far


class UncachedStepper:
    """Reference path: the full (training-time) decoder over the whole prefix at every step."""

    def __init__(self, model: Transformer):
        self.model = model

    def start(self, src: Tensor, max_len: int, beams: int = 1) -> Prefix:
        memory, mask = self.model.encode(src)
        rows = torch.arange(src.shape[0], device=src.device).repeat_interleave(beams)
        return Prefix(memory[rows], mask[rows], src.new_zeros(len(rows), 0))

    def step(self, tokens: Tensor, state: Prefix) -> Tensor:
        state.tokens = torch.cat([state.tokens, tokens[:, None]], dim=1)
        hidden = self.model.decode(state.tokens, state.memory, state.mask)
        return self.model.logits(hidden[:, -1])

    def reorder(self, state: Prefix, index: Tensor, same_source: bool = False) -> Prefix:
        return Prefix(
            state.memory.index_select(0, index),
            state.mask.index_select(0, index),
            state.tokens.index_select(0, index),
        )


def length_penalty(length: Tensor | float, alpha: float) -> Tensor | float:
    """GNMT: lp(Y) = ((5 + |Y|) / 6)^alpha (Wu et al. 2016), |Y| counting the end-of-sentence token."""
    return ((5.0 + length) / 6.0) ** alpha


def max_output_lengths(src_lengths: Tensor, a: float, b: int) -> Tensor:
    """Per-sentence cap on generated tokens, EOS included: a * |input| + b (6.1: input length + 50)."""
    return (src_lengths.float() * a + b).long().clamp(min=1)


@dataclass
class Hypotheses:
    tokens: list[list[int]]  # best hypothesis per sentence, without BOS/EOS
    scores: Tensor  # (B,) length-normalized log-probability of each


@dataclass
class BeamState:
    alive_seqs: Tensor  # (B, K, T) tokens generated so far by each live beam
    alive_logp: Tensor  # (B, K) their summed log-probabilities; -inf for unused beams
    fin_seqs: Tensor  # (B, K, T) finished hypotheses, EOS included
    fin_scores: Tensor  # (B, K) log-probability / length penalty; -inf where empty
    fin_lens: Tensor  # (B, K) number of tokens, EOS included
    done: Tensor  # (B,) no live beam can still beat the K-th finished one

    @classmethod
    def initial(cls, B: int, K: int, T: int, device: torch.device) -> BeamState:
        alive_logp = torch.full((B, K), float("-inf"), device=device)
        alive_logp[:, 0] = 0.0  # one live beam at first, so the K beams don't start as copies
        zeros = torch.zeros(B, K, T, dtype=torch.long, device=device)
        return cls(
            zeros,
            alive_logp,
            zeros.clone(),
            torch.full((B, K), float("-inf"), device=device),
            torch.zeros(B, K, dtype=torch.long, device=device),
            torch.zeros(B, dtype=torch.bool, device=device),
        )


def _gather_beams(x: Tensor, idx: Tensor) -> Tensor:  # x (B, K, ...), idx (B, K') -> (B, K', ...)
    view = idx.view(*idx.shape, *([1] * (x.dim() - 2))).expand(*idx.shape, *x.shape[2:])
    return x.gather(1, view)


def best_continuations(logits: Tensor, n: int, eos: int, eos_only: Tensor) -> tuple[Tensor, Tensor]:
    """Each row's n most probable next tokens (R, n) and their log-probabilities log_softmax(logits) (R, n).

    A beam step ranks alive_logp + log p over a sentence's K * V continuations; alive_logp is the same
    along a row, so the 2K best of a sentence are among its rows' 2K best each, and the (R, V) log-softmax
    and its sum with alive_logp need not be written: one top-k and one exp pass over the logits instead
    of log-softmax, add and top-k over (B, K * V) (alone, at 256 rows x 8,000: 12.6 -> 5.4 ms; within a
    whole search the allocator hid most of the difference). Rows in eos_only (R,) are at their length
    cap: their one candidate is EOS. `logits` (R, V), the stepper's fresh output, is overwritten.
    """
    n = min(n, logits.shape[-1])
    top_z, top_tok = logits.topk(n, dim=-1)  # (R, n), sorted: top_z[:, :1] is the row maximum
    m = top_z[:, :1].clone()  # (R, 1); a copy: top_z is shifted in place below
    z_eos = logits[:, eos : eos + 1] - m  # (R, 1), read before the exp below overwrites the logits
    # log sum exp(z - m); clamped at -80 (exp = 1.8e-35, nothing beside the maximum's 1) to stay off the
    # slow float32 exp path below about -87 (see loss.SmoothedCrossEntropy)
    log_s = logits.sub_(m).clamp_(min=-80.0).exp_().sum(-1, keepdim=True).log_()  # (R, 1)
    top_logp = top_z.sub_(m).sub_(log_s)  # (R, n)
    if eos_only.any():
        only = torch.full_like(top_logp, float("-inf"))
        only[:, :1] = z_eos - log_s
        top_logp = torch.where(eos_only[:, None], only, top_logp)
        top_tok = torch.where(eos_only[:, None], eos, top_tok)
    return top_logp, top_tok


@torch.no_grad()
def beam_search(
    stepper: Stepper,
    src: Tensor,
    src_lengths: Tensor,
    bos: int,
    eos: int,
    beam: int = 4,
    alpha: float = 0.6,
    max_len_a: float = 1.0,
    max_len_b: int = 50,
) -> Hypotheses:
    """Batched beam search; every tensor op covers all sentences and beams at once. One piece: the loop
    body is the paper's search step (6.1) and reads best top to bottom, the state in BeamState."""
    B, K = src.shape[0], beam
    device = src.device
    max_lens = max_output_lengths(src_lengths, max_len_a, max_len_b).to(device)  # (B,)
    T = int(max_lens.max())
    state = stepper.start(src, T, beams=K)  # B * K rows
    s = BeamState.initial(B, K, T, device)
    tokens = torch.full((B * K,), bos, dtype=torch.long, device=device)
    rows = torch.arange(B, device=device)[:, None] * K  # (B, 1) offset of each sentence's beams

    for t in range(T):
        at_cap = (t + 1) >= max_lens  # (B,) this token is the last allowed: it must be EOS
        logits = stepper.step(tokens, state).float()  # (B*K, V)
        row_logp, row_tok = best_continuations(logits, 2 * K, eos, at_cap.repeat_interleave(K))  # (B*K, n)
        n = row_logp.shape[-1]
        cand = (s.alive_logp[..., None] + row_logp.view(B, K, n)).view(B, K * n)  # (B, K*n)
        top_logp, top_idx = cand.topk(2 * K, dim=1)  # 2K: at most K of them end in EOS
        parent, tok = top_idx // n, row_tok.view(B, K * n).gather(1, top_idx)  # (B, 2K)
        is_eos = tok == eos

        # Finished: candidates ending in EOS join the K best so far, scored with the length penalty.
        cand_seqs = _gather_beams(s.alive_seqs, parent)  # (B, 2K, T)
        cand_seqs[:, :, t] = tok
        new_scores = torch.where(is_eos, top_logp / length_penalty(t + 1.0, alpha), float("-inf"))
        all_scores = torch.cat([s.fin_scores, new_scores], dim=1)  # (B, 3K)
        all_lens = torch.cat([s.fin_lens, torch.full_like(new_scores, t + 1, dtype=torch.long)], dim=1)
        s.fin_scores, keep = all_scores.topk(K, dim=1)
        s.fin_seqs = _gather_beams(torch.cat([s.fin_seqs, cand_seqs], dim=1), keep)
        s.fin_lens = all_lens.gather(1, keep)

        # Alive: the K best candidates that did not end.
        s.alive_logp, pick = torch.where(is_eos, float("-inf"), top_logp).topk(K, dim=1)  # (B, K)
        s.alive_seqs = _gather_beams(cand_seqs, pick)
        tokens = tok.gather(1, pick).view(-1)
        state = stepper.reorder(state, (rows + parent.gather(1, pick)).view(-1), same_source=True)

        # Early stop (6.1): the best live beam, even at the most favourable length, cannot beat the K-th
        # finished hypothesis. For alpha >= 0 the penalty grows with length, so the cap is most favourable.
        best_len = max_lens.float() if alpha >= 0 else torch.full_like(max_lens, t + 1, dtype=torch.float)
        bound = s.alive_logp[:, 0] / length_penalty(best_len, alpha)
        s.done |= (s.fin_scores[:, -1] > bound) | at_cap | torch.isinf(s.alive_logp[:, 0])
        if bool(s.done.all()):
            break

    best = s.fin_scores.argmax(dim=1)  # (B,)
    out = []
    for b in range(B):
        k = int(best[b])
        n = int(s.fin_lens[b, k])
        out.append(s.fin_seqs[b, k, : max(n - 1, 0)].tolist())  # drop EOS
    return Hypotheses(out, s.fin_scores.gather(1, best[:, None])[:, 0])


@torch.no_grad()
def greedy_search(
    stepper: Stepper,
    src: Tensor,
    src_lengths: Tensor,
    bos: int,
    eos: int,
    max_len_a: float = 1.0,
    max_len_b: int = 50,
) -> Hypotheses:
    B, device = src.shape[0], src.device
    max_lens = max_output_lengths(src_lengths, max_len_a, max_len_b).to(device)
    T = int(max_lens.max())
    state = stepper.start(src, T)
    tokens = torch.full((B,), bos, dtype=torch.long, device=device)
    out = torch.full((B, T), eos, dtype=torch.long, device=device)
    score = torch.zeros(B, device=device)
    finished = torch.zeros(B, dtype=torch.bool, device=device)
    for t in range(T):
        logp = torch.log_softmax(stepper.step(tokens, state).float(), dim=-1)
        logp[(t + 1) >= max_lens, :eos] = float("-inf")
        logp[(t + 1) >= max_lens, eos + 1 :] = float("-inf")
        lp, tokens = logp.max(dim=-1)
        tokens = torch.where(finished, eos, tokens)
        score += torch.where(finished, 0.0, lp)
        out[:, t] = tokens
        finished |= tokens == eos
        if bool(finished.all()):
            break
    hyps = []
    for row in out.tolist():
        hyps.append(row[: row.index(eos)] if eos in row else row)
    return Hypotheses(hyps, score)
