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
from pathlib import Path
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


class CodeError(ConfigError):
    """A researcher's model or criterion failed, told in one line: which, what it raised and where in the
    researcher's file (a run ends `failed` with it, exit status 2)."""


def researchers_folder(name: str, builtin: dict[str, str]) -> list[str]:
    """The folder of the module a `module:Class` outside the package lives in ([] for the package's own)."""
    if name in builtin:
        return []
    module = importlib.import_module(name.partition(":")[0])
    file = getattr(module, "__file__", None)
    return [str(Path(file).resolve().parent)] if file else []


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


def _check_criterion_args(name: str, cls: type, given: dict[str, Any]) -> None:
    """Each of model.criterion_args is a keyword its class takes beyond (label_smoothing, pad_id)."""
    import inspect

    params = inspect.signature(cls).parameters
    if any(p.kind == p.VAR_KEYWORD for p in params.values()):
        return
    known = [n for n in params if n not in ("self", "label_smoothing", "pad_id")]
    for key in given:
        if key not in known:
            raise ConfigError(
                f"model.criterion_args.{key}: not a key of model.criterion={name} "
                f"(its keys: {', '.join(known) or 'none beyond label_smoothing'})"
            )


def check_arch(cfg: RunConfig) -> None:
    """The row's model and criterion load, its keys are its model's, and each key it changes from its
    base still differs under the preset: one line naming the key otherwise."""
    m = cfg.model
    if m.criterion != DEFAULT_CRITERION or m.criterion_args:
        _check_criterion_args(m.criterion, criterion_of(m.criterion), m.criterion_args)
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
    types = _key_types(arch)
    for key, value in m.args.items():
        if key not in arch.row_keys:
            near = difflib.get_close_matches(str(key), arch.row_keys, n=1)
            hint = f"did you mean {near[0]}?" if near else f"keys: {', '.join(arch.row_keys)}"
            by = where_set(cfg, key)
            raise ConfigError(f"model.args.{key} (set by {by}): not a key of {arch.config.__name__} ({hint})")
        if key in types and not _fits(value, types[key]):
            raise ConfigError(
                f"model.args.{key}={value!r} (set by {where_set(cfg, key)}): not {_type_name(types[key])}, "
                f"the type of {arch.config.__name__}.{key}"
            )
    own_config(cfg, 8)  # its own checks (__post_init__), one line
    _check_own_meaning(cfg, arch)


def _key_types(arch: Arch) -> dict[str, Any]:
    """The declared type of each key of the model's config ({} where its annotations do not resolve)."""
    import typing

    try:
        return typing.get_type_hints(arch.config)
    except Exception:  # noqa: BLE001 - an annotation naming what its module cannot resolve: left unchecked
        return {}


def _fits(value: Any, tp: Any) -> bool:
    """Whether a config value (YAML's or the command line's) is of type `tp`: an int fits a float, a bool
    fits neither; a union any of its members; a list or tuple each item; a type not named here any value."""
    import types
    import typing

    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, a) for a in args)
    if tp is type(None):
        return value is None
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    if origin in (list, tuple) or tp in (list, tuple):
        if not isinstance(value, list | tuple):
            return False
        items = [a for a in args if a is not Ellipsis]
        return len(items) != 1 or all(_fits(v, items[0]) for v in value)
    return True


def _type_name(tp: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}.get(
        tp, f"of type {getattr(tp, '__name__', None) or str(tp).replace('typing.', '')}"
    )


def where_set(cfg: RunConfig, key: str) -> str:
    """Who set model.args.<key>: the command line, or the row file that set it last (the row's own file or
    one on its defaults list), looked up in the config folders Hydra searched."""
    if f"args.{key}" in cfg.model.explicit:
        return "the command line"
    import yaml

    from ablate.config.rows import resolve_row

    folders = _config_folders()
    found: list[Path] = []

    def load(name: str) -> dict | None:
        for f in folders:
            path = f / "model" / f"{name}.yaml"
            if path.is_file():
                try:
                    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
                except (OSError, yaml.YAMLError):
                    return None
                if isinstance(raw, dict) and key in (raw.get("args") or {}):
                    found.append(path)
                return raw
        return None

    resolve_row(cfg.model.name, load)  # parents first, the row's own file last: the last setter wins
    return f"row file {found[-1]}" if found else f"row {cfg.model.name}"


def _config_folders() -> list[Path]:
    """The config folders of this Hydra job, the researcher's first; the package's conf/ alone outside."""
    from ablate.config.study import package_conf

    package = package_conf()  # where a wheel or a checkout holds the package's configs
    try:
        from hydra.core.hydra_config import HydraConfig

        if HydraConfig.initialized():
            sources = HydraConfig.get().runtime.config_sources
            return [Path(s.path) for s in sources if s.schema == "file"] + [package]
    except Exception:  # noqa: BLE001 - no Hydra job: the package's rows
        pass
    return [package]


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
