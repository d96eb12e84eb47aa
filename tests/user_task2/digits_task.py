"""A second researcher's task: add two numbers, character by character, scored by the character error rate
(lower is better), with a vocabulary of its own (one piece per character). It imports only ablate.tasks.

    cd tests/user_task2 && python -m ablate.run experiment=digits   # the folder is a study (study.yaml)
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from ablate.tasks import Metric, Scored, Task, TaskConfig, Vocabulary


def cer_of_sums(sums) -> float:
    """The CER of summed (edit distance, reference characters): the figure the bootstrap resamples."""
    counts = sums["cer_counts"]
    return 100.0 * counts[..., 0] / np.maximum(1, counts[..., 1])


CER = Metric(
    name="cer",
    label="CER",
    higher_is_better=False,
    accumulates="the summed edit distance of its outputs over the summed characters of their references (%)",
    record_key="dev_cer",
    curve_key="dev_cer",
    sentence_stats="cer_counts",
    reduce=cer_of_sums,
)


@dataclass
class DigitsConfig(TaskConfig):
    train_pairs: int = 2000
    dev_pairs: int = 40
    test_pairs: int = 40
    digits: int = 3  # each operand has at most this many digits
    seed: int = 7


def edits(a: str, b: str) -> int:
    """Levenshtein distance between strings a and b."""
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[-1]


def cer_counts(hyps: list[str], refs: list[str]) -> np.ndarray:
    """Per sentence: (edit distance, reference characters), spaces left out."""
    pairs = [(h.replace(" ", ""), r.replace(" ", "")) for h, r in zip(hyps, refs, strict=True)]
    return np.array([(edits(h, r), len(r)) for h, r in pairs], dtype=np.int64).reshape(-1, 2)


def cer(counts: np.ndarray) -> float:
    return float(cer_of_sums({"cer_counts": counts.sum(0)}))


class DigitsTask(Task):
    label = "add two numbers character by character, scored by the character error rate"
    metrics = (CER,)
    config = DigitsConfig
    data_name = "digits"
    vocabulary = Vocabulary.characters()
    paper_table = "paper_table.csv"  # its paper's figures beside its own (docs/tasks.md)
    paper_claims = "paper_claims.yaml"

    def splits(self, cfg):
        c, rng = cfg.task_cfg, random.Random(cfg.task_cfg.seed)
        top = 10**c.digits - 1

        def pairs(n: int) -> list[tuple[str, str]]:
            ab = [(rng.randint(0, top), rng.randint(0, top)) for _ in range(n)]
            return [(" ".join(f"{a}+{b}"), " ".join(str(a + b))) for a, b in ab]

        return {"train": pairs(c.train_pairs), "dev": pairs(c.dev_pairs), "test": pairs(c.test_pairs)}

    def dev_scorer(self, cfg, prepared, dm):
        def score(hyps: list[str], refs: list[str]) -> Scored:
            counts = cer_counts(hyps, refs)
            return Scored({"dev_cer": cer(counts)}, {"cer_counts": counts})

        return score

    def split_metrics(self, cfg, prepared, dm, split, hyps, refs):
        return {f"{split}_cer": cer(cer_counts(hyps, refs))}, {}
