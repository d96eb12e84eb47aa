"""BLEU as a task's figure, shared by the tasks that score their outputs as text (translation, and parsing's
trees as strings).

- Dev: sacreBLEU's corpus score on detokenized text, and each sentence's sufficient statistics (hypothesis
  and reference length, matched and total n-grams for n = 1..4), from which the report's bootstrap
  recomputes corpus BLEU over resampled sentences.
- A test split (`split_bleu`, the paper's Table 2 protocol): two figures from the same hypotheses, each
  labelled: sacreBLEU on detokenized text with its signature (what to compare across papers), and
  tokenized, compound-split BLEU: Moses tokenization, then "Mitte-Links" -> "Mitte ##AT##-##AT## Links",
  then BLEU on those tokens (what tensor2tensor's get_ende_bleu.sh computed for the paper's 27.3 / 28.4).
"""

from __future__ import annotations

import re

import numpy as np
import sacrebleu

from ablate.tasks import Metric, Scored


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


def bleu_of_sums(sums) -> np.ndarray | float:
    """Corpus BLEU of the summed per-sentence statistics `bleu_stats` (the metric's reduce)."""
    return corpus_bleu(sums["bleu_stats"])


BLEU = Metric(
    "bleu",
    "BLEU",
    True,
    "corpus BLEU of the summed n-gram statistics of its sentences (sacreBLEU, 13a)",
    "dev_bleu",
    "dev_bleu",
    "bleu_stats",
    reduce=bleu_of_sums,
)


def bleu_scored(hyps: list[str], refs: list[str]) -> Scored:
    """Corpus BLEU with its signature, and the per-sentence statistics (n, 10) in sacreBLEU's order."""
    bleu = sacrebleu.metrics.BLEU()
    score = bleu.corpus_score(hyps, [refs])
    return Scored(
        {"dev_bleu": score.score, "dev_bleu_signature": str(bleu.get_signature())},
        {"bleu_stats": sentence_statistics(hyps, refs)},
    )


def sentence_statistics(hyps: list[str], refs: list[str]) -> np.ndarray:
    """Each sentence's [hyp length, ref length, matches 1-4, totals 1-4], read from the public fields of a
    one-sentence corpus score (sys_len, ref_len, counts, totals): their sums give the corpus score."""
    bleu = sacrebleu.metrics.BLEU()
    rows = []
    for h, r in zip(hyps, refs, strict=True):
        s = bleu.corpus_score([h], [[r]])
        rows.append([s.sys_len, s.ref_len, *s.counts, *s.totals])
    return np.array(rows, dtype=np.int64).reshape(len(rows), 10)


_COMPOUND = re.compile(r"(\S)-(\S)")


def split_bleu(hyps: list[str], refs: list[str], split: str, lang: str) -> dict:
    """A decoded split's sacreBLEU (with its signature) and tokenized BLEU, keys prefixed by the split."""
    bleu = sacrebleu.metrics.BLEU()
    return {
        f"{split}_bleu": bleu.corpus_score(hyps, [refs]).score,
        f"{split}_bleu_signature": str(bleu.get_signature()),
        f"{split}_bleu_tok": tokenized_bleu(hyps, refs, lang),
    }


def tokenized_bleu(hyps: list[str], refs: list[str], lang: str) -> float:
    """BLEU on Moses-tokenized, compound-split text (the paper's scoring; see the module docstring)."""
    from sacremoses import MosesTokenizer

    tok = MosesTokenizer(lang=lang)

    def prep(line: str) -> str:
        text = tok.tokenize(line, return_str=True, escape=False)
        return _COMPOUND.sub(r"\1 ##AT##-##AT## \2", _COMPOUND.sub(r"\1 ##AT##-##AT## \2", text))

    return sacrebleu.corpus_bleu(
        [prep(h) for h in hyps], [[prep(r) for r in refs]], tokenize="none", force=True
    ).score
