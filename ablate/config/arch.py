"""The model a row names (`model.arch`) and the loss it trains with (`model.criterion`), resolved as `task=`
is: a name of the package's (`ARCHS`, `CRITERIA`) or an importable `module:Class` (docs/models.md).

A model is an `nn.Module` class with `config_class`, the dataclass of its own keys (`vocab_size` and
`pad_id` among them, filled from the data), and `widths`, `depths` and `rates`: which of those keys a
scale multiplies by its width or depth ratio and which it keeps. The package's Transformer takes its keys
as the row's own (`model.d_model`, ...), carried over to a recipe's base by Table 3's rules
(`scaling.effective_model`); any other model takes them under `model.args`, each a change from its
config's defaults (its base), scaled by the declared ratios. torch is imported where a model loads.
"""

from __future__ import annotations

import difflib
import importlib
from dataclasses import MISSING, dataclass, fields
from typing import Any

from ablate.config.scaling import arch_varied, effective_model, preset_name
from ablate.config.schema import PAPER_BASE, ArchConfig, ConfigError, ModelConfig, RunConfig

ARCHS = {"transformer": "ablate.nn.model:Transformer"}
CRITERIA = {"label_smoothed": "ablate.nn.loss:LabelSmoothedCrossEntropy"}
DEFAULT_ARCH, DEFAULT_CRITERION = "transformer", "label_smoothed"
FROM_DATA = ("vocab_size", "pad_id")  # config keys the data fills in, never a row's
# Row keys every model has: the loss's smoothing (the default criterion's), the step count
SHARED_KEYS = ("label_smoothing", "train_steps")
TRAINING = ("forward", "logits")  # teacher-forced hidden states, and their next-token logits
SEARCH = ("encode", "start_cache", "step")  # encode once; one step a token, on a cache with `reorder`


@dataclass(frozen=True)
class Arch:
    name: str  # as model.arch names it
    cls: type  # the nn.Module: cls(config)
    config: type  # the dataclass of its keys
    widths: tuple[str, ...] = ()
    depths: tuple[str, ...] = ()
    rates: tuple[str, ...] = ()

    @property
    def row_keys(self) -> list[str]:
        """The keys a row may set under model.args."""
        return [f.name for f in fields(self.config) if f.name not in FROM_DATA]

    def default(self, key: str) -> Any:
        f = next(f for f in fields(self.config) if f.name == key)
        if f.default is not MISSING:
            return f.default
        return f.default_factory() if f.default_factory is not MISSING else None

    def lacks(self, members: tuple[str, ...]) -> list[str]:
        return [m for m in members if not callable(getattr(self.cls, m, None))]


_ARCHS: dict[str, Arch] = {}


def _import(kind: str, name: str, builtin: dict[str, str]) -> type:
    where = builtin.get(name, name)
    module, _, attr = where.partition(":")
    if not attr:
        ours = ", ".join(builtin)
        raise ConfigError(f"{kind}={name}: not one of the package's ({ours}) nor a module:Class")
    try:
        return getattr(importlib.import_module(module), attr)
    except Exception as e:  # an import error, or what the researcher's module raises as it loads
        raise ConfigError(f"{kind}={name}: cannot load it ({type(e).__name__}: {e})") from None


def arch_of(name: str) -> Arch:
    """The model `model.arch` names, with what it declares checked: refused in one line otherwise."""
    if name not in _ARCHS:
        import torch

        cls = _import("model.arch", name, ARCHS)
        if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
            raise ConfigError(f"model.arch={name}: not a torch.nn.Module subclass")
        config = getattr(cls, "config_class", None)
        if not (isinstance(config, type) and hasattr(config, "__dataclass_fields__")):
            raise ConfigError(f"model.arch={name}: its config_class is not a dataclass of its keys")
        declared = {k: tuple(getattr(cls, k, ())) for k in ("widths", "depths", "rates")}
        arch = Arch(name, cls, config, **declared)
        if "vocab_size" not in {f.name for f in fields(config)}:
            raise ConfigError(f"model.arch={name}: {config.__name__} has no vocab_size (the data fills it)")
        for kind, keys in declared.items():
            for key in keys:
                if key not in arch.row_keys:
                    raise ConfigError(
                        f"model.arch={name}: {kind} names {key!r}, not a key of {config.__name__} "
                        f"({', '.join(arch.row_keys)})"
                    )
        if missing := arch.lacks(TRAINING):
            raise ConfigError(
                f"model.arch={name}: it has no {', '.join(missing)} (what training needs: docs/models.md)"
            )
        _ARCHS[name] = arch
    return _ARCHS[name]


def criterion_of(name: str) -> type:
    """The criterion class `model.criterion` names (ablate.nn.loss.Criterion's interface)."""
    cls = _import("model.criterion", name, CRITERIA)
    if not isinstance(cls, type):
        raise ConfigError(f"model.criterion={name}: not a class")
    return cls


def require_search(cfg: RunConfig, command: str) -> None:
    """A model that cannot be searched is refused by the command that searches."""
    arch = arch_of(cfg.model.arch)
    if missing := arch.lacks(SEARCH):
        raise ConfigError(
            f"model.arch={arch.name}: it has no {', '.join(missing)}, and {command} searches (the search "
            "contract: encode once, then one step a token on a cache; docs/models.md)"
        )


