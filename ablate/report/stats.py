"""Pure statistics for the ablation table: seed summaries, t-tests, Holm, and a bootstrap over seeds and
dev sentences that recomputes each declared metric from its summed per-sentence statistics (Metric.reduce:
corpus BLEU from n-gram counts, perplexity from NLL and tokens, a task's own from its own).

numpy and scipy.stats (the t tests and their intervals); Holm's step-down by hand, checked against
statsmodels' multipletests in the tests; no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from ablate.tasks import Metric
from ablate.tasks.bleu import corpus_bleu

__all__ = ["corpus_bleu"]  # the report's name for it, kept beside the statistics that use it

# ------------------------------------------------------------------------------------------------------------
# Seeds


def mean_sd(x) -> tuple[float, float, int]:
    """Mean, sample standard deviation (ddof=1; nan for one value) and n."""
    a = np.asarray(x, dtype=float)
    n = a.size
    if n == 0:
        return math.nan, math.nan, 0
    return float(a.mean()), float(a.std(ddof=1)) if n > 1 else math.nan, n


def t_interval(x, conf: float = 0.95) -> tuple[float, float]:
    """Student's t interval for the mean of x (at least two values), by scipy.stats."""
    a = np.asarray(x, dtype=float)
    if a.size < 2:
        raise ValueError("a t interval needs at least two values")
    if a.std() == 0:
        return float(a.mean()), float(a.mean())
    ci = sps.ttest_1samp(a, 0.0).confidence_interval(conf)
    return float(ci.low), float(ci.high)


@dataclass(frozen=True)
class TTest:
    kind: str  # "paired t" | "Welch t"
    diff: float  # mean(b) - mean(a)
    lo: float
    hi: float
    p: float
    df: float
    n_a: int
    n_b: int


def welch(a, b, conf: float = 0.95) -> TTest:
    """Welch's unequal-variance t-test and CI for mean(b) - mean(a) (scipy.stats.ttest_ind, equal_var
    False). Needs at least 2 values on each side."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if a.size < 2 or b.size < 2:
        raise ValueError("Welch's t-test needs at least two values per side")
    return _ttest("Welch t", sps.ttest_ind(b, a, equal_var=False), float(b.mean() - a.mean()), conf, a, b)


def paired_t(a, b, conf: float = 0.95) -> TTest:
    """Paired t-test and CI for mean(b - a) over matched pairs (same seeds), by scipy.stats.ttest_rel."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if a.shape != b.shape or a.size < 2:
        raise ValueError("a paired t-test needs two equally long samples of at least two values")
    return _ttest("paired t", sps.ttest_rel(b, a), float((b - a).mean()), conf, a, b)


def _ttest(kind: str, res, diff: float, conf: float, a: np.ndarray, b: np.ndarray) -> TTest:
    """scipy's result as a TTest; where every difference is equal (no spread) scipy has no interval: the
    point, with p 1 at a zero difference and 0 otherwise."""
    if not math.isfinite(res.statistic):
        return TTest(kind, diff, diff, diff, 1.0 if diff == 0 else 0.0, float(res.df), a.size, b.size)
    ci = res.confidence_interval(conf)
    return TTest(kind, diff, float(ci.low), float(ci.high), float(res.pvalue), float(res.df), a.size, b.size)


def against_base(base: dict[int, float], row: dict[int, float], conf: float = 0.95) -> TTest | None:
    """A row's values against base's, by seed: the paired t over their seeds where every seed of the row
    ran for base too (two at least), else Welch's t (two values a side at least), else None."""
    if len(row) >= 2 and set(row) <= set(base):
        shared = sorted(row)
        return paired_t([base[s] for s in shared], [row[s] for s in shared], conf)
    if len(base) >= 2 and len(row) >= 2:
        return welch(list(base.values()), list(row.values()), conf)
    return None


def holm(pvalues) -> list[float]:
    """Holm-Bonferroni adjusted p-values (step-down, monotone, capped at 1); None/nan entries stay nan and
    do not count towards the number of tests."""
    p = [math.nan if v is None else float(v) for v in pvalues]
    idx = [i for i, v in enumerate(p) if not math.isnan(v)]
    m = len(idx)
    out = [math.nan] * len(p)
    running = 0.0
    for rank, i in enumerate(sorted(idx, key=lambda i: p[i])):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out


# ------------------------------------------------------------------------------------------------------------
# Corpus metrics from sufficient statistics


# ------------------------------------------------------------------------------------------------------------
# Hierarchical paired bootstrap


