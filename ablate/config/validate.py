"""Validation of a run's config: every check names its key and says what is allowed."""

from __future__ import annotations

from typing import Any

from ablate.config.arch import check_arch
from ablate.config.scaling import check_row_meaning, preset_name, row_arch, step_tokens
from ablate.config.schema import MIN_VOCAB, ArchConfig, ConfigError, RunConfig
from ablate.config.targets import check as check_target
from ablate.config.targets import node
from ablate.nn.config import FFN_KINDS, NORM_TYPES, NORMS, POSITIONALS

_CHOICES = {
    "model.positional": POSITIONALS,
    "model.norm": NORMS,
    "model.ffn": FFN_KINDS,
    "model.norm_type": NORM_TYPES,
    "base.positional": POSITIONALS,
    "base.norm": NORMS,
    "base.ffn": FFN_KINDS,
    "base.norm_type": NORM_TYPES,
    "data.spm_model_type": ("bpe", "unigram"),
    "data.bpe_dropout_sides": ("both", "src"),
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
    check_arch(cfg)  # the row's model and criterion load, and its own keys are its model's
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
    for key in ("max_tokens", "batch_tokens", "val_every", "checkpoint_every"):
        if getattr(t, key) < 1:
            raise ConfigError(f"train.{key}={getattr(t, key)} must be positive")
    check_target(cfg, "optim")
    schedule = check_target(cfg, "schedule")
    _check_schedule(cfg)
    if t.budget_minutes is not None:
        if not getattr(schedule, "decays_to_end", False):
            raise ConfigError(
                f"train.budget_minutes={t.budget_minutes} needs a schedule that decays to an end "
                f"(schedule=cosine or linear), not {node(cfg, 'schedule')['_target_']}: use train.max_minutes"
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


def _check_schedule(cfg: RunConfig) -> None:
    """The schedule builds at the row's width and the run's steps (its own checks: a warmup equation 3
    cannot take, a peak it needs), said in one line naming the key."""
    from ablate.config.scaling import total_steps
    from ablate.config.targets import build

    try:
        build(cfg, "schedule", d_model=row_arch(cfg).d_model, total_steps=total_steps(cfg))
    except ValueError as e:
        raise ConfigError(str(e).splitlines()[0]) from None
    except Exception as e:  # noqa: BLE001 - a researcher's schedule: its own words, one line
        raise ConfigError(f"schedule: {type(e).__name__}: {str(e).splitlines()[0]}") from None


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
    if m.positional == "rotary" and m.d_k % 2:
        raise ConfigError(f"{group}.d_k={m.d_k} must be even for rotary positions (they turn pairs)")
