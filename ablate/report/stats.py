"""Pure statistics for the ablation table: seed summaries, t-tests, Holm, and a bootstrap over seeds and
dev sentences that recomputes corpus BLEU and perplexity from per-sentence sufficient statistics.

numpy and scipy.stats (the t tests and their intervals); Holm's step-down by hand, checked against
statsmodels' multipletests in the tests; no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

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


def corpus_bleu(stats) -> np.ndarray | float:
    """sacreBLEU's corpus BLEU (smooth 'exp', max order 4, no effective order) from summed statistics in
    sacreBLEU's order [hyp_len, ref_len, correct_1..4, total_1..4]; stats (..., 10) -> (...) scores."""
    s = np.asarray(stats, dtype=np.float64)
    scalar = s.ndim == 1
    s = np.atleast_2d(s)
    sys_len, ref_len = s[:, 0], s[:, 1]
    correct, total = s[:, 2:6], s[:, 6:10]
    with np.errstate(divide="ignore", invalid="ignore"):
        bp = np.where(
            sys_len < ref_len,
            np.where(sys_len > 0, np.exp(1.0 - ref_len / np.maximum(sys_len, 1e-300)), 0.0),
            1.0,
        )
        zero = correct == 0
        # 'exp' smoothing: the k-th order with no match gets precision 100 / (2^k * total)
        k = np.cumsum(zero & (total > 0), axis=1)
        prec = np.where(zero, 100.0 / (2.0**k * total), 100.0 * correct / total)
        prec = np.where(total > 0, prec, 0.0)  # an order with no n-grams stops the loop: precision 0
        logp = np.where(prec > 0, np.log(np.where(prec > 0, prec, 1.0)), -9999999999.0)
        score = bp * np.exp(logp.sum(axis=1) / 4.0)
    score = np.where(correct.sum(axis=1) == 0, 0.0, score)
    return float(score[0]) if scalar else score


def perplexity(nll_sum, tokens) -> np.ndarray | float:
    return np.exp(np.asarray(nll_sum, float) / np.asarray(tokens, float))


# ------------------------------------------------------------------------------------------------------------
# Hierarchical paired bootstrap


@dataclass(frozen=True)
class Sentences:
    """One run's per-sentence dev statistics (dev-set order)."""

    nll: np.ndarray  # (n,)
    tokens: np.ndarray  # (n,)
    bleu_stats: np.ndarray  # (n, 10)

    @classmethod
    def from_arrays(cls, d: dict) -> Sentences:
        return cls(
            np.asarray(d["nll"], float), np.asarray(d["tokens"], float), np.asarray(d["bleu_stats"], float)
        )

    def metric(self, name: str, weights: np.ndarray | None = None) -> np.ndarray | float:
        """Corpus metric ('bleu' or 'ppl'); weights (B, n): draws per sentence and replicate."""
        if name == "bleu":
            s = self.bleu_stats.sum(0) if weights is None else weights @ self.bleu_stats
            return corpus_bleu(s)
        if name == "ppl":
            if weights is None:
                return float(perplexity(self.nll.sum(), self.tokens.sum()))
            return perplexity(weights @ self.nll, weights @ self.tokens)
        raise ValueError(f"unknown metric {name!r}")


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
    metric: str,
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
    statistics over the drawn sentences (BLEU from the n-gram counts, perplexity from NLL and token sums).
    With one seed per side only sentences are resampled. p is two-sided: 2 * min(P*(d <= 0), P*(d >= 0)),
    with the +1 correction, capped at 1.
    """
    if not base or not row:
        raise ValueError("the bootstrap needs at least one run per side")
    n_sent = {s.nll.size for s in (*base.values(), *row.values())}
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
    )
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
