"""A task's own report tables (`Task.tables`: command -> "module:function"), resolved here, at the report's
layer, where the layer rule sees them: a table is report code, whichever task's folder holds it
(tests/test_imports.py checks every built-in task's entries). A table that does not import, or raises
while it is made, is one line (TableError) naming the task, the table and where it failed."""

from __future__ import annotations

import importlib
from collections.abc import Callable

from ablate.report.render import raised_at
from ablate.tasks import BUILTIN, task_of


class TableError(ValueError):
    """A task's table that cannot be resolved or made: the report stops in one line, exit status 2."""


def table(command: str, task: str | None = None) -> tuple[str, Callable] | None:
    """(task, its table function) of report table `command`: the one `task` declares, or without a task
    the built-in task's that declares it; None where none does."""
    for name in [task] if task is not None else BUILTIN:
        if command in task_of(name).tables:
            where = task_of(name).tables[command]
            module, _, fn = where.partition(":")
            try:
                return name, getattr(importlib.import_module(module), fn)
            except Exception as e:  # noqa: BLE001 - a researcher's module: its failure in one line
                why = raised_at(e, whole=True, ours=False)
                raise TableError(f"task {name}: table {command} ({where}) does not import: {why}") from None
    return None


def made(command: str, task: str, fn: Callable, *args, **kwargs):
    """`fn(*args, **kwargs)`, the table of `command`; an exception it raises is one line (TableError), but
    for those that are one line already (a looks file or a paper's file unread: the report says them)."""
    from ablate.paper import PaperError
    from ablate.report.decide import LooksError

    try:
        return fn(*args, **kwargs)
    except (LooksError, PaperError):
        raise
    except Exception as e:  # noqa: BLE001 - a researcher's table: its failure in one line
        raise TableError(f"task {task}: table {command} raised {raised_at(e, whole=True)}") from None
