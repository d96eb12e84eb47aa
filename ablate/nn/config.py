"""The Transformer's hyperparameters (section 3, Table 3): the config of ablate/nn/model.py, apart from it
so that a config is read, checked and planned without importing torch."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TransformerConfig:
    vocab_size: int
    n_layers: int = 6  # N
    # Decoder depth when it differs from the encoder's (an option; every row of the paper uses N for both
    # stacks). None: N.
    n_dec_layers: int | None = None
    d_model: int = 512
    d_ff: int = 2048
    n_heads: int = 8  # h
    d_k: int = 64  # set independently of d_model / h: Table 3 rows (A) and (B)
    d_v: int = 64
    dropout: float = 0.1  # P_drop: residual and embedding dropout (section 5.4)
    attn_dropout: float = 0.0  # not in the paper's MT recipe; the parsing experiment tuned it (6.3)
    relu_dropout: float = 0.0  # not in the paper
    positional: str = "sinusoidal"  # sinusoidal | learned (Table 3 row E)
    norm: str = "post"  # post: LayerNorm(x + Sublayer(x)) as in 3.1 | pre: x + Sublayer(LayerNorm(x))
    max_positions: int = 1024  # rows of the learned position table (the paper does not give it)
    norm_eps: float = 1e-6  # tensor2tensor's value; the paper does not state one
    pad_id: int = 0

    def __post_init__(self) -> None:
        if self.positional not in ("sinusoidal", "learned"):
            raise ValueError(f"positional must be 'sinusoidal' or 'learned', got {self.positional!r}")
        if self.norm not in ("post", "pre"):
            raise ValueError(f"norm must be 'post' or 'pre', got {self.norm!r}")
        if self.positional == "sinusoidal" and self.d_model % 2:
            raise ValueError(f"sinusoidal positions need an even d_model, got {self.d_model}")
        if self.n_dec_layers is None:
            self.n_dec_layers = self.n_layers
