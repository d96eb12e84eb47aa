"""A run's `_target_` nodes (`optim`, `schedule`): the class each names, its keys checked against the
class's own signature, and the object built from it. The signature is the node's type: a key the class
does not take is refused in one line naming the nearest it does, and the keys the run supplies itself
(the parameters and lr 1.0 of an optimizer, d_model and total_steps of a schedule) are refused too, so that
nothing in a config is silently overridden. Hydra's `instantiate` builds the node (`_partial_`), and the
run completes it."""

from __future__ import annotations

import copy
import difflib
import inspect
from typing import Any

from ablate.config.schema import PAPER_OPTIM, PAPER_SCHEDULE, ConfigError

# What the run supplies to each node when it builds it, and why a config may not set it.
SUPPLIED = {
    "optim": {"params": "the model's", "lr": "the schedule's (schedule.peak, schedule.scale)"},
    "schedule": {"d_model": "the row's", "total_steps": "the run's step count"},
}
PAPER = {"optim": PAPER_OPTIM, "schedule": PAPER_SCHEDULE}
_HYDRA_KEYS = ("_target_", "_partial_", "_recursive_", "_convert_", "_args_")


def node(cfg, group: str) -> dict[str, Any]:
    """The run's `group` node (`optim` or `schedule`) as a plain dict: the paper's where the config has
    none."""
    value = getattr(cfg, group, None)
    return copy.deepcopy(value if value else PAPER[group])


def target_class(group: str, value: dict[str, Any]) -> type:
    """The class a node's `_target_` names (`torch.optim.SGD`, `pkg.mod.Class` or `pkg.mod:Class`)."""
    from hydra.utils import get_class

    target = value.get("_target_")
    if not isinstance(target, str) or not target:
        raise ConfigError(f"{group}._target_: missing (the class to build, e.g. torch.optim.SGD)")
    try:
        return get_class(target.replace(":", "."))
    except Exception as e:  # noqa: BLE001 - hydra says ImportError or ValueError by case
        why = str(e).splitlines()[0]
        raise ConfigError(f"{group}._target_={target}: not a class that imports here ({why})") from None


def parameters(cls: type) -> list[str]:
    """The keyword names `cls` takes, those of its bases' __init__ where it passes **kwargs on."""
    names: list[str] = []
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        sig = inspect.signature(init)
        names += [p.name for p in sig.parameters.values() if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
        if not any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values()):
            break
    return [n for n in dict.fromkeys(names) if n != "self"]


def check(cfg, group: str) -> type:
    """The class of the run's `group` node, each key of the node one it takes and none the run supplies."""
    value = node(cfg, group)
    cls = target_class(group, value)
    known = [n for n in parameters(cls) if n not in SUPPLIED[group]]
    for key in value:
        if key in _HYDRA_KEYS:
            continue
        if key in SUPPLIED[group]:
            raise ConfigError(f"{group}.{key}: set by the run, not the config ({SUPPLIED[group][key]})")
        if key not in known:
            near = difflib.get_close_matches(key, known, n=2)
            hint = f"did you mean {' or '.join(near)}? " if near else ""
            raise ConfigError(
                f"{group}.{key}: not a key of {value['_target_']} "
                f"({hint}its keys: {', '.join(known) or 'none'}; a class of its own keys comes in a file of "
                f"its own, conf/{group}/<name>.yaml, chosen by {group}=<name>)"
            )
    return cls


def build(cfg, group: str, **supplied: Any) -> Any:
    """The object of the run's `group` node, completed with what the run supplies."""
    from functools import partial

    from hydra.utils import instantiate

    value = node(cfg, group)
    value["_partial_"] = True
    value["_target_"] = value["_target_"].replace(":", ".")
    made = instantiate(value, _convert_="all")
    assert isinstance(made, partial)
    # a YAML list is a tuple to torch (Adam's betas)
    keywords = {k: tuple(v) if isinstance(v, list) else v for k, v in made.keywords.items()}
    made = partial(made.func, *made.args, **keywords)
    return made if not supplied else made(**supplied)


def label(value: dict[str, Any] | None, group: str) -> str:
    """A node in a few words: its class's name and its keys, e.g. 'SGD momentum 0.9'."""
    value = value or PAPER[group]
    name = str(value.get("_target_", "?")).replace(":", ".").rsplit(".", 1)[-1]
    keys = [f"{k} {v}" for k, v in value.items() if k not in _HYDRA_KEYS]
    return " ".join([name, *keys])
