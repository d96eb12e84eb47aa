"""A bootstrap interval on corpus F1 over sentences (Efron & Tibshirani 1993, the percentile interval).

Section 23 of the Penn Treebank sample holds 118 sentences and section 22 127; one long sentence parsed
well or badly moves corpus F1 by a point or more. The interval resamples sentences with replacement and
recomputes corpus F1 from the resampled bracket counts, as EVALB sums them: F1 = 2 M / (G + T) for M
matched, G gold and T test brackets (the same figure as 2PR / (P + R)). Only EVALB's valid sentences
count, as in its F1. scipy.stats.bootstrap draws the resamples; the seed is fixed so that a record's
interval is the same on every reading of the same trees.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from .evalb import OK, SentenceResult

__all__ = ["LEVEL", "RESAMPLES", "f1_interval", "paired_counts_difference", "paired_f1_difference"]

LEVEL = 0.95
RESAMPLES = 2000
SEED = 0


def corpus_f1(matched, gold, test, axis: int = -1):
    """Corpus F1 (0-100) of per-sentence bracket counts summed along `axis`; 0 where there is no bracket."""
    m, both = np.sum(matched, axis=axis), np.sum(gold, axis=axis) + np.sum(test, axis=axis)
    return np.where(both > 0, 200.0 * m / np.maximum(both, 1), 0.0)


def f1_interval(
    sentences: list[SentenceResult], level: float = LEVEL, resamples: int = RESAMPLES, seed: int = SEED
) -> tuple[float, float]:
    """The `level` percentile bootstrap interval of corpus F1 over `sentences` (EVALB's valid ones); a
    single valid sentence has no spread to resample, and gets its own F1 as both ends."""
    valid = [s for s in sentences if s.status == OK]
    keys = ("matched", "gold_brackets", "test_brackets")
    counts = [np.array([getattr(s, k) for s in valid], dtype=float) for k in keys]
    if len(valid) < 2:
        f1 = float(corpus_f1(*counts)) if valid else 0.0
        return f1, f1
    res = stats.bootstrap(
        counts,
        corpus_f1,
        paired=True,
        vectorized=True,
        n_resamples=resamples,
        confidence_level=level,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def paired_f1_difference(
    a: list[SentenceResult],
    b: list[SentenceResult],
    level: float = LEVEL,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> tuple[float, float, float, float]:
    """paired_counts_difference of two parsers' EVALB sentences."""

    def counts(ss: list[SentenceResult]) -> dict:
        return {"matched": [x.matched for x in ss], "gold": [x.gold_brackets for x in ss],
                "test": [x.test_brackets for x in ss], "valid": [x.status == OK for x in ss]}  # fmt: skip

    return paired_counts_difference(counts(a), counts(b), level, resamples, seed)


def paired_counts_difference(
    a: dict, b: dict | list[dict], level: float = LEVEL, resamples: int = RESAMPLES, seed: int = SEED
) -> tuple[float, float, float, float]:
    """The paired bootstrap over sentences (Berg-Kirkpatrick et al. 2012; Dror et al. 2018) of corpus F1(b)
    - F1(a), two parsers' per-sentence bracket counts (matched, gold, test, valid) on the same gold trees:
    (difference, the `level` percentile interval, the two-sided p of the centred resamples,
    P(|d* - d| >= |d|)). The same resampled sentences for both; sentences valid in both count, as in EVALB's
    F1. `b` may be several seeds of one recipe: the difference is then of their mean F1, each seed's F1
    recomputed on the same resampled sentences; the seeds are not resampled (three seeds are too few for a
    bootstrap to keep its coverage), so the interval holds the sentences' variance, not the seeds'."""
    bs = b if isinstance(b, list) else [b]
    n_a = len(a["matched"])
    if any(len(x["matched"]) != n_a for x in bs):
        sizes = sorted({n_a, *(len(x["matched"]) for x in bs)})
        sizes = " and ".join(map(str, sizes))
        raise ValueError(f"paired: {sizes} sentences; the same gold trees are scored twice")
    keep = np.array(a["valid"], dtype=bool)
    for x in bs:
        keep &= np.array(x["valid"], dtype=bool)
    ca = _counted(a, keep)
    cbs = [_counted(x, keep) for x in bs]
    diff = float(np.mean([corpus_f1(*cb) for cb in cbs]) - corpus_f1(*ca))
    idx = np.random.default_rng(seed).integers(0, int(keep.sum()), size=(resamples, int(keep.sum())))
    fb = np.mean([corpus_f1(*(c[idx] for c in cb)) for cb in cbs], axis=0)  # (resamples,)
    d = fb - corpus_f1(*(c[idx] for c in ca))
    lo, hi = np.percentile(d, [50 * (1 - level), 50 * (1 + level)])
    p = float(np.mean(np.abs(d - diff) >= abs(diff)))
    return diff, float(lo), float(hi), p


def _counted(x: dict, keep: np.ndarray) -> list[np.ndarray]:
    return [np.asarray(x[k], dtype=float)[keep] for k in ("matched", "gold", "test")]
