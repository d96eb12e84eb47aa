"""Typed configuration: the dataclasses are the source of truth, Hydra YAML overrides them.

Each config group means one thing:
- `model/`: a Table 3 row, stated as the paper states it: what differs from the paper's base (ModelConfig).
- `recipe/`: how a run trains (data sizes, batch, schedule, budget, decoding) and, where it must, its own
  base architecture (`base:`, at the size it runs at; the paper's base when it sets none).
- `scale/`: ratios only (width, depth, steps), applied to whatever row and base are chosen.
- `trainer/`: hardware and precision. `experiment/`: the only group that sets other groups.

A row keeps its meaning under every recipe and scale (`row_arch`, `effective_model`): it changes the
recipe's base the way it changes the paper's (A: the row's h with h * d_k = d_model; B: the row's ratio
of d_k to base's; C: its N, d_model and d_ff ratios; D, E: their values; big: its ratios of d_model, d_ff,
h and steps, its P_drop),
or the combination is refused with one line naming the row, the preset and the key (`check_row_meaning`).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

from omegaconf import MISSING, DictConfig, OmegaConf

if TYPE_CHECKING:  # imported where a model is built: Hydra's plugin scan reads this package without torch
    from ablate.nn.model import TransformerConfig


DEFAULT_TASK = "translation"  # the paper's; a record without a `task` field is of this task too


class ConfigError(ValueError):
    """A bad value; the message names the config key."""


@dataclass
class ArchConfig:
    """An architecture and its step count; the defaults are the paper's base model (Table 3, first row)."""

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


PAPER_BASE = ArchConfig()


def default_results() -> str:
    """The folder of run folders when none is given: $ABLATE_RESULTS, else `results` (as RunConfig's)."""
    return os.environ.get("ABLATE_RESULTS", "results")


MIN_VOCAB = 8  # data.vocab_size: below this no corpus fits (4 special pieces: pad, unk, bos, eos)


@dataclass
class ModelConfig(ArchConfig):
    """One row of Table 3 at the paper's scale; a row file states only what differs from base."""

    name: str = "base"  # row id: base, A1..A4, B1, B2, C1..C7, D1..D4, E, big, or a user's own
    group: str = "base"  # Table 3 group: base, A, B, C, D, E, big, or a user's label
    # keys given on the command line (model.KEY=...): taken as they are under any recipe, not as a change
    # from the paper's base; ablate.run fills it in
    explicit: list[str] = field(default_factory=list)


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
    constituent_pairs: bool = False  # also each training tree's constituents of 2+ words as pairs (not paper)


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
    dev_limit: int | None = None  # decode only the first N dev sentences (None: all)
    well_formed: bool = False  # task=parsing: only well-formed trees over the source (parsing/constrain.py)


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
    # hydra/launcher=gpus: the device ids the jobs of a sweep share, each job taking `devices` of them
    # ([]: every GPU of the machine; None: no sharing, the job uses the devices Lightning picks)
    device_pool: list[int] | None = None


@dataclass
class LoggerConfig:
    kind: str = "wandb"  # wandb | csv | none
    project: str = "ablate"
    entity: str | None = None
    group: str | None = None  # default: the sweep (multirun) name
    mode: str = "auto"  # auto (online only with credentials and network) | online | offline | disabled
    probe_timeout_s: float = 3.0
    samples: int = 8  # sample translations logged as a table
    # the run's checkpoints as W&B model artifacts at the end of training (Lightning's log_model=True):
    # ~250 MB each at paper size (base), so off unless asked for
    log_checkpoints: bool = False


