"""A treebank PCFG, the baseline beside the Transformer in Table 4: rules read off the training trees
(Charniak 1996) with parent annotation (Johnson 1998) and horizontal Markovization (Klein & Manning 2003),
unknown words by their shape, and exact Viterbi CKY.

    trees  --annotate-->  binary trees under ROOT  --count-->  Grammar  --parse(words)-->  best tree

- **Annotation** (`Markov`): every phrase label carries its parent's (`NP^S`: vertical order 2), and a
  phrase of more than two children is right-factored into intermediate symbols that remember the parent
  and the last `horizontal` siblings (`@NP^S|DT`). `unannotate` undoes both exactly.
- **Rules**: P(A -> B C) and P(A -> B) are relative frequencies among the rules of A (maximum likelihood,
  no smoothing); tags rewrite only to words.
- **Lexicon**: P(w | t) = c(t, w) / c(t) for a word seen more than once in training; every rarer word is
  counted in training, and read in parsing, as its signature (capitalization, digits, dash, suffix), and
  a signature never seen in training as `UNK`.
- **Search**: exact Viterbi CKY over the binary rules, with unary chains closed in each cell, in numpy
  (float32 log-probabilities): every span's rules are scored for all split points at once.

nltk's `Tree.chomsky_normal_form` does the same annotation on its own tree type, and its
`ViterbiParser` is a pure-Python chart over unbinarized rules, far too slow for a grammar of this size;
neither is used, so the package keeps one tree type.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from ablate.data.treebank.tree import Tree, preterminals

__all__ = ["Markov", "Grammar", "annotate", "unannotate", "signature", "tree_logprob"]

ROOT = "ROOT"
UNK = "UNK"
SUFFIXES = (
    "ing",
    "ed",
    "ly",
    "ion",
    "er",
    "est",
    "ity",
    "ment",
    "ness",
    "ble",
    "ive",
    "ic",
    "ous",
    "al",
    "s",
    "y",
)
MAX_UNARY_CHAIN = 8  # closing unary chains in a cell stops here at the latest (treebank chains are <= 3)


@dataclass(frozen=True)
class Markov:
    vertical: int = 2  # 1: labels as written; 2: each phrase label carries its parent's (Johnson 1998)
    horizontal: int = 1  # siblings an intermediate symbol of a factored phrase remembers


def _base(label: str) -> str:
    return label.split("^", 1)[0]


def annotate(tree: Tree, markov: Markov = Markov()) -> Tree:
    """`tree` (cleaned, as scored) as the grammar sees it: under ROOT, parent-annotated, binarized."""

    def node(t: Tree, parent: str) -> Tree:
        if t.is_preterminal:
            return Tree.leaf(t.label, t.word or "")
        label = f"{t.label}^{parent}" if markov.vertical >= 2 else t.label
        return _binarize(label, [node(c, t.label) for c in t.children], markov.horizontal)

    return Tree(ROOT, [node(tree, ROOT)])


def _binarize(label: str, kids: list[Tree], horizontal: int) -> Tree:
    """A -> k0 k1 .. kn as A -> k0 @A|k0, @A|k0 -> k1 @A|k1, ..., the last two children together."""
    if len(kids) <= 2:
        return Tree(label, kids)
    tail = Tree("", kids[-2:])
    for i in range(len(kids) - 2, 0, -1):  # from the right: the intermediate covering kids[i:]
        seen = [_base(k.label) for k in kids[max(0, i - horizontal) : i]] if horizontal else []
        tail.label = f"@{label}|{','.join(seen)}"
        tail = Tree("", [kids[i - 1], tail]) if i > 1 else tail
    return Tree(label, [kids[0], tail])


def unannotate(tree: Tree) -> Tree:
    """The treebank tree of a parse: intermediate symbols spliced into their parent, annotations and ROOT
    dropped."""

    def node(t: Tree) -> Tree:
        if t.is_preterminal:
            return Tree.leaf(t.label, t.word or "")
        kids: list[Tree] = []
        for c in t.children:
            kids += node(c).children if c.label.startswith("@") else [node(c)]
        return Tree(_base(t.label), kids)

    out = node(tree)
    return out.children[0] if out.label == ROOT and len(out.children) == 1 else out


def signature(word: str, first: bool) -> str:
    """The class a rare or unseen word is read as: its shape (Petrov et al. 2006's Berkeley parser reads
    unknown words by such signatures): capitalized (sentence-initially apart), digits, a dash, a suffix."""
    parts = [UNK]
    if word[:1].isupper():
        parts.append("INITC" if first else "CAPS")
    elif any(c.isupper() for c in word):
        parts.append("MIXC")
    if any(c.isdigit() for c in word):
        parts.append("NUM")
    if "-" in word:
        parts.append("DASH")
    lower = word.lower()
    parts += [s for s in SUFFIXES if lower.endswith(s) and len(lower) > len(s) + 1][:1]
    return "-".join(parts)


def _rules(tree: Tree):
    """(parent, children labels) of every rule of an annotated tree, tags' words excluded."""
    stack = [tree]
    while stack:
        t = stack.pop()
        if not t.is_preterminal:
            yield t.label, tuple(c.label for c in t.children)
            stack.extend(t.children)


