"""Typed configuration: the dataclasses are the source of truth, Hydra YAML overrides them.

A Table 3 row (conf/model/<row>.yaml) is stated at the paper's size; a scale preset (conf/scale/) shrinks it
for a CPU by multiplying widths and depth and the step count, keeping what the row varies (h, the d_k and
d_v ratios, N ratios, d_ff ratio, dropout, label smoothing, positional kind). `effective_model` applies it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import Any

from omegaconf import MISSING, DictConfig, OmegaConf

from ablate.model import TransformerConfig


class ConfigError(ValueError):
    """A bad value; the message names the config key."""


@dataclass
class ModelConfig:
    """One row of Table 3 at the paper's scale; a row file states only what differs from base."""

    name: str = "base"  # row id: base, A1..A4, B1, B2, C1..C7, D1..D4, E, big, or a user's own
    group: str = "base"  # Table 3 group: base, A, B, C, D, E, big, or a user's label
    n_layers: int = 6  # N
    decoder_layers: int | None = None  # the decoder's N where it differs (an option, not a Table 3 row)
    d_model: int = 512
    d_ff: int = 2048
    n_heads: int = 8  # h
    d_k: int = 64
    d_v: int = 64
    dropout: float = 0.1  # P_drop
    label_smoothing: float = 0.1  # eps_ls
    train_steps: int = 100_000  # the row's own column: 100K, 300K for big
    positional: str = "sinusoidal"  # sinusoidal | learned
    norm: str = "post"  # post (paper) | pre (an option)
    attn_dropout: float = 0.0
    relu_dropout: float = 0.0
    max_positions: int = 1024  # learned positions only
    strict_heads: bool = True  # require h * d_v = d_model, as every row of Table 3 has it


@dataclass
class ScaleConfig:
    """Shrinks a row for a smaller machine. `paper` is all ones."""

    name: str = "paper"
    width: float = 1.0  # multiplies d_model, d_ff, d_k, d_v
    depth: float = 1.0  # multiplies N (rounded, at least 1)
    steps: float = 1.0  # multiplies the row's train_steps


@dataclass
class DataConfig:
    name: str = "builtin"  # builtin | files | multi30k | wmt14_en_de | wsj | wsj_semi
    src_lang: str = "en"
    tgt_lang: str = "de"
    train_src: str | None = None  # data=files: line-aligned text, .gz allowed
    train_tgt: str | None = None
    dev_src: str | None = None
    dev_tgt: str | None = None
    test_src: str | None = None
    test_tgt: str | None = None
    root: str | None = None  # a folder of prepared/raw files (multi30k, wmt14)
    builtin_train: int = 30_000
    builtin_dev: int = 500
    builtin_test: int = 500
    builtin_seed: int = 1234
    vocab_size: int = 37_000  # shared source/target sentencepiece vocabulary (5.1: about 37000 BPE tokens)
    spm_model_type: str = "bpe"
    spm_sentences: int = 2_000_000  # sentences sampled to learn the vocabulary
    max_len: int = 256  # training pairs longer than this (wordpieces, either side) are dropped
    max_len_ratio: float = 9.0  # and pairs whose length ratio exceeds this
    cache_dir: str = "${oc.env:ABLATE_CACHE,${oc.env:HOME}/.cache/ablate}"
    num_workers: int = 0
    # BPE-dropout (Provilkov et al. 2020; not in the paper, off): each epoch the training text is segmented
    # again with each merge dropped with this probability; dev/test and decoding keep the deterministic one
    bpe_dropout: float = 0.0
    bpe_dropout_sides: str = "both"  # both | src (the target side keeps the segmentation it is tested on)
    # data=wsj (parsing, 6.3): PTB WSJ trees <treebank_dir>/<section>/*.mrg (train 02-21, dev 22, test 23)
    treebank_dir: str | None = None
    treebank_builtin: bool = False  # instead: write the built-in treebank (builtin_* sizes) into cache_dir
    silver_trees: str | None = None  # data.name=wsj_semi: extra training trees, one bracketed tree a line


@dataclass
class TrainConfig:
    max_tokens: int = 4096  # padded tokens per side per micro-batch on one device
    batch_tokens: int = 25_000  # target tokens per optimizer step over all devices (5.1: ~25000 + 25000)
    warmup_steps: int = 4000
    lr_schedule: str = "inverse_sqrt"  # inverse_sqrt (paper, eq. 3) | cosine (option)
    lr_scale: float = 1.0  # multiplies the schedule; 1.0 is the paper
    lr_peak: float = 7e-4  # cosine only
    adam_betas: tuple[float, float] = (0.9, 0.98)
    adam_eps: float = 1e-9
    grad_clip: float = 0.0  # the paper states none
    max_steps: int | None = None  # overrides row.train_steps * scale.steps
    max_minutes: float | None = None  # stop at this much training time, restarts included
    # cosine only: a time budget. The decay reaches 0 when this much training time (dev passes included)
    # is spent, or at the last step if that comes first, and training stops there. The step it ends at
    # depends on the machine's speed: such a run is not bit-reproducible on another machine.
    budget_minutes: float | None = None
    val_every: int = 1000  # optimizer steps between dev evaluations
    bleu_every: int = 0  # decode the dev set every N evaluations during training (0: only at the end)
    checkpoint_every: int = 1000  # optimizer steps between checkpoints
    keep_checkpoints: int = 5  # newest step checkpoints kept (5 for base, 20 for big: checkpoint averaging)
    average_last: int = 0  # average the last N checkpoints at the end (Table 3 used none)
    on_nonfinite: str = "stop"  # stop | skip: what a NaN/inf loss does
    compile: bool = False  # torch.compile the model