# ----------------------------------------------------------------------------------------------------------
# A model's own keys: model.args under the scale's ratios


def _scaled(x: int, factor: float) -> int:
    return max(1, int(round(x * factor)))


def own_values(cfg: RunConfig, args: dict[str, Any] | None = None) -> dict[str, Any]:
    """The values of the model's own keys a run builds: its defaults, the row's args, the scale's ratios
    on the declared widths and depths (the command line's keys, `model.explicit`, as they are given)."""
    arch = arch_of(cfg.model.arch)
    args = cfg.model.args if args is None else args
    out = {}
    for key in arch.row_keys:
        v = args.get(key, arch.default(key))
        if f"args.{key}" not in cfg.model.explicit:
            if key in arch.widths:
                v = _scaled(v, cfg.scale.width)
            elif key in arch.depths:
                v = _scaled(v, cfg.scale.depth)
        out[key] = v
    return out


def own_config(cfg: RunConfig, vocab_size: int) -> Any:
    arch = arch_of(cfg.model.arch)
    from_data = {"vocab_size": vocab_size}
    if "pad_id" in {f.name for f in fields(arch.config)}:
        from_data["pad_id"] = 0  # ablate.data.tokenizer.PAD
    try:
        return arch.config(**own_values(cfg), **from_data)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"model.args of model.arch={arch.name}: {e}") from None


def model_config(cfg: RunConfig, vocab_size: int) -> Any:
    """The config the run's model is built from (after the recipe and the scale)."""
    if cfg.model.arch == DEFAULT_ARCH:
        return effective_model(cfg, vocab_size)
    return own_config(cfg, vocab_size)


def build_model(cfg: RunConfig, vocab_size: int):
    return arch_of(cfg.model.arch).cls(model_config(cfg, vocab_size))


def paper_scale_model(cfg: RunConfig, vocab_size: int):
    """The row's model at the paper's (or its own config's) size: no scale, the paper's base."""
    plain = RunConfig(model=cfg.model)
    return arch_of(cfg.model.arch).cls(model_config(plain, vocab_size))


def varied(row: ModelConfig) -> list[str]:
    """The keys a row changes from the paper's base (those given explicitly count too): the Transformer's,
    then its model and criterion where they are not the paper's, and that model's own (`args.<key>`)."""
    keys = arch_varied(row)
    keys += ["arch"] * (row.arch != DEFAULT_ARCH) + ["criterion"] * (row.criterion != DEFAULT_CRITERION)
    keys += args_varied(row)
    return keys + [k for k in row.explicit if k not in keys and k not in _LABEL_KEYS]


_LABEL_KEYS = ("name", "group", "explicit")


def args_varied(row: ModelConfig) -> list[str]:
    """The model's own keys a row changes from its config's defaults, as `args.<key>`."""
    if row.arch == DEFAULT_ARCH:
        return []
    arch = arch_of(row.arch)
    return [f"args.{k}" for k in arch.row_keys if k in row.args and row.args[k] != arch.default(k)]


def check_arch(cfg: RunConfig) -> None:
    """The row's model and criterion load, its keys are its model's, and each key it changes from its
    base still differs under the preset: one line naming the key otherwise."""
    m = cfg.model
    if m.criterion != DEFAULT_CRITERION:
        criterion_of(m.criterion)
    if m.arch == DEFAULT_ARCH:  # the package's Transformer meets both contracts (test_models.py): no load,
        if m.args:  # so that a plan of many rows reads configs without importing torch
            key = next(iter(m.args))
            raise ConfigError(
                f"model.args.{key}: model.arch=transformer takes its keys as model.<key> ({key} is not one)"
            )
        return
    arch = arch_of(m.arch)
    require_search(cfg, "a run's dev evaluation")
    for f in fields(ArchConfig):
        if f.name not in SHARED_KEYS and getattr(m, f.name) != getattr(PAPER_BASE, f.name):
            raise ConfigError(
                f"model.{f.name}: a key of the transformer; model.arch={m.arch} takes its own keys as "
                f"model.args.<key> ({', '.join(arch.row_keys)})"
            )
    for key in m.args:
        if key not in arch.row_keys:
            near = difflib.get_close_matches(str(key), arch.row_keys, n=1)
            hint = f"did you mean {near[0]}?" if near else f"keys: {', '.join(arch.row_keys)}"
            raise ConfigError(f"model.args.{key}: not a key of {arch.config.__name__} ({hint})")
    own_config(cfg, 8)  # its own checks (__post_init__), one line
    _check_own_meaning(cfg, arch)


def _check_own_meaning(cfg: RunConfig, arch: Arch) -> None:
    """As scaling.check_row_meaning for Table 3's rows: a changed width or depth that the scale rounds to
    the base's value would train the base in that key."""
    mine, base = own_values(cfg), own_values(cfg, {})
    for key in args_varied(cfg.model):
        k = key.removeprefix("args.")
        if key not in cfg.model.explicit and mine[k] == base[k]:
            raise ConfigError(
                f"row {cfg.model.name} under {preset_name(cfg)}: model.args.{k}={cfg.model.args[k]} gives "
                f"{mine[k]}, the same as its base's, so the row would not differ from its base in {k} "
                "(choose another scale, or set the key on the command line)"
            )
