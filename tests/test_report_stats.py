"""ablate.report.stats against scipy, sacreBLEU and hand computations."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sacrebleu.metrics import BLEU
from scipy import stats as sps

from ablate.report import stats
from ablate.tasks import PPL
from ablate.tasks.bleu import BLEU as BLEU_METRIC


def test_mean_sd():
    assert stats.mean_sd([1.0, 2.0, 3.0]) == (2.0, 1.0, 3)
    m, sd, n = stats.mean_sd([4.0])
    assert (m, n) == (4.0, 1) and math.isnan(sd)


def test_welch_matches_scipy():
    a, b = [25.1, 25.6, 24.9, 25.3], [25.9, 26.4, 25.7]
    t = stats.welch(a, b)
    ref = sps.ttest_ind(b, a, equal_var=False)
    ci = ref.confidence_interval(0.95)
    assert t.kind == "Welch t"
    assert t.diff == pytest.approx(np.mean(b) - np.mean(a))
    assert t.p == pytest.approx(ref.pvalue, rel=1e-10)
    assert (t.lo, t.hi) == (pytest.approx(ci.low, rel=1e-10), pytest.approx(ci.high, rel=1e-10))
    assert t.df == pytest.approx(ref.df)


def test_paired_t_matches_scipy():
    a, b = [25.1, 25.6, 24.9], [25.4, 26.2, 25.0]
    t = stats.paired_t(a, b)
    ref = sps.ttest_rel(b, a)
    ci = ref.confidence_interval(0.95)
    assert t.p == pytest.approx(ref.pvalue, rel=1e-10) and t.df == 2
    assert (t.lo, t.hi) == (pytest.approx(ci.low, rel=1e-10), pytest.approx(ci.high, rel=1e-10))
    # by hand: d = [0.3, 0.6, 0.1], mean 1/3, sd 0.2517, se 0.1453, t(2, .975) = 4.3027
    assert t.diff == pytest.approx(1 / 3)
    assert t.hi - t.diff == pytest.approx(
        4.302653 * math.sqrt(((0.3 - 1 / 3) ** 2 + (0.6 - 1 / 3) ** 2 + (0.1 - 1 / 3) ** 2) / 2 / 3), rel=1e-5
    )
    with pytest.raises(ValueError):
        stats.paired_t([1.0], [2.0])


def test_holm_hand_example():
    # sorted p: 0.01 (x4 = 0.04), 0.02 (x3 = 0.06), 0.03 (x2 = 0.06), 0.04 (x1 = 0.04 -> monotone 0.06)
    assert stats.holm([0.03, 0.01, 0.04, 0.02]) == pytest.approx([0.06, 0.04, 0.06, 0.06])
    adj = stats.holm([0.5, None, 0.01])  # None is not a test: m = 2
    assert adj[0] == pytest.approx(0.5) and math.isnan(adj[1]) and adj[2] == pytest.approx(0.02)
    assert stats.holm([0.6, 0.7]) == [1.0, 1.0]


def _random_stats(rng, n):
    hyp = rng.integers(1, 30, n)
    ref = np.maximum(1, hyp + rng.integers(-4, 4, n))
    out = np.zeros((n, 10), dtype=np.int64)
    out[:, 0], out[:, 1] = hyp, ref
    for k in range(1, 5):
        total = np.maximum(hyp - k + 1, 0)
        out[:, 5 + k] = total
        out[:, 1 + k] = rng.binomial(total, 0.5 * 0.6 ** (k - 1))
    return out


def test_corpus_bleu_equals_sacrebleu():
    hyps = ["the cat sat on the mat .", "a quick brown fox", "jumps over", "hello world again and again"]
    refs = ["the cat is on the mat .", "the quick brown fox", "jumped over it", "hello world and again"]
    bleu = BLEU()
    st = np.array(bleu._extract_corpus_statistics(hyps, [refs]))
    assert stats.corpus_bleu(st.sum(0)) == pytest.approx(bleu.corpus_score(hyps, [refs]).score, abs=1e-9)
    rng = np.random.default_rng(0)
    for n in (1, 2, 5, 50):  # short corpora exercise smoothing, zero matches and zero n-gram totals
        for _ in range(50):
            s = _random_stats(rng, n).sum(0)
            ref = BLEU.compute_bleu(
                list(s[2:6]), list(s[6:]), int(s[0]), int(s[1]), smooth_method="exp"
            ).score
            assert stats.corpus_bleu(s) == pytest.approx(ref, abs=1e-9)


def _sent(nll, tokens, bleu_stats) -> stats.Sentences:
    return stats.Sentences.from_arrays({"nll": nll, "tokens": tokens, "bleu_stats": bleu_stats})


def test_bootstrap_without_resampling_is_corpus_bleu_and_ppl():
    rng = np.random.default_rng(1)
    s = _sent(rng.random(30) * 40, rng.integers(5, 30, 30), _random_stats(rng, 30))
    a = s.arrays
    ones = np.ones((1, 30))  # every sentence once: the unresampled corpus
    assert s.metric(BLEU_METRIC, ones)[0] == pytest.approx(stats.corpus_bleu(a["bleu_stats"].sum(0)))
    assert s.metric(PPL, ones)[0] == pytest.approx(math.exp(a["nll"].sum() / a["tokens"].sum()))
    st = a["bleu_stats"].sum(0)
    ref = BLEU.compute_bleu(list(st[2:6]), list(st[6:]), int(st[0]), int(st[1]), smooth_method="exp").score
    assert s.metric(BLEU_METRIC) == pytest.approx(ref)


def test_hierarchical_bootstrap():
    rng = np.random.default_rng(2)
    n = 60

    def run(q):
        st = _random_stats(rng, n)
        return _sent(rng.random(n) + q, np.full(n, 10), st)

    base = {s: run(1.0) for s in (1, 2, 3)}
    same = stats.hierarchical_bootstrap(base, base, PPL, n_boot=200)
    assert same.diff == 0 and same.lo == 0 and same.hi == 0 and same.p == 1.0  # identical runs: no difference
    worse = {
        s: _sent(b.arrays["nll"] + 5.0, b.arrays["tokens"], b.arrays["bleu_stats"]) for s, b in base.items()
    }
    r = stats.hierarchical_bootstrap(base, worse, PPL, n_boot=300, seed=3)
    expect = np.mean(
        [
            math.exp((b.arrays["nll"].sum() + 5 * n) / b.arrays["tokens"].sum())
            - math.exp(b.arrays["nll"].sum() / b.arrays["tokens"].sum())
            for b in base.values()
        ]
    )
    assert r.diff == pytest.approx(expect) and r.lo > 0 and r.p < 0.01
    assert r.kind == "paired bootstrap over seeds x sentences"
    one = stats.hierarchical_bootstrap({1: base[1]}, {1: worse[1]}, BLEU_METRIC, n_boot=50)
    assert one.kind == "paired bootstrap over sentences" and one.diff == 0
    unp = stats.hierarchical_bootstrap(base, {7: worse[1], 8: worse[2]}, PPL, n_boot=50)
    assert unp.kind.startswith("bootstrap over seeds (unpaired)")
    with pytest.raises(ValueError):
        stats.hierarchical_bootstrap(base, {1: _sent(np.ones(3), np.ones(3), np.ones((3, 10)))}, PPL)


def test_holm_is_statsmodels_multipletests_over_a_grid():
    from statsmodels.stats.multitest import multipletests

    rng = np.random.default_rng(0)
    for m in (1, 2, 5, 19):
        for _ in range(20):
            p = rng.uniform(0, 0.2, m)
            assert stats.holm(list(p)) == pytest.approx(list(multipletests(p, method="holm")[1]))


def test_the_t_tests_are_scipys():
    a, b = [5.0, 5.2, 5.1, 4.9], [5.3, 5.1, 5.6, 5.2]
    ci = sps.ttest_rel(b, a).confidence_interval(0.9)
    t = stats.paired_t(a, b, 0.9)
    assert (t.lo, t.hi) == pytest.approx((ci.low, ci.high))
    ci = sps.ttest_ind(b, a, equal_var=False).confidence_interval(0.9)
    t = stats.welch(a, b, 0.9)
    assert (t.lo, t.hi) == pytest.approx((ci.low, ci.high))
