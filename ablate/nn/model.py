"""The Transformer of "Attention Is All You Need" (Vaswani et al. 2017), in plain PyTorch.

Read top to bottom in the paper's order: config (`TransformerConfig`, in ablate/nn/config.py so that a
config is read without torch), embeddings + positions (section 3.4, 3.5; rotary positions, an option),
multi-head attention (3.2), the position-wise feed-forward network (3.3; its gated variants, an option),
the residual unit and its norm (3.1; RMSNorm, an option), encoder and decoder layers (3.1), the stacks,
and the model with its incremental-decoding cache. Only torch and that config are imported here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ablate.nn.config import GATED_FFN, TransformerConfig  # the paper's hyperparameters (section 3, Table 3)

# ----------------------------------------------------------------------------------------------------------
# Embeddings and positions (3.4, 3.5)


def sinusoid_table(n_positions: int, d_model: int) -> Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)), interleaved (3.5)."""
    pos = torch.arange(n_positions, dtype=torch.float64)[:, None]  # (P, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)[None, :]  # (1, d/2)
    angle = pos / torch.pow(10000.0, two_i / d_model)  # (P, d/2)
    table = torch.empty(n_positions, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle)
    return table.float()


ADDED_POSITIONS = ("sinusoidal", "learned")  # absolute positions, added to the embeddings


class Positions(nn.Module):
    """Sinusoidal (no parameters) or learned absolute positions, added to the scaled token embeddings."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.learned = cfg.positional == "learned"
        if self.learned:
            self.table = nn.Embedding(cfg.max_positions, cfg.d_model)
            nn.init.normal_(self.table.weight, std=cfg.d_model**-0.5)
        else:
            self.register_buffer("table", sinusoid_table(cfg.max_positions, cfg.d_model), persistent=False)
        self.d_model = cfg.d_model

    def forward(self, start: int, length: int) -> Tensor:  # -> (length, d)
        end = start + length
        if self.learned:
            if end > self.table.num_embeddings:
                raise ValueError(f"position {end} exceeds the learned table ({self.table.num_embeddings})")
            return self.table.weight[start:end]
        if end > self.table.shape[0]:  # sinusoids extrapolate: grow the table (3.5)
            self.table = sinusoid_table(2 * end, self.d_model).to(self.table.device)
        return self.table[start:end]


def rotary_angles(n_positions: int, d_k: int) -> Tensor:
    """m * theta_i with theta_i = 10000^(-2i/d_k), i = 0 .. d_k/2 - 1 (Su et al. 2021, eq. 15), in float64."""
    pos = torch.arange(n_positions, dtype=torch.float64)[:, None]  # (P, 1)
    two_i = torch.arange(0, d_k, 2, dtype=torch.float64)[None, :]  # (1, d_k/2)
    return pos / torch.pow(10000.0, two_i / d_k)  # (P, d_k/2)


class Rotary(nn.Module):
    """Rotary positions (RoFormer, Su et al. 2021, eq. 34), applied to self-attention's queries and keys:
    each pair (x_2i, x_2i+1) of a query or key at position m turns by the angle m * theta_i,

        x_2i   -> x_2i cos(m theta_i) - x_2i+1 sin(m theta_i)
        x_2i+1 -> x_2i sin(m theta_i) + x_2i+1 cos(m theta_i)

    A rotation keeps norms, and <R_m q, R_n k> = <q, R_(n-m) k>: a score depends on n - m only. Nothing is
    added to the embeddings; cross-attention has no positions (its queries and keys are in two sequences).
    One module shared by every self-attention layer; the table grows as sinusoids do (3.5)."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.d_k = cfg.d_k
        angle = rotary_angles(cfg.max_positions, cfg.d_k)  # float64: exact angles for a float64 model
        self.register_buffer("cos", angle.cos(), persistent=False)  # (P, d_k/2)
        self.register_buffer("sin", angle.sin(), persistent=False)

    def forward(self, x: Tensor, start: int = 0) -> Tensor:  # x (B, h, L, d_k) at start .. start+L-1
        end = start + x.shape[-2]
        if end > self.cos.shape[0]:
            angle = rotary_angles(2 * end, self.d_k).to(self.cos.device)
            self.cos, self.sin = angle.cos().to(self.cos.dtype), angle.sin().to(self.sin.dtype)
        cos = self.cos[start:end].to(x.dtype)  # (L, d_k/2)
        sin = self.sin[start:end].to(x.dtype)
        even, odd = x[..., 0::2], x[..., 1::2]  # (B, h, L, d_k/2): x_2i, x_2i+1
        return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)