@dataclass
class RunConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    scale: ScaleConfig = field(default_factory=ScaleConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    recipe: str = "paper"  # the recipe's name (conf/recipe/); its values are in base, train, data, decode
    base: ArchConfig = field(default_factory=ArchConfig)  # the recipe's base architecture
    seed: int = 1
    task: str = DEFAULT_TASK  # a task of ablate.tasks.BUILTIN, an entry point, or an importable module:Class
    results_dir: str = "${oc.env:ABLATE_RESULTS,results}"  # where run folders and records go
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


def _scaled(x: int | float, factor: float) -> int:
    """A size under a ratio: rounded, never below 1 (e.g. d_k 16 x 1/8 -> 2)."""
    return max(1, int(round(x * factor)))


# How a row's change from the paper's base carries over to another base: sizes by the row's ratio to the
# paper's base (C's N, d_model, d_ff; B's d_k; big's steps, 3x), every other key by the row's value (P_drop,
# eps_ls, positions). h: a row that changes h with d_k (A) takes its own h and splits d_model as the paper's
# row does (h * d_k = d_model); one that keeps d_k (big) has the ratio of heads, each of base's size.
_RATIO_KEYS = ("n_layers", "d_model", "d_ff", "d_k", "d_v", "train_steps")
_LABEL_KEYS = ("name", "group", "explicit")


def varied(row: ModelConfig) -> list[str]:
    """The architecture keys a row changes from the paper's base (those given explicitly count too)."""
    keys = [f.name for f in fields(ArchConfig) if getattr(row, f.name) != getattr(PAPER_BASE, f.name)]
    return keys + [k for k in row.explicit if k not in keys and k not in _LABEL_KEYS]


def row_arch(cfg: RunConfig) -> ArchConfig:
    """The row carried over to the recipe's base, at the recipe's size (before the scale's ratios). Under
    the paper's base this is the row itself."""
    row, base = cfg.model, cfg.base
    changed = varied(row)
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
    from ablate.nn.model import TransformerConfig

    a, s = row_arch(cfg), cfg.scale
    d_model = _scaled(a.d_model, s.width)
    if a.positional == "sinusoidal" and d_model % 2:
        d_model += 1
    return TransformerConfig(
        vocab_size=vocab_size,
        n_layers=_scaled(a.n_layers, s.depth),
        n_dec_layers=None if a.decoder_layers is None else _scaled(a.decoder_layers, s.depth),
        d_model=d_model,
        d_ff=_scaled(a.d_ff, s.width),
        n_heads=a.n_heads,
        d_k=_scaled(a.d_k, s.width),
        d_v=_scaled(a.d_v, s.width),
        dropout=a.dropout,
        attn_dropout=a.attn_dropout,
        relu_dropout=a.relu_dropout,
        positional=a.positional,
        norm=a.norm,
        max_positions=a.max_positions,
    )


def preset_name(cfg: RunConfig) -> str:
    """The preset a row runs under, as messages and reports name it."""
    return f"recipe={cfg.recipe} scale={cfg.scale.name}"


def check_row_meaning(cfg: RunConfig) -> None:
    """Refuse a row that the recipe and scale would train as base in a key the row varies (a head count
    equal to the recipe's, a depth ratio lost to rounding): its cell in Table 3 would show seed noise."""
    if not varied(cfg.model):
        return
    base_cfg = replace(cfg, model=ModelConfig())
    mine, theirs = effective_model(cfg, 8), effective_model(base_cfg, 8)
    mine_arch, their_arch = row_arch(cfg), row_arch(base_cfg)
    for key in varied(cfg.model):
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


# ----------------------------------------------------------------------------------------------------------
# Validation: every check names its key and says what is allowed.

_CHOICES = {
    "model.positional": ("sinusoidal", "learned"),
    "model.norm": ("post", "pre"),
    "base.positional": ("sinusoidal", "learned"),
    "base.norm": ("post", "pre"),
    "data.spm_model_type": ("bpe", "unigram"),
    "data.bpe_dropout_sides": ("both", "src"),
    "train.lr_schedule": ("inverse_sqrt", "cosine"),
    "train.on_nonfinite": ("stop", "skip"),
    "decode.method": ("beam", "greedy"),
    "trainer.precision": ("32-true", "32", "bf16-mixed", "16-mixed", "bf16-true", "auto"),
    "logger.kind": ("wandb", "csv", "none"),
    "logger.mode": ("auto", "online", "offline", "disabled"),
}  # `task` is checked where it loads (ablate.tasks.task_of): a task may live outside the package


def _get(cfg: RunConfig, dotted: str) -> Any:
    obj: Any = cfg
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def validate(cfg: RunConfig) -> None:
    for key, allowed in _CHOICES.items():
        if _get(cfg, key) not in allowed:
            raise ConfigError(f"{key}={_get(cfg, key)!r} is not one of {', '.join(allowed)}")
    _validate_arch(cfg.model, "model")
    _validate_arch(cfg.base, "base")
    a = row_arch(cfg)
    if a.strict_heads and a.n_heads * a.d_v != a.d_model:
        raise ConfigError(
            f"model.n_heads * model.d_v = {a.n_heads} * {a.d_v} = {a.n_heads * a.d_v} does not fit "
            f"model.d_model={a.d_model} (under {preset_name(cfg)}): every Table 3 row has h * d_v = d_model "
            "(set model.d_k and model.d_v with it, or model.strict_heads=false)"
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
    if cfg.data.vocab_size < MIN_VOCAB:
        raise ConfigError(
            f"data.vocab_size={cfg.data.vocab_size} is too small: at least {MIN_VOCAB} (the 4 special pieces "
            "and the corpus's characters; sentencepiece names the exact minimum for a corpus)"
        )
    if cfg.decode.beam < 1:
        raise ConfigError(f"decode.beam={cfg.decode.beam} must be at least 1")
    if cfg.trainer.devices < 1 or cfg.trainer.num_nodes < 1:
        raise ConfigError("trainer.devices and trainer.num_nodes must be at least 1")
    _check_step_tokens(cfg)
    check_row_meaning(cfg)


def step_tokens(cfg: RunConfig) -> int:
    """The most target tokens one optimizer step can hold: max_tokens on each device, accumulated."""
    world = cfg.trainer.devices * cfg.trainer.num_nodes
    return cfg.train.max_tokens * world * accumulation(cfg)


def _check_step_tokens(cfg: RunConfig) -> None:
    """Accumulation cannot go below 1: with many devices one micro-batch each can hold more than
    train.batch_tokens, and the run would silently train with larger batches than its config says."""
    t, world = cfg.train, cfg.trainer.devices * cfg.trainer.num_nodes
    if step_tokens(cfg) > 1.5 * t.batch_tokens:
        most = max(1, t.batch_tokens // world)
        raise ConfigError(
            f"trainer.devices={cfg.trainer.devices} x train.max_tokens={t.max_tokens} gives up to "
            f"{step_tokens(cfg):,} tokens a step, {step_tokens(cfg) / t.batch_tokens:.1f}x "
            f"train.batch_tokens={t.batch_tokens:,}: set train.max_tokens={most} or use fewer devices"
        )


def _validate_arch(m: ArchConfig, group: str) -> None:
    for key in ("n_layers", "d_model", "d_ff", "n_heads", "d_k", "d_v", "train_steps"):
        if getattr(m, key) < 1:
            raise ConfigError(f"{group}.{key}={getattr(m, key)} must be a positive integer")
    if m.decoder_layers is not None and m.decoder_layers < 1:
        raise ConfigError(
            f"{group}.decoder_layers={m.decoder_layers} must be a positive integer (or null: N)"
        )
    for key in ("dropout", "attn_dropout", "relu_dropout", "label_smoothing"):
        if not 0.0 <= getattr(m, key) < 1.0:
            raise ConfigError(f"{group}.{key}={getattr(m, key)} must be in [0, 1)")
    if m.positional == "sinusoidal" and m.d_model % 2:
        raise ConfigError(f"{group}.d_model={m.d_model} must be even for sinusoidal positions (3.5)")


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
    "ArchConfig",
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
    "row_arch",
    "check_row_meaning",
    "preset_name",
    "paper_model",
    "total_steps",
    "accumulation",
    "register_configs",
    "flat_fields",
]
