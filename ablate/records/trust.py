"""Records are data: reading one never imports a module it names.

A record names code by name: its `task`, and its config's `task`, `model.arch` and `model.criterion` (each
a name of the package's, or a researcher's `module:Class`). Hashing that code (its staleness), counting its
model (an estimate) or typing its config (its task's own keys) imports it, and a record may come from
anywhere: a results folder copied from a colleague, a cluster's share. So a name is imported while records
are read only where it is one of

- the package's own: a built-in task, model or criterion (`ablate.tasks.BUILTIN`, `ARCHS`, `CRITERIA`),
  or a class of a module of the package (`ablate.<...>:Class`);
- the current study's (`ablate.config.study.current_study`): its study.yaml's `task`, the `task` of its
  experiments, the `arch` and `criterion` of its row files (and those of the package's own configs);
- the command's own: what this process was given to run or to read (`allow`, `allow_folder`): a run's
  composed config and the config folders of its `hydra.searchpath`, the report's `--task` and row folders.

`importable` is the one place that decides it; each place that reading a record can import from asks it
first (`foreign`). A record naming any other module is read as data: its stored figures and hashes as
stored, its staleness the one line `NOT_OURS` names, and nothing of it is imported.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

TASK, ARCH, CRITERION = "task", "model.arch", "model.criterion"
KINDS = (TASK, ARCH, CRITERION)
PACKAGE_NAME = "ablate"

_GIVEN: set[tuple[str, str]] = set()  # (kind, name) this command was given itself


def not_ours(name: str) -> str:
    """A record's staleness where it names code that is not this study's (never imported to be hashed)."""
    return f"its code is not this study's: {name}"


def importable(kind: str, name: Any) -> bool:
    """May reading a record import the code that `name` (a `task`, `model.arch` or `model.criterion`)
    names, here and now? Only the package's own, the current study's and the command's own (module doc)."""
    if not isinstance(name, str) or not name:
        return False
    if name in _builtin(kind):
        return True
    module = name.partition(":")[0]
    if module == PACKAGE_NAME or module.startswith(PACKAGE_NAME + "."):
        return True  # the package's own classes: `ablate` is imported already, its modules are its own
    return (kind, name) in _GIVEN or name in study_names().get(kind, set())


def foreign(rec: dict[str, Any]) -> str | None:
    """The first name of code that `rec` (a record, or a record's config under `config`) names and that
    may not be imported here (`importable`); None where all it names may be."""
    from ablate.config import DEFAULT_TASK

    if not isinstance(rec, dict):
        return None
    config = rec.get("config")
    config = config if isinstance(config, dict) else {}
    model = config.get("model")
    model = model if isinstance(model, dict) else {}
    named = [(TASK, rec.get("task") or DEFAULT_TASK), (TASK, config.get("task") or DEFAULT_TASK)]
    named += [(ARCH, model.get("arch")), (CRITERION, model.get("criterion"))]
    for kind, name in named:
        if name is not None and not importable(kind, name):  # None: the package's default
            return str(name)
    return None


def foreign_config(config: Any) -> str | None:
    """`foreign` of a record's config alone."""
    return foreign({"task": None, "config": config}) if isinstance(config, dict) else None


def allow(kind: str, name: Any) -> None:
    """Let this command's reading import `name` (a name it was given itself: its config, its --task)."""
    if kind in KINDS and isinstance(name, str) and name:
        _GIVEN.add((kind, name))


def allow_config(cfg: Any) -> None:
    """Let this command's reading import what its own run config names (its task, model and criterion)."""
    allow(TASK, getattr(cfg, "task", None))
    allow_model(getattr(cfg, "model", None))


def allow_model(model: Any) -> None:
    """`allow` of the model and criterion of a row this command was given (a ModelConfig)."""
    allow(ARCH, getattr(model, "arch", None))
    allow(CRITERION, getattr(model, "criterion", None))


class ForeignRecord(ValueError):
    """A record names code that is not this study's: its config is not typed (that imports its task)."""


def record_config(rec: dict[str, Any]):
    """The typed config of a record (ablate.config.to_dataclass), which imports its task to type its own
    keys, and which a caller may build its model from; ForeignRecord where it names code not this
    study's (`foreign`)."""
    from ablate.config import to_dataclass

    if (theirs := foreign(rec)) is not None:
        raise ForeignRecord(not_ours(theirs))
    return to_dataclass(rec.get("config") or {})


def allow_folder(folder: str | Path) -> None:
    """Let this command's reading import what the config folder it was given names (`config_names`): a
    `hydra.searchpath` folder, or the report's folder of row files."""
    for kind, names in config_names(Path(folder)).items():
        for name in names:
            allow(kind, name)


def allow_searchpath() -> None:
    """`allow_folder` of each folder of Hydra's search path of this command (where Hydra runs it)."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return
    from ablate.config.study import package_folder

    for entry in HydraConfig.get().searchpath or []:
        entry = str(entry)
        folder = package_folder(entry) if entry.startswith("pkg://") else Path(entry.removeprefix("file://"))
        if folder is not None:
            allow_folder(folder)


def study_names() -> dict[str, set[str]]:
    """{kind: names} the current study's configs name (study.yaml's task, its conf/) and the package's own
    configs; the package's alone where the study cannot be read (its command says why)."""
    from ablate.config import ConfigError
    from ablate.config.study import current_study, package_conf

    folders = [package_conf()]
    declared: set[str] = set()
    try:
        study = current_study()
    except ConfigError:
        study = None
    if study is not None and study.conf is not None:
        folders.append(study.conf)
    if study is not None and study.declared_task:
        declared.add(study.declared_task)
    out: dict[str, set[str]] = {kind: set() for kind in KINDS}
    out[TASK] |= declared
    for folder in folders:
        for kind, names in config_names(folder).items():
            out[kind] |= names
    return out


def config_names(folder: Path) -> dict[str, set[str]]:
    """{kind: names} of a config folder: the `task` (and `model.arch`, `model.criterion`) of its
    experiments (experiment/), the `arch` and `criterion` of its row files (model/, or the folder itself
    where it holds row files), read as YAML (nothing imported)."""
    folder = Path(folder)
    stamp = tuple(_mtime(d) for d in (folder, folder / "experiment", folder / "model"))
    return _config_names(folder.resolve(), stamp)


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


@functools.cache
def _config_names(folder: Path, stamp: tuple) -> dict[str, set[str]]:
    import yaml

    out: dict[str, set[str]] = {kind: set() for kind in KINDS}

    def read(path: Path) -> dict:
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            return {}
        return data if isinstance(data, dict) else {}

    def model(node: Any) -> None:
        if isinstance(node, dict):
            for kind, key in ((ARCH, "arch"), (CRITERION, "criterion")):
                if isinstance(node.get(key), str):
                    out[kind].add(node[key])

    for path in sorted((folder / "experiment").glob("*.yaml")):
        data = read(path)
        if isinstance(data.get("task"), str):
            out[TASK].add(data["task"])
        model(data.get("model"))
    for rows in (folder / "model", folder):
        for path in sorted(rows.glob("*.yaml")):
            model(read(path))
    return out


@functools.cache
def _builtin(kind: str) -> frozenset[str]:
    if kind == TASK:
        from ablate.tasks import BUILTIN

        return frozenset(BUILTIN)
    from ablate.config.arch import ARCHS, CRITERIA

    return frozenset(ARCHS if kind == ARCH else CRITERIA if kind == CRITERION else ())
