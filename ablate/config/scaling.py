"""A row under a recipe and a scale: what it trains as (`row_arch`, `effective_model`), for how many steps
(`total_steps`), in how many micro-batches a step (`accumulation`), and the refusal of a row a preset
cannot hold in its meaning (`check_row_meaning`)."""

from __future__ import annotations

import math
from dataclasses import fields, replace

from ablate.config.schema import PAPER_BASE, ArchConfig, ConfigError, ModelConfig, RunConfig
from ablate.nn.config import TransformerConfig  # torch-free: Hydra's plugin scan reads this package


def _scaled(x: int | float, factor: float) -> int:
    """A size under a ratio: rounded, never below 1 (e.g. d_k 16 x 1/8 -> 2)."""
    return max(1, int(round(x * factor)))


# How a row's change from the paper's base carries over to another base: sizes by the row's ratio to the
# paper's base (C's N, d_model, d_ff; B's d_k; big's steps, 3x), every other key by the row's value (P_drop,
# eps_ls, positions, the components: ffn, norm, norm_type, tie_embeddings). h: a row that changes h with
# d_k (A) takes its own h and splits d_model as the paper's row does (h * d_k = d_model); one that keeps
# d_k (big) has the ratio of heads, each of base's size.
_RATIO_KEYS = ("n_layers", "d_model", "d_ff", "d_k", "d_v", "train_steps")


def arch_varied(row: ModelConfig) -> list[str]:
    """The Transformer's keys (ArchConfig's) a row changes from the paper's base, explicit ones too."""
    keys = [f.name for f in fields(ArchConfig) if getattr(row, f.name) != getattr(PAPER_BASE, f.name)]
    return keys + [k for k in row.explicit if k not in keys and k in _ARCH_KEYS]


_ARCH_KEYS = {f.name for f in fields(ArchConfig)}  # the Transformer's (the rest of a row: config/arch.py)


def row_arch(cfg: RunConfig) -> ArchConfig:
    """The row carried over to the recipe's base, at the recipe's size (before the scale's ratios). Under
    the paper's base this is the row itself."""
    row, base = cfg.model, cfg.base
    changed = arch_varied(row)
    relative = [k for k in changed if k not in row.explicit]  # the command line's keys are taken as given
    out = {f.name: getattr(base, f.name) for f in fields(ArchConfig)}
    for key in changed:
        ratio = key in _RATIO_KEYS and key in relative
        mine = getattr(row, key)
        out[key] = _scaled(getattr(base, key), mine / getattr(PAPER_BASE, key)) if ratio else mine
    if "decoder_layers" in relative:
        out["decoder_layers"] = _scaled(
            base.decoder_layers or base.n_layers, row.decoder_layers / row.n_layers
        )
    if "n_heads" in relative and {"d_k", "d_v"} & set(changed):
        # A: the row's h splits d_model as in the paper (h * d_k = d_model)
        for key in sorted({"d_k", "d_v"} - set(row.explicit)):
            out[key] = _scaled(out["d_model"], getattr(row, key) / row.d_model)
    elif "n_heads" in relative:  # big: more heads, each of base's size
        out["n_heads"] = _scaled(base.n_heads, row.n_heads / PAPER_BASE.n_heads)
    return ArchConfig(**out)


def effective_model(cfg: RunConfig, vocab_size: int) -> TransformerConfig:
    """The row under the recipe's base and the scale's ratios, as the model builds it."""
    a, s = row_arch(cfg), cfg.scale
    d_model, d_k = _scaled(a.d_model, s.width), _scaled(a.d_k, s.width)
    if a.positional == "sinusoidal" and d_model % 2:
        d_model += 1
    if a.positional == "rotary" and d_k % 2:  # rotary positions turn pairs of a head's dimensions
        d_k += 1
    return TransformerConfig(
        vocab_size=vocab_size,
        n_layers=_scaled(a.n_layers, s.depth),
        n_dec_layers=None if a.decoder_layers is None else _scaled(a.decoder_layers, s.depth),
        d_model=d_model,
        d_ff=_scaled(a.d_ff, s.width),
        n_heads=a.n_heads,
        d_k=d_k,
        d_v=_scaled(a.d_v, s.width),
        dropout=a.dropout,
        attn_dropout=a.attn_dropout,
        relu_dropout=a.relu_dropout,
        positional=a.positional,
        norm=a.norm,
        max_positions=a.max_positions,
        ffn=a.ffn,
        norm_type=a.norm_type,
        tie_embeddings=a.tie_embeddings,
    )


def preset_name(cfg: RunConfig) -> str:
    """The preset a row runs under, as messages and reports name it."""
    return f"recipe={cfg.recipe} scale={cfg.scale.name}"


def check_row_meaning(cfg: RunConfig) -> None:
    """Refuse a row that the recipe and scale would train as base in a key the row varies (a head count
    equal to the recipe's, a depth ratio lost to rounding): its cell in Table 3 would show seed noise."""
    if not arch_varied(cfg.model):
        return
    base_cfg = replace(cfg, model=ModelConfig())
    mine, theirs = effective_model(cfg, 8), effective_model(base_cfg, 8)
    mine_arch, their_arch = row_arch(cfg), row_arch(base_cfg)
    for key in arch_varied(cfg.model):
        if key in cfg.model.explicit:
            continue  # what the command line sets wins
        field_name = {"decoder_layers": "n_dec_layers"}.get(key, key)
        if hasattr(mine, field_name):
            a, b = getattr(mine, field_name), getattr(theirs, field_name)
        elif key == "train_steps":
            a, b = total_steps(cfg), total_steps(base_cfg)
        else:
            a, b = getattr(mine_arch, key), getattr(their_arch, key)
        if a == b:
            raise ConfigError(
                f"row {cfg.model.name} under {preset_name(cfg)}: model.{key}={getattr(cfg.model, key)} "
                f"gives {a}, the same as base's, so the row would not differ from base in {key} "
                "(choose another recipe or scale, or set the key on the command line)"
            )


def paper_model(cfg: ModelConfig, vocab_size: int = 37_000) -> TransformerConfig:
    """The row at the paper's size (no scale, the paper's base), for parameter counts."""
    return effective_model(replace(RunConfig(), model=cfg), vocab_size)


def total_steps(cfg: RunConfig) -> int:
    if cfg.train.max_steps is not None:
        return cfg.train.max_steps
    return _scaled(row_arch(cfg).train_steps, cfg.scale.steps)


def accumulation(cfg: RunConfig) -> int:
    """Micro-batches per optimizer step on each device, so that batch_tokens is reached on any number of
    devices: ceil(batch_tokens / (max_tokens * devices * nodes))."""
    world = cfg.trainer.devices * cfg.trainer.num_nodes
    return max(1, math.ceil(cfg.train.batch_tokens / (cfg.train.max_tokens * world)))


def step_tokens(cfg: RunConfig) -> int:
    """The most target tokens one optimizer step can hold: max_tokens on each device, accumulated."""
    world = cfg.trainer.devices * cfg.trainer.num_nodes
    return cfg.train.max_tokens * world * accumulation(cfg)