@dataclass
class DecodeConfig:
    method: str = "beam"  # beam | greedy
    beam: int = 4  # 6.1
    alpha: float = 0.6  # GNMT length penalty
    max_len_a: float = 1.0  # max output length = a * input length + b (6.1: input + 50)
    max_len_b: int = 50
    batch_sentences: int = 128
    dev_limit: int | None = None  # decode only the first N dev sentences (None: all)


@dataclass
class TrainerConfig:
    accelerator: str = "auto"  # cpu | gpu | auto
    devices: int = 1
    num_nodes: int = 1
    # 32-true (the paper's) | bf16-mixed | 16-mixed | auto (bf16-mixed where the device has native bf16)
    precision: str = "32-true"
    strategy: str = "auto"  # auto (ddp for devices > 1, one process group per job) | ddp | ddp_spawn
    progress_bar: bool = True
    threads: int | None = None  # torch intra-op threads on CPU (None: torch's default)


@dataclass
class LoggerConfig:
    kind: str = "wandb"  # wandb | csv | none
    project: str = "ablate"
    entity: str | None = None
    group: str | None = None  # default: the sweep (multirun) name
    mode: str = "auto"  # auto (online only with credentials and network) | online | offline | disabled
    probe_timeout_s: float = 3.0
    samples: int = 8  # sample translations logged as a table


@dataclass
class RunConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    scale: ScaleConfig = field(default_factory=ScaleConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    seed: int = 1
    task: str = "translation"  # translation | parsing
    results_dir: str = "results"  # where run folders and records go
    sweep_name: str | None = None  # set by the launcher; W&B group
    resume: bool = True  # same identity: skip if finished, resume if interrupted
    experiment: str | None = None


def register_configs() -> None:
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(name="schema", node=RunConfig)


# ----------------------------------------------------------------------------------------------------------


def to_dataclass(cfg: DictConfig | RunConfig) -> RunConfig:
    if isinstance(cfg, RunConfig):
        return cfg
    obj = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(RunConfig), cfg))
    assert isinstance(obj, RunConfig)
    return obj


def _scaled(x: int, factor: float) -> int:
    """A size under a scale preset: rounded, never below 1 (e.g. d_k 16 x 1/8 -> 2)."""
    return max(1, int(round(x * factor)))


def effective_model(cfg: RunConfig, vocab_size: int) -> TransformerConfig:
    """The row after the scale preset, as the model builds it."""
    m, s = cfg.model, cfg.scale
    d_model = _scaled(m.d_model, s.width)
    if m.positional == "sinusoidal" and d_model % 2:
        d_model += 1
    return TransformerConfig(
        vocab_size=vocab_size,
        n_layers=_scaled(m.n_layers, s.depth),
        n_dec_layers=None if m.decoder_layers is None else _scaled(m.decoder_layers, s.depth),
        d_model=d_model,
        d_ff=_scaled(m.d_ff, s.width),
        n_heads=m.n_heads,
        d_k=_scaled(m.d_k, s.width),
        d_v=_scaled(m.d_v, s.width),
        dropout=m.dropout,
        attn_dropout=m.attn_dropout,
        relu_dropout=m.relu_dropout,
        positional=m.positional,
        norm=m.norm,
        max_positions=m.max_positions,
    )


def paper_model(cfg: ModelConfig, vocab_size: int = 37_000) -> TransformerConfig:
    """The row at the paper's size (no scale), for parameter counts."""
    return effective_model(replace(RunConfig(), model=cfg), vocab_size)


def total_steps(cfg: RunConfig) -> int:
    if cfg.train.max_steps is not None:
        return cfg.train.max_steps
    return max(1, int(round(cfg.model.train_steps * cfg.scale.steps)))


def accumulation(cfg: RunConfig) -> int:
    """Micro-batches per optimizer step on each device, so that batch_tokens is reached on any number of
    devices: ceil(batch_tokens / (max_tokens * devices * nodes))."""
    world = cfg.trainer.devices * cfg.trainer.num_nodes
    return max(1, math.ceil(cfg.train.batch_tokens / (cfg.train.max_tokens * world)))


# ----------------------------------------------------------------------------------------------------------
# Validation: every check names its key and says what is allowed.

