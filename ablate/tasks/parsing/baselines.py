"""Parsers that need no training run, to read a Transformer's F1 against (Table 4 beside the paper's):
trees that branch right or left over the sentence, and the treebank PCFG (pcfg.py). Each writes trees
over the same words as the gold trees, scored as the Transformer's are (score.score_parsed: EVALB
COLLINS.prm, the gold POS tags on every tree).

The branching trees label their root with the training trees' most frequent root label and every other
bracket with their most frequent phrase label (S and NP on the WSJ): labelled F1 needs a label, and these
are the ones a parser that knows only the label counts would guess.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from ablate.data.treebank.tree import Tree, preterminals, words

from .pcfg import Grammar, Markov

__all__ = ["KINDS", "Labels", "branching", "labels_of", "make_parser"]

KINDS = ("right", "left", "pcfg")


class Labels:
    """The root label and the inner bracket label the branching trees use."""

    def __init__(self, root: str, inner: str) -> None:
        self.root, self.inner = root, inner


def labels_of(trees: list[Tree]) -> Labels:
    """The most frequent root label and phrase label below the root of `trees`."""
    inner: Counter = Counter()
    stack = [c for t in trees for c in t.children]
    while stack:
        t = stack.pop()
        if not t.is_preterminal:
            inner[t.label] += 1
            stack.extend(t.children)
    return Labels(Counter(t.label for t in trees).most_common(1)[0][0], inner.most_common(1)[0][0])


def branching(leaves: list[Tree], side: str, labels: Labels) -> Tree:
    """(root w1 (X w2 (X w3 .. wn))) for side "right", (root (X (X w1 w2) ..) wn) for "left"."""
    if len(leaves) <= 2:
        return Tree(labels.root, list(leaves))
    if side == "right":
        node = Tree(labels.inner, leaves[-2:])
        for leaf in reversed(leaves[1:-2]):
            node = Tree(labels.inner, [leaf, node])
        return Tree(labels.root, [leaves[0], node])
    node = Tree(labels.inner, leaves[:2])
    for leaf in leaves[2:-1]:
        node = Tree(labels.inner, [node, leaf])
    return Tree(labels.root, [node, leaves[-1]])


def make_parser(
    kind: str, train: list[Tree], markov: Markov | None = None
) -> Callable[[Tree], tuple[Tree, bool]]:
    """A function from a gold tree to (a tree over its words, whether the named fallback wrote it): the
    branching trees over the gold preterminals, or the PCFG's parse, right-branching where the grammar
    derives no tree."""
    labels = labels_of(train)
    if kind in ("right", "left"):
        return lambda gold: (branching(list(preterminals(gold)), kind, labels), False)
    if kind != "pcfg":
        raise ValueError(f"unknown baseline {kind!r}: one of {', '.join(KINDS)}")
    grammar = Grammar(train, markov or Markov())

    def parse(gold: Tree) -> tuple[Tree, bool]:
        best = grammar.parse(words(gold))
        if best is None:
            return branching(list(preterminals(gold)), "right", labels), True
        return best[0], False

    return parse
