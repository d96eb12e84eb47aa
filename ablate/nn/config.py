"""The Transformer's hyperparameters (section 3, Table 3): the config of ablate/nn/model.py, apart from it
so that a config is read, checked and planned without importing torch."""

from __future__ import annotations

from dataclasses import dataclass

# The choices of each component key; the first is the paper's (docs/models.md gives each one's formula).
FFN_KINDS = ("relu", "gelu", "swish", "glu", "bilinear", "geglu", "reglu", "swiglu")  # Shazeer 2020
GATED_FFN = ("glu", "bilinear", "geglu", "reglu", "swiglu")  # (act(x W) * x V) W2: three matrices
NORMS = ("post", "pre")  # where the norm sits in a residual unit
NORM_TYPES = ("layer", "rms")  # LayerNorm (Ba et al. 2016) | RMSNorm (Zhang & Sennrich 2019)
POSITIONALS = ("sinusoidal", "learned", "rotary", "none")  # rotary: Su et al. 2021
# Keys a record of an older version does not have: such a record was built with these values.
ADDED_DEFAULTS = {"ffn": "relu", "norm_type": "layer", "tie_embeddings": True}


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
    relu_dropout: float = 0.0  # not in the paper; on the FFN's hidden activation, whatever its kind
    # sinusoidal | learned (Table 3 row E), added to the embeddings | rotary: queries and keys of
    # self-attention rotated by their position | none: no positions
    positional: str = "sinusoidal"
    norm: str = "post"  # post: Norm(x + Sublayer(x)) as in 3.1 | pre: x + Sublayer(Norm(x))
    max_positions: int = 1024  # rows of the learned position table (the paper does not give it)
    norm_eps: float = 1e-6  # tensor2tensor's value; the paper does not state one
    pad_id: int = 0
    ffn: str = "relu"  # the feed-forward network (3.3): one of FFN_KINDS
    norm_type: str = "layer"  # the norm of every residual unit (and pre-LN's final norms): NORM_TYPES
    # one matrix for source embedding, target embedding and output projection (3.4), or three
    tie_embeddings: bool = True

    def __post_init__(self) -> None:
        for key, allowed in (
            ("positional", POSITIONALS),
            ("norm", NORMS),
            ("ffn", FFN_KINDS),
            ("norm_type", NORM_TYPES),
        ):
            if getattr(self, key) not in allowed:
                raise ValueError(f"{key}={getattr(self, key)!r}: not one of {', '.join(allowed)}")
        if self.positional == "sinusoidal" and self.d_model % 2:
            raise ValueError(f"sinusoidal positions need an even d_model, got {self.d_model}")
        if self.positional == "rotary" and self.d_k % 2:
            raise ValueError(f"rotary positions need an even d_k (they rotate pairs), got {self.d_k}")
        if self.n_dec_layers is None:
            self.n_dec_layers = self.n_layers