_CHOICES = {
    "model.positional": ("sinusoidal", "learned"),
    "model.norm": ("post", "pre"),
    "data.spm_model_type": ("bpe", "unigram"),
    "data.bpe_dropout_sides": ("both", "src"),
    "train.lr_schedule": ("inverse_sqrt", "cosine"),
    "train.on_nonfinite": ("stop", "skip"),
    "decode.method": ("beam", "greedy"),
    "trainer.precision": ("32-true", "32", "bf16-mixed", "16-mixed", "bf16-true", "auto"),
    "logger.kind": ("wandb", "csv", "none"),
    "logger.mode": ("auto", "online", "offline", "disabled"),
    "task": ("translation", "parsing"),
}


def _get(cfg: RunConfig, dotted: str) -> Any:
    obj: Any = cfg
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def validate(cfg: RunConfig) -> None:
    for key, allowed in _CHOICES.items():
        if _get(cfg, key) not in allowed:
            raise ConfigError(f"{key}={_get(cfg, key)!r} is not one of {', '.join(allowed)}")
    m = cfg.model
    for key in ("n_layers", "d_model", "d_ff", "n_heads", "d_k", "d_v", "train_steps"):
        if getattr(m, key) < 1:
            raise ConfigError(f"model.{key}={getattr(m, key)} must be a positive integer")
    if m.decoder_layers is not None and m.decoder_layers < 1:
        raise ConfigError(f"model.decoder_layers={m.decoder_layers} must be a positive integer (or null: N)")
    for key in ("dropout", "attn_dropout", "relu_dropout"):
        if not 0.0 <= getattr(m, key) < 1.0:
            raise ConfigError(f"model.{key}={getattr(m, key)} must be in [0, 1)")
    if not 0.0 <= m.label_smoothing < 1.0:
        raise ConfigError(f"model.label_smoothing={m.label_smoothing} must be in [0, 1)")
    if m.positional == "sinusoidal" and m.d_model % 2:
        raise ConfigError(f"model.d_model={m.d_model} must be even for sinusoidal positions (3.5)")
    if m.strict_heads and m.n_heads * m.d_v != m.d_model:
        raise ConfigError(
            f"model.n_heads * model.d_v = {m.n_heads} * {m.d_v} = {m.n_heads * m.d_v} does not fit "
            f"model.d_model={m.d_model}: every Table 3 row keeps h * d_v = d_model (set model.d_k and "
            "model.d_v with it, or model.strict_heads=false)"
        )
    for key in ("width", "depth", "steps"):
        if getattr(cfg.scale, key) <= 0:
            raise ConfigError(f"scale.{key}={getattr(cfg.scale, key)} must be positive")
    t = cfg.train
    for key in ("max_tokens", "batch_tokens", "warmup_steps", "val_every", "checkpoint_every"):
        if getattr(t, key) < 1:
            raise ConfigError(f"train.{key}={getattr(t, key)} must be positive")
    if t.budget_minutes is not None:
        if t.lr_schedule != "cosine":
            raise ConfigError(
                f"train.budget_minutes={t.budget_minutes} needs train.lr_schedule=cosine (the decay it ends "
                "at the deadline); the paper's inverse-sqrt schedule has no end: use train.max_minutes"
            )
        if t.budget_minutes <= 0:
            raise ConfigError(f"train.budget_minutes={t.budget_minutes} must be positive")
    if not 0.0 <= cfg.data.bpe_dropout < 1.0:
        raise ConfigError(f"data.bpe_dropout={cfg.data.bpe_dropout} must be in [0, 1)")
    if cfg.data.bpe_dropout > 0 and cfg.data.spm_model_type != "bpe":
        raise ConfigError(
            f"data.bpe_dropout={cfg.data.bpe_dropout} needs data.spm_model_type=bpe "
            f"(sentencepiece reads the value as a sampling temperature for {cfg.data.spm_model_type!r})"
        )
    if cfg.data.vocab_size < 8:
        raise ConfigError(f"data.vocab_size={cfg.data.vocab_size} is too small")
    if cfg.decode.beam < 1:
        raise ConfigError(f"decode.beam={cfg.decode.beam} must be at least 1")
    if cfg.trainer.devices < 1 or cfg.trainer.num_nodes < 1:
        raise ConfigError("trainer.devices and trainer.num_nodes must be at least 1")


def flat_fields(obj: Any, prefix: str = "") -> dict[str, Any]:
    """{'model.d_model': 512, ...} for a dataclass tree."""
    out: dict[str, Any] = {}
    for f in fields(obj):
        v = getattr(obj, f.name)
        key = f"{prefix}{f.name}"
        if hasattr(v, "__dataclass_fields__"):
            out.update(flat_fields(v, key + "."))
        else:
            out[key] = v
    return out


__all__ = [
    "MISSING",
    "ConfigError",
    "RunConfig",
    "ModelConfig",
    "DataConfig",
    "TrainConfig",
    "DecodeConfig",
    "TrainerConfig",
    "LoggerConfig",
    "ScaleConfig",
    "to_dataclass",
    "validate",
    "effective_model",
    "paper_model",
    "total_steps",
    "accumulation",
    "register_configs",
    "flat_fields",
]
