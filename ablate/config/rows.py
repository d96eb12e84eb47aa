"""Table 3's rows and groups, top to bottom, and how a row file is read: the one place for both (the Hydra
sweeper plugin and the report use it; no heavy imports: the sweeper is imported on every start)."""

import re
from collections.abc import Callable, Iterable
from typing import Any

TABLE3_ROWS = ("base", "A1", "A2", "A3", "A4", "B1", "B2", "C1", "C2", "C3", "C4", "C5", "C6", "C7",
               "D1", "D2", "D3", "D4", "E", "big")  # fmt: skip
TABLE3_GROUPS = ("base", "A", "B", "C", "D", "E", "big")


def _natural(name: str) -> list[Any]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def row_order(name: str) -> tuple[int, list[Any]]:
    """Sort key: the paper's rows in its order, then a user's rows by name (C10 after C9)."""
    return (TABLE3_ROWS.index(name), []) if name in TABLE3_ROWS else (len(TABLE3_ROWS), _natural(name))


def group_order(name: str) -> tuple[int, list[Any]]:
    return (TABLE3_GROUPS.index(name), []) if name in TABLE3_GROUPS else (len(TABLE3_GROUPS), _natural(name))


def ordered(rows: Iterable[str]) -> list[str]:
    return sorted(set(rows), key=row_order)


def resolve_row(name: str, load: Callable[[str], dict | None]) -> dict[str, Any]:
    """A row file's keys as Hydra composes them: the rows on its defaults list first (`- base`, `- big`),
    each resolved the same way, then its own keys. `load(name)` gives a row file's raw mapping or None."""

    def walk(n: str, seen: frozenset[str]) -> dict[str, Any]:
        raw = load(n)
        if not isinstance(raw, dict):
            return {}
        out: dict[str, Any] = {}
        for parent in raw.get("defaults") or []:
            if isinstance(parent, str) and parent != "_self_":
                parent = parent.lstrip("/").removeprefix("model/")
                if parent not in seen:
                    out.update(walk(parent, seen | {n}))
        out.update({k: v for k, v in raw.items() if k != "defaults"})
        return out

    return walk(name, frozenset())


def row_file_problem(path) -> str | None:
    """What keeps a row file from composing, in one line naming the file (and the line of a YAML error),
    or None: YAML that does not parse, a file that is not a mapping, a key ModelConfig does not have."""
    import difflib
    from dataclasses import fields
    from pathlib import Path

    import yaml

    from ablate.config import ModelConfig

    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.MarkedYAMLError as e:
        mark = e.context_mark or e.problem_mark  # where the construct that fails begins
        where = f"line {mark.line + 1}: " if mark is not None else ""
        what = "; ".join(str(x) for x in (e.context, e.problem) if x)
        return f"{path}: {where}not YAML ({what})"
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        return f"{path}: unreadable ({type(e).__name__}: {e})"
    if raw is None:
        return None
    if not isinstance(raw, dict):
        return f"{path}: a row file is a mapping of keys (name, group, and the keys it changes)"
    keys = [f.name for f in fields(ModelConfig)]
    if isinstance(raw.get("run"), dict):
        from ablate.config.schema import ConfigError, check_known_keys

        try:
            check_known_keys(raw["run"])
        except ConfigError as e:
            return f"{path}: run.{e}"
    for key in raw:
        if key != "defaults" and key not in keys:
            near = difflib.get_close_matches(str(key), keys, n=1)
            hint = f" (did you mean {near[0]}?)" if near else f" (keys: {', '.join(keys)})"
            return f"{path}: unknown key {key!r}{hint}"
    return None
