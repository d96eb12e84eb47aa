"""A researcher's own task, outside the package: reverse the source sentence, scored by exact match.

    cd tests/user_task && python -m ablate.run experiment=reverse   # the folder is a study (study.yaml)

Nothing under ablate/ names it: `task=reverse_task:ReverseTask` loads this class, which brings its config
(`task_cfg.train_pairs`, ...), its data (`data.name=reverse`: sentences of a small word list, each target
the source's words in reverse order, through the data API) and its metric; the experiment and the row
`wide` lie in this folder's conf/ (docs/tasks.md).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from ablate.tasks import Metric, Scored, Task, TaskConfig

EXACT = Metric(
    name="acc",
    label="exact match",
    higher_is_better=True,
    accumulates="the share of its sentences whose output is the reference, word for word (percent)",
    record_key="dev_acc",
    curve_key="dev_acc",
    sentence_stats="exact",
)
WORDS = "the a cat dog sat ran on under mat tree house big small red blue old new and".split()


@dataclass
class ReverseConfig(TaskConfig):
    train_pairs: int = 1000
    dev_pairs: int = 30
    test_pairs: int = 30
    seed: int = 1234  # of the generated sentences


def sentences(n: int, rng: random.Random) -> list[tuple[str, str]]:
    out = []
    for _ in range(n):
        words = rng.choices(WORDS, k=rng.randint(3, 9))
        out.append((" ".join(words), " ".join(reversed(words))))
    return out


def exact(hyps: list[str], refs: list[str]) -> np.ndarray:
    return np.array([h.split() == r.split() for h, r in zip(hyps, refs, strict=True)], dtype=np.int64)


class ReverseTask(Task):
    label = "reverse the source sentence, scored by exact match"
    metrics = (EXACT,)
    config = ReverseConfig
    data_name = "reverse"

    def splits(self, cfg):
        c, rng = cfg.task_cfg, random.Random(cfg.task_cfg.seed)
        return {split: sentences(n, rng) for split, n in
                (("train", c.train_pairs), ("dev", c.dev_pairs), ("test", c.test_pairs))}  # fmt: skip

    def dev_scorer(self, cfg, prepared, dm):
        def score(hyps: list[str], refs: list[str]) -> Scored:
            hits = exact(hyps, refs)
            return Scored({"dev_acc": 100.0 * hits.mean() if len(hits) else 0.0}, {"exact": hits})

        return score

    def split_metrics(self, cfg, prepared, dm, split, hyps, refs):
        hits = exact(hyps, refs)
        return {f"{split}_acc": 100.0 * hits.mean() if len(hits) else 0.0}, {}
