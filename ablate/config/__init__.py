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

The package's modules: `schema` (the dataclasses), `scaling` (a row under a recipe and a scale),
`validate` (the checks), `rows` (row files and their order). Its names are imported from here.
"""

from ablate.config.arch import build_model, model_config, varied
from ablate.config.scaling import (
    accumulation,
    check_row_meaning,
    effective_model,
    paper_model,
    preset_name,
    row_arch,
    step_tokens,
    total_steps,
)
from ablate.config.schema import (
    DEFAULT_TASK,
    LEGACY_TRAIN,
    MIN_VOCAB,
    PAPER_BASE,
    PAPER_OPTIM,
    PAPER_SCHEDULE,
    RENAMED,
    ArchConfig,
    ConfigError,
    DataConfig,
    DecodeConfig,
    LoggerConfig,
    ModelConfig,
    RunConfig,
    ScaleConfig,
    TaskConfig,
    TrainConfig,
    TrainerConfig,
    default_results,
    flat_fields,
    migrate,
    register_configs,
    to_dataclass,
    typed_task_cfg,
)
from ablate.config.validate import validate

__all__ = [
    "DEFAULT_TASK", "LEGACY_TRAIN", "MIN_VOCAB", "PAPER_BASE", "PAPER_OPTIM", "PAPER_SCHEDULE",
    "ArchConfig", "ConfigError", "DataConfig",
    "DecodeConfig", "LoggerConfig", "ModelConfig", "RENAMED", "RunConfig", "ScaleConfig", "TaskConfig",
    "TrainConfig", "TrainerConfig", "migrate", "typed_task_cfg",
    "accumulation", "build_model", "check_row_meaning", "default_results", "effective_model", "flat_fields",
    "model_config", "paper_model", "preset_name", "register_configs", "row_arch", "step_tokens",
    "to_dataclass", "total_steps", "validate", "varied",
]  # fmt: skip
