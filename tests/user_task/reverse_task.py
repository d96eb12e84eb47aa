"""A researcher's own task, outside the package: reverse the source sentence, scored by exact match.

    PYTHONPATH=tests/user_task python -m ablate.run hydra.searchpath=[file://tests/user_task/conf] \
        experiment=reverse

Nothing under ablate/ names it: `task=reverse_task:ReverseTask` loads this class, which brings its data
source (`data.name=reverse`: the built-in corpus's English side, each target the source's words in reverse
order) and its metric; the experiment and the row `wide` lie in this folder's conf/ (docs/tasks.md).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from ablate.data.binarize import Inputs
from ablate.data.corpora import Source
from ablate.data.sources import Split, builtin_corpus
from ablate.tasks import Metric, Scored, Task

EXACT = Metric(
    name="acc",
    label="exact match",
    higher_is_better=True,
    accumulates="the share of its sentences whose output is the reference, word for word (percent)",
    record_key="dev_acc",
    curve_key="dev_acc",
    sentence_stats="exact",
)


def _inputs(cfg, log) -> Inputs:
    d = cfg.data
    corpus = builtin_corpus(d.builtin_train, d.builtin_dev, d.builtin_test, d.builtin_seed)
    splits = {
        name: Split(split.src, [" ".join(reversed(s.split())) for s in split.src])
        for name, split in corpus.splits.items()
    }
    return Inputs(splits, "reverse-" + corpus.key)


def _identity(cfg) -> dict:
    """The corpus is this file's making: a change to it prepares the corpus again."""
    return {"code": hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]}


def exact(hyps: list[str], refs: list[str]) -> np.ndarray:
    return np.array([h.split() == r.split() for h, r in zip(hyps, refs, strict=True)], dtype=np.int64)


class ReverseTask(Task):
    label = "reverse the source sentence, scored by exact match"
    metrics = (EXACT,)

    def sources(self):
        return {"reverse": Source(_inputs, identity=_identity)}

    def dev_scorer(self, cfg, prepared, dm):
        def score(hyps: list[str], refs: list[str]) -> Scored:
            hits = exact(hyps, refs)
            return Scored({"dev_acc": 100.0 * hits.mean() if len(hits) else 0.0}, {"exact": hits})

        return score

    def split_metrics(self, cfg, prepared, dm, split, hyps, refs):
        hits = exact(hyps, refs)
        return {f"{split}_acc": 100.0 * hits.mean() if len(hits) else 0.0}, {}
