"""Data that prepares and trains without an error, and cannot give a meaningful figure: said before training,
in one line naming the files or the count.

- **Held-out sides swapped** (an error): the source file of dev or test holds the target language. A
  word type that occurs in only one side of the training text marks that side's language; a held-out
  source whose words are mostly target-only, and whose target's words are mostly source-only, is swapped.
  Sides that share their words (a copy task, a parser's `tree_words` target) are never flagged.
- **Too few training pairs** (a warning, on every run that uses the corpus): a model fits a few hundred
  pairs by heart and learns nothing general; the figures it gives say nothing about the architecture.
"""

from __future__ import annotations

import itertools
from pathlib import Path

MIN_TRAIN_PAIRS = 1_000
SAMPLE_LINES = 200_000  # of each training side: enough to know its words, bounded on WMT's 4.5M pairs


def _words(path: Path, limit: int | None = None) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return [w for line in itertools.islice(f, limit) for w in line.lower().split()]


def _shares(words: list[str], *only: set[str]) -> list[float]:
    return [sum(w in o for w in words) / max(1, len(words)) for o in only]


class SideWords:
    """The word types only one side of the training text has: read once, asked of each held-out split."""

    def __init__(self, train_src: Path, train_tgt: Path) -> None:
        vs, vt = set(_words(train_src, SAMPLE_LINES)), set(_words(train_tgt, SAMPLE_LINES))
        self.src_only, self.tgt_only = vs - vt, vt - vs

    def swapped(self, src: Path, tgt: Path) -> str | None:
        """Why the held-out pair `src`/`tgt` (one sentence a line) looks swapped, or None."""
        s_own, s_other = _shares(_words(src), self.src_only, self.tgt_only)
        t_other, t_own = _shares(_words(tgt), self.src_only, self.tgt_only)
        if s_other > 2 * s_own + 0.1 and t_other > 2 * t_own + 0.1:
            return (
                f"{s_other:.0%} of the source file's words occur only in the training target text "
                f"({s_own:.0%} only in the training source), and {t_other:.0%} of the target file's only in "
                "the training source"
            )
        return None


def few_pairs(pairs: int) -> str | None:
    """The warning for a training text of `pairs` pairs, or None."""
    if pairs >= MIN_TRAIN_PAIRS:
        return None
    return (
        f"warning: {pairs:,} training pair{'' if pairs == 1 else 's'}: a model learns so few by heart, "
        f"not the task (fewer than {MIN_TRAIN_PAIRS:,}; Multi30k has 29,000, the built-in corpus 30,000)"
    )
