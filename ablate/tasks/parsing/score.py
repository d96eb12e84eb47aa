"""Scoring linearized parser outputs against gold trees (section 6.3, Table 4: WSJ 23 F1).

``score_predictions`` rebuilds a tree from each model output over its source words
(:func:`ablate.data.treebank.linearize.delinearize`, which repairs malformed outputs) and scores the
trees with EVALB/COLLINS.prm rules (:func:`ablate.tasks.parsing.evalb.evalb`).  Figures are on
EVALB's 0-100 scale.

Command line::

    python -m ablate.tasks.parsing.score GOLD.mrg PRED.txt [--sources SRC.txt] [--details] [--trees OUT]

GOLD is bracketed trees (any number per line); PRED has one linearized tree per line; the
source words default to the gold words.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from ablate.data.treebank.linearize import delinearize_with_report
from ablate.data.treebank.tree import Tree, clean, read_mrg, to_string, words

from .evalb import COLLINS, EvalbResult, copy_gold_tags, evalb
from .interval import f1_interval

__all__ = [
    "score_predictions",
    "score_trees",
    "score_parsed",
    "parsed_result",
    "sentence_counts",
    "figures",
    "main",
]


def score_trees(
    sources: list[str], predictions: list[str], gold: list[Tree]
) -> tuple[EvalbResult, list[Tree], list[list[str]]]:
    """The EVALB result, the rebuilt trees, and the repair notes of each prediction. Each tree carries the
    gold POS tags in place of XX (where its words are the gold words), so that EVALB itself reads it as
    this scorer does: it deletes punctuation by each tree's own tags."""
    if not len(sources) == len(predictions) == len(gold):
        raise ValueError(
            f"score: {len(sources)} sources, {len(predictions)} predictions and {len(gold)} gold trees"
        )
    trees: list[Tree] = []
    notes: list[list[str]] = []
    for src, pred, g in zip(sources, predictions, gold, strict=True):
        tree, repairs = delinearize_with_report(pred, src.split())
        trees.append(copy_gold_tags(g, tree, COLLINS) or tree)
        notes.append(repairs)
    return replace(evalb(gold, trees), flat_f1=_flat_f1(sources, gold)), trees, notes


def _flat_f1(sources: list[str], gold: list[Tree]) -> float:
    flat = [delinearize_with_report("", src.split())[0] for src in sources]  # (S XX .. XX) over the words
    return evalb(gold, flat).summary().fmeasure


def score_parsed(gold: list[Tree], trees: list[Tree]) -> dict:
    """The figures of `score_predictions` for trees over the gold words (a baseline's parses), read as the
    Transformer's are: with the gold POS tags in place of their own."""
    return figures(parsed_result(gold, trees), [[] for _ in trees])


def parsed_result(gold: list[Tree], trees: list[Tree]) -> EvalbResult:
    """The EVALB result of trees over the gold words, read with the gold POS tags (score_parsed's)."""
    sources = [" ".join(words(g)) for g in gold]
    return replace(evalb(gold, trees, test_tags="gold"), flat_f1=_flat_f1(sources, gold))


def sentence_counts(result: EvalbResult) -> str:
    """Each sentence's bracket counts, as JSON (matched, gold, test, valid): what a paired test over the
    same sentences reads (interval.paired_counts_difference), written beside a split's trees."""
    from .evalb import OK

    s = result.sentences
    return json.dumps({
        "matched": [x.matched for x in s], "gold": [x.gold_brackets for x in s],
        "test": [x.test_brackets for x in s], "valid": [x.status == OK for x in s],
    }) + "\n"  # fmt: skip


def score_predictions(sources: list[str], predictions: list[str], gold: list[Tree]) -> dict:
    """Corpus EVALB figures for linearized predictions.

    Returns ``f1`` with its 95% bootstrap interval over sentences ``f1_lo``..``f1_hi``, ``precision``,
    ``recall`` and ``complete_match`` (all sentences),
    ``f1_le40``, ``precision_le40``, ``recall_le40`` (gold length <= 40), ``average_crossing``,
    ``n`` (sentences), ``n_valid``, ``n_error`` and ``n_skip`` (EVALB's counts: an error is a
    source whose words differ from the gold words), ``n_repaired`` (predictions that
    needed at least one repair to become a tree over the source words) and ``f1_flat`` (the F1
    of one flat tree per sentence over the same gold trees: the floor).
    """
    result, _, notes = score_trees(sources, predictions, gold)
    return figures(result, notes)


