"""A sweep member as the launchers see it: its RunConfig (the one identity for the job, its record and the
launcher that submitted it), the outcome each job returns, and the sweep's closing line.

Every launcher (basic, joblib, gpus, slurm) ends in the sweeper (hydra_plugins/ablate_sweeper), which
prints `summary` and exits non-zero when any member did not finish.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from omegaconf import DictConfig, OmegaConf

from ablate.config import RunConfig, to_dataclass
from ablate.config.schema import ConfigError, check_known_keys
from ablate.records.trust import allow_config, allow_searchpath
from ablate.tasks import task_of

FINISHED = "finished"


def explicit_model_keys(overrides: list[str]) -> list[str]:
    """The row keys a command line sets (`model.dropout=0.3`): they win over the row's relative meaning
    under a recipe's own base (config.row_arch)."""
    keys = []
    for o in overrides:
        key = o.lstrip("+~").split("=", 1)[0]
        if key.startswith("model.") and key.count(".") == 1 or key.startswith("model.args."):
            keys.append(key.removeprefix("model."))  # a model's own key: args.<key>
    return sorted(set(keys))


def member_config(dcfg: DictConfig | RunConfig, task_overrides: list[str], launcher: str | None) -> RunConfig:
    """The run a composed job config names: the keys the command line set, the device pool of
    hydra/launcher=gpus, and its experiment's group (`experiment_group`, unless logger or sweep_name set
    one)."""
    # a config Hydra composed carries the schema's types (conf/config.yaml's `schema` default): the object
    # it holds, without to_dataclass's merge into a fresh schema (a plan's jobs, thousands of them)
    typed = OmegaConf.is_config(dcfg) and OmegaConf.get_type(dcfg) is RunConfig
    check_known_keys(dcfg)  # a `+key` the run does not read is refused, not dropped
    cfg = to_dataclass(OmegaConf.to_object(dcfg) if typed else dcfg)  # the task's own keys typed
    cfg = apply_row_run(cfg, task_overrides)
    task_of(cfg.task)  # a task= that names no task stops here in one line; a task's data sources register
    allow_config(cfg)  # the command's own: what reading its records may import (ablate.records.trust)
    allow_searchpath()
    cfg.model.explicit = sorted(set(cfg.model.explicit) | set(explicit_model_keys(task_overrides)))
    if launcher == "gpus" and cfg.trainer.device_pool is None:
        cfg.trainer.device_pool = []  # every GPU of the machine (devices.pool)
    cfg.varies = varied_keys(task_overrides)
    if cfg.sweep_name is None:
        cfg.sweep_name = experiment_group(cfg, task_overrides)
    return cfg


def _given(overrides: list[str]) -> set[str]:
    return {o.lstrip("+~").split("=", 1)[0] for o in overrides}


def _flat(node: Any, prefix: str = "") -> dict[str, Any]:
    """{'schedule.warmup_steps': 100, ...}; a `_target_` node stays whole (its keys go with its class)."""
    if not isinstance(node, dict) or "_target_" in node:
        return {prefix.rstrip("."): node}
    out: dict[str, Any] = {}
    for k, v in node.items():
        out |= _flat(v, f"{prefix}{k}.")
    return out


def apply_row_run(cfg: RunConfig, task_overrides: list[str]) -> RunConfig:
    """The run with its row's `model.run` keys set: over the recipe and the experiment, as the row gives
    them (a value, not a ratio: under every recipe and scale the same), except a key the command line
    gives, or whose group it chooses (`schedule=cosine` keeps the row off `schedule.*`). A node with a
    `_target_` of its own replaces the run's node whole (`optim: {_target_: torch.optim.SGD, ...}`);
    otherwise its keys merge into it. A key the run does not have is refused in one line."""
    from dataclasses import asdict

    if not cfg.model.run:
        return cfg
    check_known_keys(cfg.model.run)
    for top in ("model", "seed"):
        if top in cfg.model.run:
            raise ConfigError(f"model.run.{top}: a row sets its model's keys and the seed outside `run:`")
    given = _given(task_overrides)
    plain = asdict(cfg)
    plain["task_cfg"] = (
        asdict(cfg.task_cfg) if hasattr(cfg.task_cfg, "__dataclass_fields__") else cfg.task_cfg
    )
    for dotted, value in _flat(cfg.model.run).items():
        parts = dotted.split(".")
        if any(".".join(parts[:i]) in given for i in range(1, len(parts) + 1)):
            continue
        node = plain
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = _over(node.get(parts[-1]), value, dotted)
    try:
        return to_dataclass(plain)
    except Exception as e:  # noqa: BLE001 - OmegaConf's type error, in one line naming the key
        raise ConfigError(f"model.run: {str(e).splitlines()[0]} (row {cfg.model.name})") from None


