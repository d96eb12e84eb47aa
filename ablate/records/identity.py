"""A run's identity: a hash of the config values that change what it computes, plus the seed. It names the
run folder and the W&B run id, so the same command finds its own run again: skipped when finished,
resumed when interrupted.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

from ablate.config import RENAMED

# Keys that do not change what a run computes.
NOT_IDENTITY = {
    "results_dir",
    "sweep_name",
    "resume",
    "logger",
    "experiment",
    "recipe",  # a name: what the recipe sets (base, train, data, decode) is in the identity
    "varies",  # the command line's keys, each in the identity by its own value
    "model.run",  # a row's keys of the run, each in the identity by its own value once applied
    "data.cache_dir",
    "data.num_workers",
    "trainer.progress_bar",
    "trainer.threads",
    "trainer.device_pool",
    "train.max_minutes",
}


# Where a run's data files lie. Where the data source names the files by their content (data.fingerprint),
# their folder is not part of the run: the same files elsewhere (another machine, another checkout) are
# the same run, so committed runs are found finished wherever the data sits.
DATA_PATHS = (
    "data.root",
    "data.train_src",
    "data.train_tgt",
    "data.dev_src",
    "data.dev_tgt",
    "data.test_src",
    "data.test_tgt",
    "data.treebank_dir",  # parsing's task_cfg.treebank_dir, by the name it is hashed under (OLD_NAMES)
    "data.silver_trees",
)

# The data paths a task's own keys hold (records.identity hashes them under their old names, DATA_PATHS).
TASK_DATA_PATHS = ("task_cfg.treebank_dir", "task_cfg.silver_trees")
_ENV = re.compile(r"^\$\{oc\.env:(\w+)")

# A moved key is hashed under its old name (config.RENAMED), so that a run keeps the id its record has.
OLD_NAMES = {new: old for old, (new, _) in RENAMED.items()}


def identity_dict(cfg) -> dict[str, Any]:
    """The values that name a run: every config value that differs from the dataclass default, less the
    keys that do not change what a run computes. Only non-defaults count, so that adding a new option (with
    a default) to the config does not rename every existing run."""
    from ablate.config import RunConfig, flat_fields, typed_task_cfg
    from ablate.data.corpora import data_fingerprint
    from ablate.tasks import task_of

    cfg.task_cfg = typed_task_cfg(cfg.task, cfg.task_cfg)
    defaults = flat_fields(RunConfig())
    if hasattr(cfg.task_cfg, "__dataclass_fields__"):  # the task's own keys, against its own defaults
        defaults |= flat_fields(type(cfg.task_cfg)(), "task_cfg.")
    out = {}
    flat = flat_fields(cfg)
    flat["model.explicit"] = explicit_that_counts(cfg)
    for group in ("optim", "schedule"):
        flat.pop(group)
        out |= optimizer_identity(cfg, group)
    for key, value in flat.items():
        if key in NOT_IDENTITY or key.split(".")[0] in NOT_IDENTITY:
            continue
        if isinstance(value, tuple):
            value = list(value)
        default = defaults.get(key)
        if isinstance(default, tuple):
            default = list(default)
        if value != default:
            out[OLD_NAMES.get(key, key)] = value
    # The content of the data files a run reads, which the config names only by path: an edited training
    # or reference file must name a new run, not find the old one finished. Added only for sources that
    # read such files (files, multi30k, wmt14_en_de local files, wsj, wsj_semi): the built-in corpus is
    # generated from config values already here (and the downloaded WMT14 release is pinned by checksums),
    # so their run ids stay what they were. A fingerprint (ablate.data.fingerprint) is the sha256 of the
    # content, recomputed only when a file's size or mtime changed: `touch` alone renames nothing.
    try:
        task_of(cfg.task)  # a task's own data source fingerprints its files too
    except ValueError:  # a task that does not load is refused by name where the run starts
        pass
    fingerprint = data_fingerprint(cfg)
    if fingerprint is not None:
        out = {k: v for k, v in out.items() if k not in DATA_PATHS}
        out["data.fingerprint"] = fingerprint
    return out


def optimizer_identity(cfg, group: str) -> dict[str, Any]:
    """The identity entries of the run's `optim` or `schedule` node. A node `train` could state before the
    groups existed (Adam with its betas and eps; equation 3 or cosine with their warmup, scale and peak) is
    named by those keys, under their old names and only where they differ from their defaults
    (config.LEGACY_TRAIN), as its record was; any other node by itself, whole."""
    from ablate.config import LEGACY_TRAIN
    from ablate.config.targets import node

    value = {k: v for k, v in node(cfg, group).items() if k != "_partial_"}
    target = str(value.pop("_target_", "")).replace(":", ".")
    if isinstance(value.get("betas"), tuple):
        value["betas"] = list(value["betas"])
    legacy = {
        ("optim", "torch.optim.Adam"): {"betas": "adam_betas", "eps": "adam_eps"},
        ("schedule", "ablate.nn.optim.InverseSqrt"): {"warmup_steps": "warmup_steps", "scale": "lr_scale"},
        ("schedule", "ablate.nn.optim.Cosine"): {
            "warmup_steps": "warmup_steps",
            "scale": "lr_scale",
            "peak": "lr_peak",
        },
    }.get((group, target))
    if legacy is None or not set(value) <= set(legacy) or value.get("peak", 0.0) is None:
        return {group: {"_target_": target, **value}}
    out = {"train.lr_schedule": "cosine"} if target.endswith("Cosine") else {}
    for key, old in legacy.items():
        if key in value and value[key] != LEGACY_TRAIN[old]:
            out[f"train.{old}"] = value[key]
    return out


def explicit_that_counts(cfg) -> list[str]:
    """The row keys the command line gave (`model.explicit`) whose being given changes what the run builds:
    a key given is taken as it is rather than relative to the recipe's base and unscaled (config.row_arch,
    config.arch.own_values), which under the paper's base and scale, or for a key the recipe does not
    scale (model.arch, model.dropout), changes nothing. Those that change nothing are not in the identity:
    a row's own value given on the command line (`model.arch=<the row's>`) names the same run as the row
    alone. Dropped one at a time, in order, while the model built stays the same."""
    from dataclasses import replace

    from ablate.config import row_arch
    from ablate.config.arch import own_values

    keys = list(cfg.model.explicit or [])
    if not keys:
        return []

    def built(given: list[str]):
        c = replace(cfg, model=replace(cfg.model, explicit=given))
        own = own_values(c) if any(k.startswith("args.") for k in keys) else None
        return row_arch(c), own

    try:
        kept, full = keys, built(keys)
        for key in sorted(keys):
            fewer = [k for k in kept if k != key]
            if built(fewer) == full:
                kept = fewer
    except Exception:  # noqa: BLE001 - a model that does not load or a row that does not scale: as given
        return keys
    return kept


def run_id(cfg) -> str:
    """'<row>-<12 hex of the config hash>-s<seed>'."""
    blob = json.dumps(identity_dict(cfg), sort_keys=True, default=str)
    digest = hashlib.sha256(blob.encode()).hexdigest()[:12]
    return f"{cfg.model.name}-{digest}-s{cfg.seed}"


def run_dir(cfg) -> Path:
    return Path(cfg.results_dir) / cfg.model.name / run_id(cfg)


# ---- A recorded data path is the writing machine's. Read on another machine (the data in another folder),
# it is mapped to the folder this machine's presets give the same key (its environment variable:
# data=multi30k reads data.root from MULTI30K_DIR) where the content is the same: the run's id, which names
# its data by content, comes out the record's. Otherwise it is left as written (and read, never written to).


def relocate(config: dict[str, Any], recorded_id: str) -> dict[str, Any]:
    """A record's config (current layout) with each data path that does not exist here replaced by this
    machine's for the same key, where the run's id stays `recorded_id`; as it was otherwise."""
    from ablate.records.trust import foreign_config

    paths = {key: value for key, value in _data_paths(config).items() if not os.path.exists(value)}
    if not paths or foreign_config(config) is not None:  # typing it imports its task: not another study's
        return config
    here = preset_sources(_presets(config))
    candidate = json.loads(json.dumps(config))
    for key in paths:
        var = here.get(key)
        if var and os.environ.get(var):
            group, name = key.split(".")
            candidate[group][name] = os.environ[var]
    if candidate == config:
        return config
    try:
        from ablate.config import to_dataclass

        same = run_id(to_dataclass(candidate)) == recorded_id
    except Exception:  # noqa: BLE001 - a config this version cannot type: read as written
        return config
    return candidate if same else config


def _data_paths(config: dict[str, Any]) -> dict[str, str]:
    out = {}
    for key in (*DATA_PATHS, *TASK_DATA_PATHS):
        group, name = key.split(".")
        node = config.get(group)
        value = node.get(name) if isinstance(node, dict) else None
        if isinstance(value, str) and os.path.isabs(value):
            out[key] = value
    return out


def _presets(config: dict[str, Any]) -> tuple[str, ...]:
    """The presets that composed a recorded config: its experiment, else its data and task."""
    if config.get("experiment"):
        return (f"experiment={config['experiment']}",)
    data = (config.get("data") or {}).get("name")
    return tuple(f"{k}={v}" for k, v in (("data", data), ("task", config.get("task"))) if v)


@functools.cache
def preset_sources(presets: tuple[str, ...]) -> dict[str, str]:
    """{data path key: the environment variable it is read from} in the config that `presets` (experiment,
    recipe, scale, data, task overrides) compose to here; {} where they do not compose."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from ablate.config import register_configs
    from ablate.config.study import package_conf

    keys = ("experiment", "recipe", "scale", "data", "task")
    given = [o for o in presets if o.split("=", 1)[0] in keys]
    if GlobalHydra.instance().is_initialized():
        return {}  # inside another Hydra application: none known
    register_configs()
    try:
        with initialize_config_dir(str(package_conf()), version_base="1.3"):
            raw = OmegaConf.to_container(compose("config", overrides=[*given, "logger=none"]), resolve=False)
    except Exception:  # noqa: BLE001 - a preset this checkout does not have: no variable known
        return {}
    out = {}
    for key in (*DATA_PATHS, *TASK_DATA_PATHS):
        group, name = key.split(".")
        value = raw.get(group).get(name) if isinstance(raw.get(group), dict) else None
        if isinstance(value, str) and (m := _ENV.match(value)):
            out[key] = m.group(1)
    return out
