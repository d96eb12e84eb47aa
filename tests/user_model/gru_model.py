"""A researcher's own model, outside the package: a GRU encoder-decoder with attention (Luong et al. 2015's
"general" score), and its criterion: the paper's label-smoothed loss plus an auxiliary z-loss.

    cd tests/user_model && python -m ablate.run experiment=gru model=gru   # a study (study.yaml)

Nothing under ablate/ names it: `model.arch=gru_model:GRUSeq2Seq` loads the class, which declares its
keys (`GRUConfig`) and which of them a scale multiplies; its rows lie in this folder's conf/model/
(docs/models.md). It implements the model contract: `forward` and `logits` to train, `encode`,
`start_cache` and `step` to be searched (beam search, ensembles and checkpoint averaging follow).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ablate.nn.loss import LabelSmoothedCrossEntropy, LossSums, label_smoothed_loss


@dataclass
class GRUConfig:
    vocab_size: int
    pad_id: int = 0
    d_model: int = 256  # embedding and hidden width (the inverse-sqrt schedule reads it)
    layers: int = 2  # of the encoder and of the decoder
    dropout: float = 0.1
    attention: bool = True  # False: the decoder sees the source only through its initial state


@dataclass
class GRUCache:
    h: Tensor  # (layers, R, d) the decoder's state
    memory: Tensor  # (R, S, d) one copy per row
    mask: Tensor  # (R, S) True at real source tokens
    length: int = 0

    def reorder(self, index: Tensor, same_source: bool = False) -> None:
        self.h = self.h.index_select(1, index)
        if not same_source:  # a beam step keeps each row on its sentence: memory rows are equal
            self.memory, self.mask = self.memory.index_select(0, index), self.mask.index_select(0, index)


class GRUSeq2Seq(nn.Module):
    """Embeddings tied three ways, a GRU encoder, the decoder's initial state from the mean of the encoder
    states, a GRU decoder, and attention over the encoder states before the output projection."""

    config_class = GRUConfig
    widths = ("d_model",)
    depths = ("layers",)
    rates = ("dropout",)

    def __init__(self, cfg: GRUConfig):
        super().__init__()
        self.cfg, d = cfg, cfg.d_model
        self.embedding = nn.Embedding(cfg.vocab_size, d, padding_idx=cfg.pad_id)
        nn.init.normal_(self.embedding.weight, std=d**-0.5)
        drop = cfg.dropout if cfg.layers > 1 else 0.0
        self.encoder = nn.GRU(d, d, cfg.layers, batch_first=True, dropout=drop)
        self.decoder = nn.GRU(d, d, cfg.layers, batch_first=True, dropout=drop)
        self.init = nn.Linear(d, cfg.layers * d)
        if cfg.attention:
            self.score = nn.Linear(d, d, bias=False)  # score(o, m) = o W m^T
            self.combine = nn.Linear(2 * d, d)  # tanh(W [o; context])
        self.drop = nn.Dropout(cfg.dropout)

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:  # src (B, S) -> memory (B, S, d), mask (B, S)
        mask = src != self.cfg.pad_id
        memory, _ = self.encoder(self.drop(self.embedding(src)))
        return memory, mask

    def _h0(self, memory: Tensor, mask: Tensor) -> Tensor:  # -> (layers, B, d)
        m = mask[..., None].to(memory.dtype)
        mean = (memory * m).sum(1) / m.sum(1).clamp(min=1.0)  # (B, d)
        B, L, d = mean.shape[0], self.cfg.layers, self.cfg.d_model
        return torch.tanh(self.init(mean)).view(B, L, d).transpose(0, 1).contiguous()

    def _attend(self, out: Tensor, memory: Tensor, mask: Tensor) -> Tensor:  # out (B, T, d) -> (B, T, d)
        if not self.cfg.attention:
            return self.drop(out)
        scores = self.score(out) @ memory.transpose(1, 2)  # (B, T, S)
        scores = scores.masked_fill(~mask[:, None, :], float("-inf"))
        context = scores.softmax(-1) @ memory  # (B, T, d)
        return self.drop(torch.tanh(self.combine(torch.cat([out, context], -1))))

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:  # -> hidden (B, T, d); see `logits`
        memory, mask = self.encode(src)
        out, _ = self.decoder(self.drop(self.embedding(tgt_in)), self._h0(memory, mask))
        return self._attend(out, memory, mask)

    def logits(self, hidden: Tensor) -> Tensor:  # (..., d) -> (..., V)
        return F.linear(hidden, self.embedding.weight)

    def start_cache(self, memory: Tensor, mask: Tensor, max_len: int, group: int = 1) -> GRUCache:
        h0 = self._h0(memory, mask).repeat_interleave(group, 1)  # (layers, B * group, d)
        return GRUCache(h0, memory.repeat_interleave(group, 0), mask.repeat_interleave(group, 0))

    def step(self, tokens: Tensor, cache: GRUCache) -> Tensor:  # tokens (R,) -> logits (R, V)
        out, cache.h = self.decoder(self.drop(self.embedding(tokens[:, None])), cache.h)
        cache.length += 1
        return self.logits(self._attend(out, cache.memory, cache.mask)[:, 0])


class ZLossCrossEntropy(LabelSmoothedCrossEntropy):
    """The paper's label-smoothed loss plus z-loss (Chowdhery et al. 2022): weight * log(Z)^2 per token,
    which keeps the softmax normalizer near 1. Logged and curved as `zloss`."""

    weight = 1e-3

    def __call__(self, model: nn.Module, hidden: Tensor, target: Tensor) -> LossSums:
        real = target != self.pad_id
        logits, _ = self.logits(model, hidden[real])
        zloss = self.weight * torch.logsumexp(logits.float(), -1).pow(2).sum()
        sums = label_smoothed_loss(logits, target[real], self.eps, self.pad_id)  # logits read again above
        sums.aux["zloss"] = zloss
        return sums
