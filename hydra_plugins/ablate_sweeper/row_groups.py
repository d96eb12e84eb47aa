"""`-m model=B` (one group, no comma) is not a sweep to Hydra, which composes the sweep's own config with it
before any sweeper runs; so a config source (`ablaterows://`, added after the app's conf/ by a search path
plugin, listing nothing) answers `model/<group>` for each group that is not a row with a stand-in whose
`name` fails to resolve: a single run `model=B` without -m stops with "model=B is a group ...". Imported by
Hydra's plugin scan: free of torch, no `from __future__`."""

import os

from hydra.core.config_search_path import ConfigSearchPath
from hydra.core.object_type import ObjectType
from hydra.plugins.config_source import ConfigLoadError, ConfigResult, ConfigSource
from hydra.plugins.search_path_plugin import SearchPathPlugin
from omegaconf import OmegaConf

from hydra_plugins.ablate_sweeper.rows import MODEL_GROUP, groups_of, rows_in_dir

GROUP_SCHEME = "ablaterows"


def _group_is_not_a_row(group: str, rows: str) -> str:
    raise ValueError(
        f"{MODEL_GROUP}={group} is a Table 3 group ({rows}), not a row: run its rows with "
        f"`-m {MODEL_GROUP}={group}`, or name one row"
    )


OmegaConf.register_new_resolver("ablate_group", _group_is_not_a_row, replace=True)


class RowGroupSource(ConfigSource):
    """`<scheme>://<conf dir>`: model/<group> for every group of <conf dir>/model/*.yaml that is not itself a
    row. Lists nothing, so glob(), --help and the sweeper's row list see only the row files."""

    def __init__(self, provider: str, path: str) -> None:
        super().__init__(provider=provider, path=path)
        self._groups: dict[str, list[str]] | None = None

    @staticmethod
    def scheme() -> str:
        return GROUP_SCHEME

    def groups(self) -> dict[str, list[str]]:
        if self._groups is None:
            try:
                rows = rows_in_dir(self.path)
            except Exception:  # noqa: BLE001 - a broken row file is reported when it is composed
                rows = {}
            self._groups = {g: r for g, r in groups_of(rows).items() if g not in rows}
        return self._groups

    def _group_name(self, config_path: str) -> str | None:
        group, _, name = config_path.removesuffix(".yaml").rpartition("/")
        return name if group == MODEL_GROUP and name in self.groups() else None

    def available(self) -> bool:
        return os.path.isdir(os.path.join(self.path, MODEL_GROUP))

    def is_group(self, config_path: str) -> bool:
        return False

    def is_config(self, config_path: str) -> bool:
        return self._group_name(config_path) is not None

    def list(self, config_path: str, results_filter: ObjectType | None) -> list[str]:
        return []

    def load_config(self, config_path: str) -> ConfigResult:
        name = self._group_name(config_path)
        if name is None:
            raise ConfigLoadError(f"{GROUP_SCHEME}: no group {config_path}")
        rows = " ".join(self.groups()[name])
        cfg = OmegaConf.create({"name": f"${{ablate_group:'{name}','{rows}'}}", "group": name})
        return ConfigResult(
            config=cfg,
            path=self.full_path(),
            provider=self.provider,
            header={"package": None},  # what Hydra's sources give a config without a `# @package` line
        )


def searchpath_entries(value: str) -> list[str]:
    """The entries of a command line's `hydra.searchpath=[a,b]` value, unquoted."""
    return [e.strip().strip("'\"") for e in value.strip("[]").split(",") if e.strip()]


def with_group_sources(argv: list[str]) -> list[str]:
    """`hydra.searchpath=[file://X, ...]` with `ablaterows://X` after each folder X that holds a model/
    folder: Hydra adds a command line's search path after every SearchPathPlugin has run, so the groups of a
    researcher's rows get their stand-ins this way (`-m model=W` for the rows with `group: W` in X)."""
    out = []
    for a in argv:
        key, _, value = a.partition("=")
        if key.lstrip("+") != "hydra.searchpath" or not value.startswith("["):
            out.append(a)
            continue
        added = []
        for e in searchpath_entries(value):
            path = e.removeprefix("file://")
            added.append(e)
            if "://" not in path and os.path.isdir(os.path.join(path, MODEL_GROUP)):
                added.append(f"{GROUP_SCHEME}://{path}")
        out.append(f"{key}=[{','.join(added)}]")
    return out


class RowGroupSearchPath(SearchPathPlugin):
    """Adds `ablaterows://<dir>` after the app's own config dir (a file path with a model/ folder)."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        for el in list(search_path.get_path()):
            if el.provider != "main" or not el.path:
                continue
            path = el.path.removeprefix("file://")
            if "://" not in path and os.path.isdir(os.path.join(path, MODEL_GROUP)):
                search_path.append("ablate-groups", f"{GROUP_SCHEME}://{path}")
