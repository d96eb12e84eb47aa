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