class Grammar:
    """Rule and lexicon log-probabilities of annotated trees, in arrays for CKY."""

    def __init__(self, trees: list[Tree], markov: Markov = Markov(), rare: int = 1) -> None:
        self.markov = markov
        annotated = [annotate(t, markov) for t in trees]
        rules = Counter(r for t in annotated for r in _rules(t))
        if any(len(kids) > 2 for _, kids in rules):
            raise ValueError("pcfg: a rule has more than two children after binarization")
        self.tags = sorted({p.label for t in trees for p in preterminals(t)})
        self.symbols = self.tags + sorted({a for a, _ in rules} - set(self.tags))
        self.index = {s: i for i, s in enumerate(self.symbols)}
        self.root = self.index[ROOT]
        lhs = Counter()
        for (a, _), c in rules.items():
            lhs[a] += c
        self._binary(rules, lhs)
        self._unary(rules, lhs)
        self._lexicon(trees, rare)

    def _binary(self, rules: Counter, lhs: Counter) -> None:
        binary = sorted(
            (self.index[a], self.index[k[0]], self.index[k[1]], c / lhs[a])
            for (a, k), c in rules.items()
            if len(k) == 2
        )
        a, b, c, p = (np.array(x) for x in zip(*binary, strict=True))
        self.b_parent, self.b_left, self.b_right = a, b, c
        self.b_logp = np.log(p).astype(np.float32)
        self.b_parents, self.b_starts = np.unique(a, return_index=True)
        self.b_range = dict(zip(self.b_parents.tolist(), zip(self.b_starts, [*self.b_starts[1:], len(a)])))

    def _unary(self, rules: Counter, lhs: Counter) -> None:
        unary = sorted(
            (self.index[a], self.index[k[0]], c / lhs[a]) for (a, k), c in rules.items() if len(k) == 1
        )
        a, b, p = (np.array(x) for x in zip(*unary, strict=True))
        self.u_parent, self.u_child, self.u_logp = a, b, np.log(p).astype(np.float32)
        self.u_parents, self.u_starts, self.u_sizes = np.unique(a, return_index=True, return_counts=True)

    def _lexicon(self, trees: list[Tree], rare: int) -> None:
        tagged = [(p.word or "", p.label, i == 0) for t in trees for i, p in enumerate(preterminals(t))]
        self.word_count = Counter(w for w, _, _ in tagged)
        counts: dict[str, Counter] = {}
        for w, tag, first in tagged:
            keys = {w} if self.word_count[w] > rare else {signature(w, first), UNK}
            for key in keys:
                counts.setdefault(key, Counter())[tag] += 1
        tag_total = Counter(tag for _, tag, _ in tagged)
        self.rare = rare
        self.lexicon = {
            key: {self.index[t]: float(np.log(c / tag_total[t])) for t, c in by_tag.items()}
            for key, by_tag in counts.items()
        }

    def lexical(self, word: str, first: bool) -> dict[int, float]:
        """log P(word | tag) for each tag that may write `word`, by the word, its signature or UNK."""
        if self.word_count[word] > self.rare:
            return self.lexicon[word]
        return self.lexicon.get(signature(word, first)) or self.lexicon[UNK]

    def parse(self, words: list[str]) -> tuple[Tree, float] | None:
        """The most probable tree over `words` (treebank labels, the grammar's tags) and its
        log-probability; None where the grammar derives no tree."""
        chart = Chart(self, words)
        score = float(chart.score[0, len(words), self.root])
        return (unannotate(chart.tree(self.root, 0, len(words))), score) if np.isfinite(score) else None


