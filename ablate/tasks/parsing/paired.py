"""Two parsers' trees of one split, compared on the same sentences: the paired bootstrap of their F1
difference (interval.paired_f1_difference), each file read and scored by EVALB's rules against the gold
trees of the treebank's split.

    python -m ablate.tasks.parsing.paired --treebank DIR --split test A.trees.txt B.trees.txt

A and B hold one bracketed tree a line (what `ablate.evaluate` and `ablate.baseline` write beside their
records: `test.avg5.trees.txt`, `test.trees.txt`); the line printed is F1(B) - F1(A).

    python -m ablate.tasks.parsing.paired --treebank DIR --split test --counts X.trees.txt [...]

writes each file's per-sentence bracket counts beside it, `X.evalb.json`, as `ablate.evaluate` and
`ablate.baseline` write them for the trees they make: for trees written before they did, so that Table 4
pairs them too. The counts are a function of the trees and the gold trees alone; an existing file that
holds other counts is refused, never overwritten.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ablate.data.treebank.corpus import read_trees
from ablate.data.treebank.wsj import load_split
from ablate.tasks.parsing.evalb import evalb
from ablate.tasks.parsing.interval import LEVEL, RESAMPLES, SEED, paired_f1_difference
from ablate.tasks.parsing.score import parsed_result, sentence_counts


def compare(gold, a, b, resamples: int = RESAMPLES, seed: int = SEED) -> tuple[float, float, float, float]:
    """F1(b) - F1(a) over the gold trees, with its paired bootstrap interval and p."""
    return paired_f1_difference(evalb(gold, a).sentences, evalb(gold, b).sentences, LEVEL, resamples, seed)


def counts_path(trees: Path) -> Path:
    """Where the per-sentence counts of a split's decode go: `X.evalb.json` beside its trees `X.trees.txt`
    (and its hypotheses `X.hyp.txt`)."""
    stem = trees.name.removesuffix(".trees.txt").removesuffix(".hyp.txt")
    return trees.with_name(stem + ".evalb.json")


def write_counts(gold, trees_file: Path) -> Path:
    """Score `trees_file` against `gold` as `ablate.baseline` scores its parses and write the sentences'
    counts beside it; the same counts already there are kept, other counts are an error."""
    text = sentence_counts(parsed_result(gold, _trees(trees_file, len(gold))))
    out = counts_path(trees_file)
    if out.exists() and out.read_text() != text:
        raise ValueError(f"{out}: holds other counts than {trees_file.name} gives; remove it to write them")
    if not out.exists():  # whole or not at all: a reader never sees half a file
        part = out.with_name(out.name + f".part{os.getpid()}")
        part.write_text(text)
        os.replace(part, out)
    return out


def _trees(path: Path, n: int) -> list:
    trees = read_trees(path)
    if len(trees) != n:
        raise ValueError(f"{path}: {len(trees)} trees for the {n} of the split")
    return trees


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m ablate.tasks.parsing.paired", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("--treebank", required=True, help="<dir>/<section>/*.mrg, as task_cfg.treebank_dir")
    ap.add_argument("--split", default="test", choices=("dev", "test"))
    ap.add_argument("--counts", action="store_true", help="write each file's counts beside it instead")
    ap.add_argument("files", nargs="+", type=Path, help="A B (printed: B - A), or the files of --counts")
    args = ap.parse_args(argv)
    if not args.counts and len(args.files) != 2:
        ap.error("give two trees files, A and B (or --counts and the files to count)")
    try:
        gold = load_split(args.treebank, args.split)
        if args.counts:
            for f in args.files:
                print(f"{write_counts(gold, f)}: {len(gold)} sentences of the {args.split} split")
            return 0
        diff, lo, hi, p = compare(gold, *(_trees(f, len(gold)) for f in args.files))
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