class Dropout(nn.Module):
    """Inverted dropout (5.4), with a cheaper mask on CPU.

    On CPU, torch's dropout draws its mask with bernoulli_, one 32-bit draw per element (measured: 6.0 ms
    for 0.5M elements on 2 threads). Here one 64-bit draw over the full int64 range gives four uniform
    16-bit integers, and an element is kept when its integer is >= round(p * 2^16) (shifted to int16):
    P(drop) = round(p * 2^16) / 2^16, within 2^-17 = 7.6e-6 of p (0.1 -> 0.100006). 0.5M elements: 1.7 ms
    forward (3.8 ms with a 32-bit draw per element). On GPU, torch's fused dropout is cheap and is used.
    """

    def __init__(self, p: float):
        super().__init__()
        self.p = p
        self.threshold = -(2**15) + round(p * 2**16)  # int16 values below it are dropped

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        if x.device.type != "cpu" or torch.compiler.is_compiling():  # compiled: fused into its neighbours
            return F.dropout(x, self.p, True)
        return x * self.mask(x.shape, x.dtype)

    def mask(self, shape: torch.Size, dtype: torch.dtype) -> Tensor:  # 0 or 1 / (1 - p), of `shape`
        n = math.prod(shape)
        words = torch.empty((n + 3) // 4, dtype=torch.int64).random_(-(2**63), None)  # all 64 bits random
        bits = words.view(torch.int16)[:n].view(shape)  # uniform on [-2^15, 2^15)
        return (bits >= self.threshold).to(dtype).mul_(1.0 / (1.0 - self.p))


class Embed(nn.Module):
    """Token embedding * sqrt(d_model) + position, then dropout (3.4, 5.4). Rotary positions and none add
    nothing here."""

    def __init__(self, cfg: TransformerConfig, tokens: nn.Embedding):
        super().__init__()
        self.tokens = tokens  # tied: the same module in encoder, decoder and the output projection
        self.positions = Positions(cfg) if cfg.positional in ADDED_POSITIONS else None
        self.scale = math.sqrt(cfg.d_model)
        self.dropout = Dropout(cfg.dropout)

    def forward(self, ids: Tensor, start: int = 0) -> Tensor:  # ids (B, L) -> (B, L, d)
        if self.positions is None:
            return self.dropout(self.tokens(ids) * self.scale)
        x = self.tokens(ids) * self.scale + self.positions(start, ids.shape[1])
        return self.dropout(x)


# ----------------------------------------------------------------------------------------------------------
# Attention (3.2)


@dataclass
class LayerCache:
    """Keys and values of one decoder layer. Self-attention grows by one position a step; the
    encoder-decoder keys/values are computed once from the encoder output."""

    self_k: Tensor  # (R, h, T_max, d_k), filled up to `length`; R = B * group rows
    self_v: Tensor  # (R, h, T_max, d_v)
    cross_k: Tensor  # (B, h, S, d_k): one copy per source sentence, shared by its `group` rows
    cross_v: Tensor  # (B, h, S, d_v)


class KVCache:
    """Incremental-decoding state for the whole decoder: one LayerCache per layer and the step count.

    group: decoder rows per source sentence (a beam search's K beams, rows b*K .. b*K+K-1). The beams of a
    sentence attend to the same encoder keys/values, so those are kept once per sentence and the K beams
    are K queries of one attention call (MultiHeadAttention.forward_cross), not K copies of the source."""

    def __init__(self, layers: list[LayerCache], src_mask: Tensor, group: int = 1):
        self.layers = layers
        self.src_mask = src_mask  # (B, 1, 1, S) True where the key is a real token
        self.group = group
        self.length = 0  # positions written so far

    def reorder(self, index: Tensor, same_source: bool = False) -> None:
        """Keep rows `index` (B',) of every tensor, e.g. the surviving beams' parents.

        same_source: every row's new parent decodes the same source sentence (a beam step). The
        encoder-decoder keys/values and the source mask are then equal across the rows being permuted and
        are left alone, and only the filled positions of the self-attention cache are copied, into the
        same buffers."""
        if same_source:
            n = self.length
            for c in self.layers:
                c.self_k[:, :, :n] = c.self_k[:, :, :n].index_select(0, index)
                c.self_v[:, :, :n] = c.self_v[:, :, :n].index_select(0, index)
            return
        if self.group > 1:  # rows may move between sentences: one copy of the source per row first
            self._ungroup()
        for c in self.layers:
            c.self_k = c.self_k.index_select(0, index)
            c.self_v = c.self_v.index_select(0, index)
            c.cross_k = c.cross_k.index_select(0, index)
            c.cross_v = c.cross_v.index_select(0, index)
        self.src_mask = self.src_mask.index_select(0, index)

    def _ungroup(self) -> None:
        g = self.group
        for c in self.layers:
            c.cross_k = c.cross_k.repeat_interleave(g, 0)  # (B * g, h, S, d_k)
            c.cross_v = c.cross_v.repeat_interleave(g, 0)
        self.src_mask = self.src_mask.repeat_interleave(g, 0)
        self.group = 1


def scaled_dot_product(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool, dropout: nn.Module
) -> Tensor:  # q (B, h, L, d_k), k (B, h, S, d_k), v (B, h, S, d_v), mask (B, 1, 1, S) -> (B, h, L, d_v)
    """Equation 1 in four plain ops. On CPU this is faster than SDPA's flash kernel at the sentence lengths
    of translation (L, S ~ 20-100: 5.5 vs 8-9 ms forward + backward at B 64, h 4, L 24, d_k 64) and for
    one-query decoding steps; the (B, h, L, S) scores it keeps for backward are small there."""
    scores = torch.matmul(q, k.transpose(-2, -1)).mul_(q.shape[-1] ** -0.5)  # (B, h, L, S)
    if causal:  # position i attends to keys 0..i (top-left aligned, as SDPA's is_causal)
        L, S = scores.shape[-2:]
        scores.masked_fill_(torch.ones(L, S, dtype=torch.bool, device=q.device).triu_(1), float("-inf"))
    if mask is not None:
        scores.masked_fill_(~mask, float("-inf"))
    return torch.matmul(dropout(softmax_last(scores)), v)


def softmax_last(x: Tensor) -> Tensor:
    """Softmax over the last dimension. torch's CPU kernel is vectorized along that dimension and falls to a
    slow path below 16 entries, the key lengths of short sentences and of early decoding steps (measured on
    one thread: 3.7 ms forward for (136, 8, 15, 15), 0.5 ms for (68, 8, 30, 30) with twice the elements).
    There three elementwise ops are faster (2.1 against 5.5 ms forward + backward at (136, 8, 15, 15)).
    The shift by the row maximum is detached: softmax does not depend on it, so its gradient is zero."""
    if x.device.type != "cpu" or x.shape[-1] >= 16:
        return x.softmax(-1)
    e = (x - x.detach().amax(-1, keepdim=True)).exp()
    return e / e.sum(-1, keepdim=True)


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O with head_i = Attention(Q W^Q_i, K W^K_i, V W^V_i).

    Self-attention projects Q, K and V with one fused matmul (the same parameters as three), and with
    rotary positions rotates Q and K by their positions (`rotary`, shared by the layers)."""

    def __init__(self, cfg: TransformerConfig, self_attention: bool, rotary: Rotary | None = None):
        super().__init__()
        h, d, dk, dv = cfg.n_heads, cfg.d_model, cfg.d_k, cfg.d_v
        self.h, self.dk, self.dv = h, dk, dv
        self.self_attention = self_attention
        self.rotary = rotary
        if self_attention:
            self.qkv = nn.Linear(d, h * (2 * dk + dv))
        else:
            self.q = nn.Linear(d, h * dk)
            self.kv = nn.Linear(d, h * (dk + dv))
        self.out = nn.Linear(h * dv, d)
        self.attn_drop = Dropout(cfg.attn_dropout)

    def _heads(self, x: Tensor, d_head: int) -> Tensor:  # (B, L, h*d_head) -> (B, h, L, d_head)
        B, L, _ = x.shape
        return x.view(B, L, self.h, d_head).transpose(1, 2)

    def project_kv(self, memory: Tensor) -> tuple[Tensor, Tensor]:  # (B, S, d) -> 2 x (B, h, S, d_*)
        k, v = self.kv(memory).split([self.h * self.dk, self.h * self.dv], dim=-1)
        return self._heads(k, self.dk), self._heads(v, self.dv)

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool) -> Tensor:
        # softmax(Q K^T / sqrt(d_k)) V (equation 1). On GPU, SDPA's fused kernels; on CPU, written out.
        if q.device.type == "cpu":
            o = scaled_dot_product(q, k, v, mask, causal, self.attn_drop)
        else:
            p = self.attn_drop.p if self.training else 0.0
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, is_causal=causal)
        B, _, L, _ = o.shape
        return self.out(o.transpose(1, 2).reshape(B, L, self.h * self.dv))  # (B, L, d)

    def forward_self(self, x: Tensor, mask: Tensor | None, causal: bool) -> Tensor:  # positions 0 .. L-1
        q, k, v = self.qkv(x).split([self.h * self.dk, self.h * self.dk, self.h * self.dv], dim=-1)
        q, k = self._heads(q, self.dk), self._heads(k, self.dk)  # (B, h, L, d_k)
        if self.rotary is not None:
            q, k = self.rotary(q), self.rotary(k)
        return self._attend(q, k, self._heads(v, self.dv), mask, causal)

    def forward_self_step(self, x: Tensor, cache: LayerCache, t: int) -> Tensor:
        """One new position t (x: (B, 1, d)) attending to positions 0..t held in the cache (rotary: the
        cache holds each key rotated by its own position, as forward_self computes it)."""
        q, k, v = self.qkv(x).split([self.h * self.dk, self.h * self.dk, self.h * self.dv], dim=-1)
        q, k = self._heads(q, self.dk), self._heads(k, self.dk)  # (B, h, 1, d_k)
        if self.rotary is not None:
            q, k = self.rotary(q, t), self.rotary(k, t)
        cache.self_k[:, :, t : t + 1] = k
        cache.self_v[:, :, t : t + 1] = self._heads(v, self.dv)
        return self._attend(q, cache.self_k[:, :, : t + 1], cache.self_v[:, :, : t + 1], None, False)

    def forward_cross(self, x: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
        """x (R, L, d) against k, v (B, h, S, d_*) and mask (B, 1, 1, S). R = B: one row per source. R = B * g
        with L = 1 (a decoding step of g beams per sentence): the g rows are g query positions of their
        sentence, so its keys/values are read once instead of g times (same result per query)."""
        R, L, d = x.shape
        B = k.shape[0]
        if R != B:
            if L != 1 or R % B:
                raise ValueError(f"{R} query rows of length {L} for {B} sources: need R = B * g and L = 1")
            x = x.view(B, R // B, d)  # (B, g, d)
        return self._attend(self._heads(self.q(x), self.dk), k, v, mask, False).view(R, L, -1)


def _identity(x: Tensor) -> Tensor:
    return x


# The activation of each FFN kind (`ffn`): on the hidden units, or on the gate of a gated kind. GELU is the
# exact one, x Phi(x) (Hendrycks & Gimpel 2016); Swish is Swish_1(x) = x sigmoid(x) (Ramachandran et al.).
ACTIVATIONS = {
    "relu": F.relu, "gelu": F.gelu, "swish": F.silu,
    "glu": torch.sigmoid, "bilinear": _identity, "reglu": F.relu, "geglu": F.gelu, "swiglu": F.silu,
}  # fmt: skip


class FeedForward(nn.Module):
    """FFN(x) = max(0, x W1 + b1) W2 + b2 (3.3); gelu and swish put their activation in max's place.

    Gated (Shazeer 2020, "GLU Variants Improve Transformer"): FFN(x) = (act(x W + b) * (x V + c)) W2 + b2
    with act sigmoid (GLU), the identity (bilinear), max(0, .) (ReGLU), GELU (GEGLU) or Swish_1 (SwiGLU).
    Shazeer's formulas have no biases; these keep the paper's FFN's, so a gated kind differs from ReLU's
    only in its gate. W is w1 and V is v, two matmuls: one fused [W; V] matmul, split in two, was no faster
    on CPU (its backward concatenates the halves' gradients). relu_dropout drops the hidden units,
    act(x W + b) * (x V + c) for a gated kind."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.act = ACTIVATIONS[cfg.ffn]
        self.w1 = nn.Linear(cfg.d_model, cfg.d_ff)
        self.v = nn.Linear(cfg.d_model, cfg.d_ff) if cfg.ffn in GATED_FFN else None
        self.w2 = nn.Linear(cfg.d_ff, cfg.d_model)
        self.dropout = Dropout(cfg.relu_dropout) if cfg.relu_dropout > 0 else nn.Identity()

    def forward(self, x: Tensor) -> Tensor:  # (..., d) -> (..., d)
        if self.v is not None:  # (..., d_ff): act(x W + b) * (x V + c)
            return self.w2(self.dropout(self.act(self.w1(x)) * self.v(x)))
        return self.w2(self.dropout(self.act(self.w1(x))))


def make_norm(cfg: TransformerConfig) -> nn.Module:
    """LayerNorm(x) = (x - mean(x)) / sqrt(var(x) + eps) * g + b (Ba et al. 2016), the paper's; or
    RMSNorm(x) = x / sqrt(mean(x^2) + eps) * g (Zhang & Sennrich 2019): no centring, no bias."""
    if cfg.norm_type == "rms":
        return nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
    return nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps)


class Residual(nn.Module):
    """Post-LN: Norm(x + Dropout(Sublayer(x))) (3.1, 5.4).
    Pre-LN (an option): x + Dropout(Sublayer(Norm(x))). Norm: LayerNorm, or RMSNorm (`norm_type`)."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.norm = make_norm(cfg)
        self.dropout = Dropout(cfg.dropout)
        self.pre = cfg.norm == "pre"

    def forward(self, x: Tensor, sublayer) -> Tensor:
        if self.pre:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))


# ----------------------------------------------------------------------------------------------------------
# Layers and stacks (3.1)


class EncoderLayer(nn.Module):
    def __init__(self, cfg: TransformerConfig, rotary: Rotary | None = None):
        super().__init__()
        self.attn = MultiHeadAttention(cfg, self_attention=True, rotary=rotary)
        self.ffn = FeedForward(cfg)
        self.res1, self.res2 = Residual(cfg), Residual(cfg)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:  # x (B, S, d); mask (B, 1, 1, S)
        x = self.res1(x, lambda y: self.attn.forward_self(y, mask, causal=False))
        return self.res2(x, self.ffn)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: TransformerConfig, rotary: Rotary | None = None):
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg, self_attention=True, rotary=rotary)
        self.cross_attn = MultiHeadAttention(cfg, self_attention=False)
        self.ffn = FeedForward(cfg)
        self.res1, self.res2, self.res3 = Residual(cfg), Residual(cfg), Residual(cfg)

    def forward(self, x: Tensor, memory: Tensor, src_mask: Tensor) -> Tensor:  # x (B, T, d)
        # Target padding sits after the real tokens, so the causal mask alone keeps every real query
        # away from padding keys: no target padding mask is needed.
        x = self.res1(x, lambda y: self.self_attn.forward_self(y, None, causal=True))
        k, v = self.cross_attn.project_kv(memory)
        x = self.res2(x, lambda y: self.cross_attn.forward_cross(y, k, v, src_mask))
        return self.res3(x, self.ffn)

    def step(self, x: Tensor, cache: LayerCache, src_mask: Tensor, t: int) -> Tensor:  # x (B, 1, d)
        x = self.res1(x, lambda y: self.self_attn.forward_self_step(y, cache, t))
        x = self.res2(x, lambda y: self.cross_attn.forward_cross(y, cache.cross_k, cache.cross_v, src_mask))
        return self.res3(x, self.ffn)


def init_tokens(weight: Tensor, cfg: TransformerConfig) -> None:
    """A (V, d) token matrix ~ N(0, 1/d), the padding row zero."""
    nn.init.normal_(weight, std=cfg.d_model**-0.5)
    with torch.no_grad():
        weight[cfg.pad_id].zero_()


def token_table(cfg: TransformerConfig) -> nn.Embedding:
    table = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=cfg.pad_id)
    init_tokens(table.weight, cfg)
    return table


class Transformer(nn.Module):
    """Encoder-decoder with one embedding matrix shared by source, target and the pre-softmax projection
    (3.4), or, untied (`tie_embeddings` false), three: a source embedding (`src_embed.tokens`), a target
    embedding (`tgt_embed.tokens`) and an output projection (`output`, no bias), each initialized as the
    shared one.

    It implements the model contract of docs/models.md: `forward` and `logits` to train, `encode`,
    `start_cache` and `step` (a cache with `reorder`) to be searched."""

    config_class = TransformerConfig  # its keys; the scale acts on them by Table 3's rules (ablate.config)

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.cfg = cfg
        if cfg.tie_embeddings:
            self.embedding = token_table(cfg)
            src_tokens = tgt_tokens = self.embedding
        else:
            src_tokens, tgt_tokens = token_table(cfg), token_table(cfg)
        self.src_embed = Embed(cfg, src_tokens)
        self.tgt_embed = Embed(cfg, tgt_tokens)
        rotary = Rotary(cfg) if cfg.positional == "rotary" else None  # no parameters: one for all layers
        self.encoder = nn.ModuleList(EncoderLayer(cfg, rotary) for _ in range(cfg.n_layers))
        self.decoder = nn.ModuleList(DecoderLayer(cfg, rotary) for _ in range(cfg.n_dec_layers))
        # Pre-LN stacks need a final norm; the paper's post-LN stack has none (section 3.1).
        pre = cfg.norm == "pre"
        self.enc_norm = make_norm(cfg) if pre else nn.Identity()
        self.dec_norm = make_norm(cfg) if pre else nn.Identity()
        if not cfg.tie_embeddings:
            self.output = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
            init_tokens(self.output.weight, cfg)  # as the tied matrix starts: logits of its scale
        self._init_linear()

    def _init_linear(self) -> None:
        # The paper gives no initialization; Xavier-uniform is what tensor2tensor's unit-scaling amounts to.
        # Token and position tables (and the untied output projection) keep theirs.
        tables = {id(m.weight) for m in self.modules() if isinstance(m, nn.Embedding)}
        if not self.cfg.tie_embeddings:
            tables.add(id(self.output.weight))
        for name, p in self.named_parameters():
            if p.dim() == 2 and id(p) not in tables:
                nn.init.xavier_uniform_(p)
            elif name.endswith(".bias"):
                nn.init.zeros_(p)

    def src_mask(self, src: Tensor) -> Tensor:  # (B, S) -> (B, 1, 1, S), True = attend
        return (src != self.cfg.pad_id)[:, None, None, :]

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:  # src (B, S) -> memory (B, S, d), mask
        mask = self.src_mask(src)
        x = self.src_embed(src)
        for layer in self.encoder:
            x = layer(x, mask)
        return self.enc_norm(x), mask

    def decode(self, tgt_in: Tensor, memory: Tensor, src_mask: Tensor) -> Tensor:  # -> hidden (B, T, d)
        x = self.tgt_embed(tgt_in)
        for layer in self.decoder:
            x = layer(x, memory, src_mask)
        return self.dec_norm(x)

    def logits(self, hidden: Tensor) -> Tensor:  # (..., d) -> (..., V): the output matrix, transposed
        return F.linear(hidden, self.output_weight)

    @property
    def output_weight(self) -> Tensor:  # (V, d): logits = hidden @ output_weight^T, no bias
        return self.embedding.weight if self.cfg.tie_embeddings else self.output.weight

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:  # -> hidden states; see `logits`
        memory, mask = self.encode(src)
        return self.decode(tgt_in, memory, mask)

    # -- incremental decoding ------------------------------------------------------------------------------

    def start_cache(self, memory: Tensor, src_mask: Tensor, max_len: int, group: int = 1) -> KVCache:
        """A cache for `group` decoder rows per source sentence (memory (B, S, d)): B * group rows."""
        B = memory.shape[0] * group
        h, dk, dv = self.cfg.n_heads, self.cfg.d_k, self.cfg.d_v
        layers = []
        for layer in self.decoder:
            # computed once per source (3.2.3), laid out (B, h, S, d_*) so no step copies them again
            ck, cv = (t.contiguous() for t in layer.cross_attn.project_kv(memory))
            layers.append(
                LayerCache(
                    self_k=memory.new_zeros(B, h, max_len, dk),
                    self_v=memory.new_zeros(B, h, max_len, dv),
                    cross_k=ck,
                    cross_v=cv,
                )
            )
        return KVCache(layers, src_mask, group)

    def step(self, tokens: Tensor, cache: KVCache) -> Tensor:
        """Feed one token per row (tokens (B,)) at position cache.length; return logits (B, V)."""
        t = cache.length
        x = self.tgt_embed(tokens[:, None], start=t)  # (B, 1, d)
        for layer, c in zip(self.decoder, cache.layers):
            x = layer.step(x, c, cache.src_mask, t)
        cache.length = t + 1
        return self.logits(self.dec_norm(x[:, 0]))


def count_parameters(model: nn.Module) -> int:
    """Trainable parameters, each shared tensor counted once (named_parameters de-duplicates)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