EVALB_MAX_BRACKETS = 200  # evalb.c crashes on a tree with more


def parsing_metrics(sources: list[str], hyps: list[str], split_gold: list[Tree]) -> dict:
    """EVALB (COLLINS.prm) figures of decoded linearized trees, on a 0-100 scale.

    ``hyps[i]`` is the model's output for ``sources[i]`` whose gold tree is ``split_gold[i]``; when fewer
    hypotheses than sentences are given (``decode.dev_limit``), the first ``len(hyps)`` are scored.
    Keys: ``f1``, ``precision``, ``recall``, ``f1_le40`` (and its precision/recall), ``complete_match``,
    ``average_crossing``, ``n``, ``n_valid``, ``n_error``, ``n_skip``, ``n_repaired`` (see
    :func:`ablate.tasks.parsing.score.score_predictions`).
    """
    n = len(hyps)
    if len(sources) < n or len(split_gold) < n:
        raise ValueError(
            f"parsing_metrics: {n} hypotheses but {len(sources)} sources and {len(split_gold)} gold trees"
        )
    return score_predictions(list(sources[:n]), list(hyps), list(split_gold[:n]))


def figures(result: EvalbResult, notes: list[list[str]]) -> dict:
    """The record's parsing figures: EVALB's summary (all and len <= 40), its counts, and what EVALB itself
    would have refused (error sentences past MAX_ERROR 10; trees of over 200 brackets)."""
    full, short = result.summary(), result.summary(result.params.cutoff_len)
    low, high = f1_interval(result.sentences)
    return {
        "f1": full.fmeasure,
        "f1_lo": low,  # the 95% bootstrap interval over sentences (interval.py)
        "f1_hi": high,
        "precision": full.precision,
        "recall": full.recall,
        "complete_match": full.complete_match,
        "average_crossing": full.average_crossing,
        "f1_le40": short.fmeasure,
        "precision_le40": short.precision,
        "recall_le40": short.recall,
        "n": full.n_sentences,
        "n_valid": full.n_valid,
        "n_error": full.n_error,
        "n_skip": full.n_skip,
        "n_repaired": sum(1 for n in notes if n),
        **({"f1_flat": result.flat_f1} if result.flat_f1 is not None else {}),
        "n_over_200_brackets": sum(
            max(x.gold_brackets, x.test_brackets) > EVALB_MAX_BRACKETS for x in result.sentences
        ),
    }


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; prints the summary as JSON (and EVALB's table with --details)."""
    ap = argparse.ArgumentParser(
        prog="python -m ablate.tasks.parsing.score", description=__doc__.split("\n")[0]
    )
    ap.add_argument("gold", type=Path, help="gold trees, bracketed (.mrg or one per line)")
    ap.add_argument("predictions", type=Path, help="one linearized tree per line")
    ap.add_argument("--sources", type=Path, help="one source sentence per line (default: gold words)")
    ap.add_argument("--details", action="store_true", help="also print the EVALB-style table")
    ap.add_argument("--trees", type=Path, help="write the rebuilt trees here, one a line, for EVALB itself")
    args = ap.parse_args(argv)
    try:
        gold = [clean(t) for t in read_mrg(args.gold)]
        preds = args.predictions.read_text(encoding="utf-8").splitlines()
        if args.sources:
            sources = args.sources.read_text(encoding="utf-8").splitlines()
        else:
            sources = [" ".join(words(t)) for t in gold]
        result, trees, notes = score_trees(sources, preds, gold)
        if args.trees:
            args.trees.write_text("".join(to_string(t) + "\n" for t in trees), encoding="utf-8")
    except (OSError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.details:
        print(result.format(), end="")
    print(json.dumps(figures(result, notes), indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