class Chart:
    """The Viterbi chart of one sentence: score[i, j, A] is the best log-probability of A over words i..j-1,
    unary_child[i, j, A] the symbol below A where that best derivation starts with a unary rule."""

    def __init__(self, g: Grammar, words: list[str]) -> None:
        n, self.g, self.words = len(words), g, words
        self.score = np.full((n, n + 1, len(g.symbols)), -np.inf, dtype=np.float32)
        self.unary_child = np.full((n, n + 1, len(g.symbols)), -1, dtype=np.int32)
        for i, w in enumerate(words):
            for tag, logp in g.lexical(w, i == 0).items():
                self.score[i, i + 1, tag] = logp
            self._close_unaries(i, i + 1)
        for length in range(2, n + 1):
            for i in range(n - length + 1):
                self.score[i, i + length, g.b_parents] = np.maximum.reduceat(
                    self._binary(i, i + length), g.b_starts
                )
                self._close_unaries(i, i + length)

    def _binary(self, i: int, j: int, rules: slice = slice(None)) -> np.ndarray:
        """(split points, rules): the score of each binary rule over i..j at each split k = i+1..j-1; the
        best over k when `rules` is all of them."""
        g = self.g
        left = self.score[i, i + 1 : j][:, g.b_left[rules]]  # (j-i-1, R): best B over i..k
        right = self.score[i + 1 : j, j][:, g.b_right[rules]]  # (j-i-1, R): best C over k..j
        both = left + right
        return both.max(axis=0) + g.b_logp if rules == slice(None) else both + g.b_logp[rules]

    def _close_unaries(self, i: int, j: int) -> None:
        g, cell = self.g, self.score[i, j]
        for _ in range(MAX_UNARY_CHAIN):
            cand = cell[g.u_child] + g.u_logp  # (U,)
            best = np.maximum.reduceat(cand, g.u_starts)
            better = best > cell[g.u_parents]
            if not better.any():
                return
            # the first rule of each parent's group that reaches its best
            at_best = cand == np.repeat(best, g.u_sizes)
            first = -np.maximum.reduceat(np.where(at_best, -np.arange(len(cand)), -len(cand)), g.u_starts)
            self.unary_child[i, j, g.u_parents[better]] = g.u_child[first[better]]
            cell[g.u_parents[better]] = best[better]

    def tree(self, a: int, i: int, j: int) -> Tree:
        """The best derivation of symbol `a` over words i..j-1, as an annotated tree."""
        g, label = self.g, self.g.symbols[a]
        child = int(self.unary_child[i, j, a])
        if child >= 0:
            return Tree(label, [self.tree(child, i, j)])
        if j == i + 1:
            return Tree.leaf(label, self.words[i])
        start, end = g.b_range[a]
        scores = self._binary(i, j, slice(start, end))  # (split points, rules of a)
        k, r = np.unravel_index(int(np.argmax(scores)), scores.shape)
        left, right = int(g.b_left[start + r]), int(g.b_right[start + r])
        return Tree(label, [self.tree(left, i, i + 1 + k), self.tree(right, i + 1 + k, j)])


def tree_logprob(g: Grammar, tree: Tree) -> float:
    """The log-probability the grammar gives `tree` (a cleaned treebank tree): an independent path to the
    figure the search maximizes; -inf where it uses a rule the grammar lacks."""
    total = 0.0
    annotated = annotate(tree, g.markov)
    rule_logp = {}
    for a, b, c, lp in zip(g.b_parent, g.b_left, g.b_right, g.b_logp, strict=True):
        rule_logp[(int(a), int(b), int(c))] = float(lp)
    for a, b, lp in zip(g.u_parent, g.u_child, g.u_logp, strict=True):
        rule_logp[(int(a), int(b))] = float(lp)
    for a, kids in _rules(annotated):
        key = (g.index.get(a), *(g.index.get(k) for k in kids))
        if key not in rule_logp:
            return float("-inf")
        total += rule_logp[key]
    for i, p in enumerate(preterminals(annotated)):
        total += g.lexical(p.word or "", i == 0).get(g.index.get(p.label, -1), float("-inf"))
    return total
