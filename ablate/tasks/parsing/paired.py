"""Two parsers' trees of one split, compared on the same sentences: the paired bootstrap of their F1
difference (interval.paired_f1_difference), each file read and scored by EVALB's rules against the gold
trees of the treebank's split.

    python -m ablate.tasks.parsing.paired --treebank DIR --split test A.trees.txt B.trees.txt

A and B hold one bracketed tree a line (what `ablate.evaluate` and `ablate.baseline` write beside their
records: `test.avg5.trees.txt`, `test.trees.txt`); the line printed is F1(B) - F1(A).
"""

from __future__ import annotations

import argparse
import sys

from ablate.data.treebank.corpus import read_trees
from ablate.data.treebank.wsj import load_split
from ablate.tasks.parsing.evalb import evalb
from ablate.tasks.parsing.interval import LEVEL, RESAMPLES, SEED, paired_f1_difference


def compare(gold, a, b, resamples: int = RESAMPLES, seed: int = SEED) -> tuple[float, float, float, float]:
    """F1(b) - F1(a) over the gold trees, with its paired bootstrap interval and p."""
    return paired_f1_difference(evalb(gold, a).sentences, evalb(gold, b).sentences, LEVEL, resamples, seed)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m ablate.tasks.parsing.paired", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("--treebank", required=True, help="<dir>/<section>/*.mrg, as data.treebank_dir")
    ap.add_argument("--split", default="test", choices=("dev", "test"))
    ap.add_argument("a")
    ap.add_argument("b")
    args = ap.parse_args(argv)
    try:
        gold = load_split(args.treebank, args.split)
        a, b = read_trees(args.a), read_trees(args.b)
        for name, trees in ((args.a, a), (args.b, b)):
            if len(trees) != len(gold):
                raise ValueError(f"{name}: {len(trees)} trees for the {len(gold)} of the {args.split} split")
        diff, lo, hi, p = compare(gold, a, b)
    except (OSError, ValueError) as e:
        print(f"error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    print(
        f"F1(B) - F1(A) = {diff:+.2f} [{lo:+.2f}, {hi:+.2f}] (paired bootstrap over {len(gold)} sentences, "
        f"{LEVEL:.0%}, {RESAMPLES:,} resamples), p = {p:.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