@dataclass(frozen=True)
class Sentences:
    """One run's per-sentence dev statistics (dev-set order): every array of its dev_sentences.npz, by
    name, the first axis the sentences."""

    arrays: dict[str, np.ndarray]

    @classmethod
    def from_arrays(cls, d: dict) -> Sentences:
        return cls({k: np.asarray(v, float) for k, v in d.items()})

    @property
    def n(self) -> int:
        return len(next(iter(self.arrays.values())))

    def metric(self, metric: Metric, weights: np.ndarray | None = None) -> np.ndarray | float:
        """The metric of the summed statistics (Metric.reduce); weights (B, n): draws per sentence and
        replicate, giving one figure per replicate."""
        if metric.reduce is None:
            raise ValueError(f"metric {metric.name!r} declares no reduce of summed statistics")
        return metric.reduce(_Sums(self.arrays, weights))


class _Sums(Mapping):
    """The summed statistics a reduce reads, each summed when first read (a metric reads its own arrays)."""

    def __init__(self, arrays: dict[str, np.ndarray], weights: np.ndarray | None):
        self._arrays, self._weights, self._done = arrays, weights, {}

    def __getitem__(self, key: str) -> np.ndarray:
        if key not in self._done:
            a = self._arrays[key]
            self._done[key] = a.sum(0) if self._weights is None else self._weights @ a
        return self._done[key]

    def __iter__(self):
        return iter(self._arrays)

    def __len__(self) -> int:
        return len(self._arrays)


@dataclass(frozen=True)
class Bootstrap:
    kind: str  # what was resampled, in words
    diff: float  # point estimate: mean over seeds of row's metric - mean over seeds of base's metric
    lo: float
    hi: float
    p: float
    n_boot: int


def _draw_counts(rng: np.random.Generator, n_boot: int, n: int) -> np.ndarray:
    """(n_boot, n) multinomial counts: how often each of n items is drawn in n draws with replacement."""
    idx = rng.integers(0, n, size=(n_boot, n)) + (np.arange(n_boot) * n)[:, None]
    return np.bincount(idx.ravel(), minlength=n_boot * n).reshape(n_boot, n).astype(np.float64)


def hierarchical_bootstrap(
    base: dict[int, Sentences],
    row: dict[int, Sentences],
    metric: Metric,
    n_boot: int = 1000,
    conf: float = 0.95,
    seed: int = 0,
    paired: bool | None = None,
) -> Bootstrap:
    """CI and p for mean_seeds(row) - mean_seeds(base) of a corpus metric, resampling seeds and then dev
    sentences.

    Seeds and sentences are crossed (every run is scored on the same dev sentences), so a replicate draws one
    set of seeds (paired: the same seed ids for base and row; otherwise each side its own) and one set of
    sentence indices, used by base and row alike. Each drawn run's corpus metric is recomputed from its summed
    statistics over the drawn sentences (Metric.reduce: BLEU from the n-gram counts, perplexity from NLL and
    token sums).
    With one seed per side only sentences are resampled. p is two-sided: 2 * min(P*(d <= 0), P*(d >= 0)),
    with the +1 correction, capped at 1.
    """
    if not base or not row:
        raise ValueError("the bootstrap needs at least one run per side")
    n_sent = {s.n for s in (*base.values(), *row.values())}
    if len(n_sent) != 1:
        raise ValueError(f"runs were scored on different dev sets (sentence counts {sorted(n_sent)})")
    n = n_sent.pop()
    if paired is None:
        paired = sorted(base) == sorted(row) and len(base) > 1
    rng = np.random.default_rng(seed)
    w = _draw_counts(rng, n_boot, n)  # shared sentence draws
    b_keys, r_keys = sorted(base), sorted(row)
    mb = np.stack([base[k].metric(metric, w) for k in b_keys], axis=1)  # (B, seeds)
    mr = np.stack([row[k].metric(metric, w) for k in r_keys], axis=1)
    if paired:
        c = _draw_counts(rng, n_boot, len(b_keys))
        cb = cr = c
    else:
        cb = _draw_counts(rng, n_boot, len(b_keys))
        cr = _draw_counts(rng, n_boot, len(r_keys))
    d = (mr * cr).sum(1) / len(r_keys) - (mb * cb).sum(1) / len(b_keys)
    point = float(
        np.mean([row[k].metric(metric) for k in r_keys]) - np.mean([base[k].metric(metric) for k in b_keys])
    )  # the metric of each run's summed statistics: its own figure
    alpha = 1 - conf
    lo, hi = np.quantile(d, [alpha / 2, 1 - alpha / 2])
    p = min(1.0, 2 * min((np.sum(d <= 0) + 1) / (n_boot + 1), (np.sum(d >= 0) + 1) / (n_boot + 1)))
    if len(b_keys) == 1 and len(r_keys) == 1:
        kind = "paired bootstrap over sentences"
    elif paired:
        kind = "paired bootstrap over seeds x sentences"
    else:
        kind = "bootstrap over seeds (unpaired) x sentences (paired)"
    return Bootstrap(kind, point, float(lo), float(hi), float(p), n_boot)
