"""Tasks: what one experiment adds to the shared model, training and decoding, as fairseq's `FairseqTask`
does. Translation is the paper's task; parsing (section 6.3, Table 4) trains the same model on linearized
trees and adds EVALB's F1 and a well-formed search.

A task is reached through `task_of(name)`: the shared code (training, decoding, `ablate.evaluate`) calls
its hooks and never asks which task it runs. Each task's own code lies in its own folders (`own_code`),
which no other task imports: staleness (ablate.records.staleness) leaves them out of the other tasks'
code. `ablate.config.TASKS` names each task, its class and its folders.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from ablate.config import TASKS


class Task:
    """The translation task, and the hooks every task may override (each a no-op here)."""

    name = "translation"

    def dev_scorer(self, cfg, prepared, dm) -> Callable[[list[str]], dict[str, Any]] | None:
        """A function of the decoded dev outputs whose figures join the dev metrics (None: BLEU alone)."""
        return None

    def stepper(self, cfg, stepper):
        """The search's view of the model (decode.Stepper); a task may restrict what it can write."""
        return stepper

    def split_metrics(self, cfg, prepared, dm, split: str, hyps: list[str]) -> tuple[dict, dict[str, str]]:
        """Figures beyond BLEU of a decoded split (`ablate.evaluate`), and the text of files to write beside
        its hypotheses, by suffix."""
        return {}, {}


def task_of(name: str) -> Task:
    where, _ = TASKS[name]
    module, _, cls = where.partition(":")
    return getattr(importlib.import_module(module), cls)()


def own_code(name: str) -> tuple[str, ...]:
    """The folders only runs of task `name` import."""
    return TASKS[name][1]
