"""Table 3 rows and groups as the `ablate` sweeper expands them in `model=`: the rows of Hydra's config
sources (conf/model/, and a researcher's folders of `hydra.searchpath`), their groups, and the job lines a
sweep's overrides give. Imported by Hydra's plugin scan: free of torch, no `from __future__`."""

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from hydra.core.object_type import ObjectType
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, ValueType
from hydra.errors import ConfigCompositionException
from omegaconf import DictConfig, OmegaConf

from ablate.config.rows import TABLE3_ROWS, group_order, ordered, resolve_row, row_order

MODEL_GROUP = "model"

PAPER_ROWS = TABLE3_ROWS  # Table 3 top to bottom; a user's rows come after these


class UnknownRowError(ConfigCompositionException):
    """A `model=` value that is neither a row nor a group; printed by Hydra as one line."""


def rows_and_groups(load: Callable[[str], DictConfig | None], names: Iterable[str]) -> dict[str, str]:
    """{row: group} for the row files `names`, in table order. A row without `group:` takes the group of the
    row it builds on (rows.resolve_row: its defaults list, as in composition), else "base"."""

    def raw(name: str) -> dict | None:
        try:
            cfg = load(name)
        except Exception:  # noqa: BLE001 - a row file that does not load fails its own jobs, not the listing
            return None
        return OmegaConf.to_container(cfg) if isinstance(cfg, DictConfig) else None

    return {n: str(resolve_row(n, raw).get("group", "base")) for n in ordered(names)}


def rows_in_dir(conf_dir: str | Path) -> dict[str, str]:
    """{row: group} for <conf_dir>/model/*.yaml (no Hydra needed)."""
    d = Path(conf_dir) / MODEL_GROUP

    def load(name: str) -> DictConfig | None:
        cfg = OmegaConf.load(d / f"{name}.yaml")
        return cfg if isinstance(cfg, DictConfig) else None

    return rows_and_groups(load, (p.stem for p in d.glob("*.yaml")))


def rows_from_sources(sources: Sequence[Any]) -> dict[str, str]:
    """{row: group} from Hydra's config sources (the search path: conf/, pkg://, the ConfigStore), the first
    source that has a row wins, as in Hydra's repository."""
    names: set[str] = set()
    for src in sources:
        if src.is_group(MODEL_GROUP):
            names.update(src.list(config_path=MODEL_GROUP, results_filter=ObjectType.CONFIG))

    def load(name: str) -> DictConfig | None:
        path = f"{MODEL_GROUP}/{name}"
        for src in sources:
            if src.is_config(path):
                cfg = src.load_config(config_path=path).config
                return cfg if isinstance(cfg, DictConfig) else None
        return None

    return rows_and_groups(load, names)


def groups_of(rows: Mapping[str, str]) -> dict[str, list[str]]:
    """{group: [rows in table order]}, groups in table order."""
    out: dict[str, list[str]] = {}
    for g in sorted(set(rows.values()), key=group_order):
        out[g] = sorted((r for r, rg in rows.items() if rg == g), key=row_order)
    return out


def expand_models(values: Sequence[str], rows: Mapping[str, str]) -> list[str]:
    """The rows that `model=<values>` means: a row name stays itself, a group name becomes its rows (table
    order); the order of `values` is kept and a row given twice appears once. Raises UnknownRowError naming
    the value, the valid rows and the groups."""
    groups = groups_of(rows)
    out: list[str] = []
    for v in values:
        if v in rows:
            names = [v]
        elif v in groups:
            names = groups[v]
        else:
            only_groups = [g for g in groups if g not in rows]
            raise UnknownRowError(
                f"{MODEL_GROUP}={v}: no row or group named '{v}' in conf/{MODEL_GROUP}/. "
                f"Rows: {', '.join(rows)}. Groups: {', '.join(only_groups) or '(none)'}"
                " (a group is the `group:` key of a row file)."
            )
        out.extend(n for n in names if n not in out)
    return out


def expand_override_lines(
    lines: Sequence[str], parser: OverridesParser, rows: Callable[[], Mapping[str, str]]
) -> list[str]:
    """Rewrite each `model=...` line (a value or a comma/choice() sweep) into explicit rows; other lines,
    glob()/range() sweeps and `~model` are returned as given. `rows()` is called only when needed."""
    out: list[str] = []
    for line in lines:
        ov: Override = parser.parse_override(line)
        values = _model_values(ov)
        if values is None:
            out.append(line)
            continue
        expanded = expand_models(values, rows())
        shuffle = ov.is_choice_sweep() and getattr(ov.value(), "shuffle", False)
        value = ",".join(expanded)
        if shuffle:
            value = f"shuffle({value})"
        out.append(f"{ov.get_key_element()}={value}")
    return out


def _model_values(ov: Override) -> list[str] | None:
    if ov.key_or_group != MODEL_GROUP or ov.is_delete() or ov.value_type is None:
        return None
    if ov.value_type == ValueType.ELEMENT:
        v = ov.value()
        return [v] if isinstance(v, str) else None
    if ov.value_type in (ValueType.SIMPLE_CHOICE_SWEEP, ValueType.CHOICE_SWEEP):
        return list(ov.sweep_string_iterator())
    return None  # glob(), range(), interval(): Hydra's meaning


def searchpath_folders(config: DictConfig) -> list[str]:
    """The folders of `hydra.searchpath` (file:// or plain paths) that hold a model/ folder: the config
    loader's own sources do not include them."""
    entries = OmegaConf.select(config, "hydra.searchpath", default=None) if config is not None else None
    entries = entries or []
    folders = (str(e).removeprefix("file://") for e in entries if not str(e).startswith("pkg://"))
    return [f for f in folders if os.path.isdir(os.path.join(f, MODEL_GROUP))]
