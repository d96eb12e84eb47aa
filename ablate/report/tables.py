"""A task's own report tables (`Task.tables`: command -> "module:function"), resolved here, at the report's
layer, where the layer rule sees them: a table is report code, whichever task's folder holds it
(tests/test_imports.py checks every built-in task's entries)."""

from __future__ import annotations

import importlib
from collections.abc import Callable

from ablate.tasks import BUILTIN, task_of


def table(command: str, task: str | None = None) -> tuple[str, Callable] | None:
    """(task, its table function) of report table `command`: the one `task` declares, or without a task
    the built-in task's that declares it; None where none does."""
    for name in [task] if task is not None else BUILTIN:
        if command in task_of(name).tables:
            module, _, fn = task_of(name).tables[command].partition(":")
            return name, getattr(importlib.import_module(module), fn)
    return None