def _over(current: Any, value: Any, key: str) -> Any:
    """A row's value over the run's: a mapping merges into the run's node; a `_target_` node of another
    class takes, of the run's node, the keys its class takes too (the recipe's warmup and scale carry over
    to another schedule, Adam's betas do not to SGD)."""
    if not (isinstance(value, dict) and isinstance(current, dict)):
        return value
    target = value.get("_target_")
    if target is None or target == current.get("_target_"):
        return {**current, **value}
    from ablate.config.targets import parameters, target_class

    takes = set(parameters(target_class(key, value)))
    return {**{k: v for k, v in current.items() if k in takes or k == "_partial_"}, **value}


def varied_keys(task_overrides: list[str]) -> list[str]:
    """The command line's keys that change what a run computes, other than the row, the seed and the
    presets, as key=value, sorted: what a sweep of them varies (RunConfig.varies)."""
    from ablate.records.identity import DATA_PATHS, NOT_IDENTITY, OLD_NAMES

    keys = []
    for o in task_overrides:
        key, _, value = o.lstrip("+~").partition("=")
        top = key.split(".")[0]
        if key in _WITHIN or key.startswith("hydra") or {key, top} & NOT_IDENTITY:
            continue
        if OLD_NAMES.get(key, key) in DATA_PATHS:
            continue
        keys.append(f"{key}={value}")
    return sorted(keys)


# Keys that vary inside one experiment (its rows and seeds) or name it already (experiment, recipe, scale).
_WITHIN = {"model", "seed", "experiment", "recipe", "scale"}


def experiment_group(cfg: RunConfig, task_overrides: list[str]) -> str:
    """The W&B group and the records' `sweep`: what the runs of one experiment share. Its experiment (or,
    without one, its preset), then the command line's keys that change what a run computes, other than the
    row and the seed: re-running a sweep, adding a row or a seed, or running one row alone keeps the group;
    no timestamp, path or launcher setting enters it."""
    from ablate.records.store import preset_key

    head = cfg.experiment or preset_key(cfg.recipe, cfg.scale.name)
    return " ".join([str(head), *varied_keys(task_overrides)])[:128]


def launcher_setting(key: str, default: Any) -> Any:
    """`hydra.launcher.<key>` of the launcher this job runs under; outside a Hydra job, the default."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return default
    return HydraConfig.get().launcher.get(key, default)


def outcome(run_id: str, status: str, reason: str | None = None, **metrics: Any) -> dict[str, Any]:
    """What a job returns to the sweep (pickled back by joblib and submitit alike)."""
    return {"run_id": run_id, "status": status, "reason": reason, **metrics}


def summary(outcomes: Iterable[dict[str, Any] | None]) -> tuple[str, bool]:
    """('sweep of 4 runs: 2 finished, 1 failed (A1-...-s1), 1 cancelled (base-...-s1)', all finished?); a
    member finished before the sweep (`skipped`) counts as 'already finished'."""
    by: dict[str, list[str]] = {}
    n = skipped = 0
    for o in outcomes:
        n += 1
        o = o or {"run_id": "?", "status": "failed"}
        if o.get("skipped"):  # finished before this sweep: no job was started for it
            skipped += 1
            continue
        by.setdefault(str(o.get("status") or "failed"), []).append(str(o.get("run_id") or "?"))
    parts = [f"{len(by.pop(FINISHED))} finished"] if FINISHED in by else []
    parts += [f"{skipped} already finished"] if skipped else []
    parts += [f"{len(ids)} {st.replace('_', ' ')} ({', '.join(ids)})" for st, ids in sorted(by.items())]
    return f"sweep of {n} run{'s' if n != 1 else ''}: {', '.join(parts) or 'nothing run'}", not by
