"""Labeled bracketing scores computed as EVALB (Sekine & Collins 1997) with ``COLLINS.prm``.

Table 4 of the paper (section 6.3) reports WSJ section 23 F1 as computed by EVALB with the
standard ``COLLINS.prm`` parameters, which this module reproduces in plain Python:

``DELETE_LABEL TOP, -NONE-, ",", ":", "``", "''", "."``
    A *preterminal* with one of these labels is removed together with its word before any
    span is computed, so spans are counted on the sentence without those words (and
    ``Words``/tagging accuracy ignore them).  A *constituent* with one of these labels (in
    practice ``TOP``) is not counted as a bracket, but its children are kept.
``DELETE_LABEL_FOR_LENGTH -NONE-``
    The sentence length used for the ``len<=40`` cut (``CUTOFF_LEN 40``) counts every word of
    the *gold* tree except ``-NONE-`` elements (punctuation does count).
``EQ_LABEL ADVP PRT``
    ADVP and PRT match each other (for brackets and tags).
``LABELED 1``
    A test bracket matches a gold bracket with the same span and an equal label.

Where this scorer goes on and EVALB does not: EVALB stops with no summary after 10 error sentences
(``COLLINS.prm``'s ``MAX_ERROR 10``) and crashes on a tree of over 200 brackets; this scorer scores every
sentence. Next to F1 it reports ``n_error`` (EVALB's error sentences: past 10, EVALB would have printed
no figure) and ``n_over_200_brackets`` (sentences EVALB could not read), so that a figure EVALB would not
have given is visible as such.

Further rules of EVALB (``evalb.c``) that are reproduced:

* preterminals are never brackets; every constituent is, the root spanning the sentence
  included, unless its label is deleted; a bracket spanning no (remaining) word is dropped;
* labels are cut at the first ``-`` or ``=`` before comparison (``NP-SBJ`` matches ``NP``);
* brackets are multisets: identical brackets (e.g. a unary ``(NP (NP ...))``) are matched
  one-to-one, so a duplicate counts twice only if both trees have it twice;
* *crossing* counts the test brackets that cross at least one gold bracket
  (``g.start < t.start < g.end < t.end`` or ``t.start < g.start < t.end < g.end``);
* a sentence whose test tree has no (remaining) word is *skipped*; one whose gold and test
  words differ in number ("Length unmatch") or spelling ("Words unmatch") is an *error*; both
  are counted in "Number of sentence" and excluded from every other figure;
* complete match: matched == gold brackets == test brackets; F-measure = 2PR/(P+R) from the
  unrounded recall and precision (0 where EVALB would print ``nan``).

**Which tree decides what is punctuation.**  EVALB itself deletes a preterminal on reading each
tree, from *that tree's own* POS label: gold punctuation from gold tags, test punctuation
from test tags.  Model outputs from :mod:`ablate.data.treebank.linearize` carry only ``XX`` tags,
so run literally EVALB would keep the test punctuation, see more test words than gold words
and report every sentence containing punctuation as "Length unmatch".  The usual remedy
(feeding EVALB test trees whose tags were copied from the gold tree) is what ``test_tags``
does: with ``"gold"`` the gold POS tags are copied position by position onto the test tree's
preterminals (when both have the same number of words, ignoring ``-NONE-``), so deletion is
decided from the gold tags, exactly as if EVALB had been fed those trees; tagging accuracy is
then meaningless and is reported as ``None``.  ``"own"`` is literal EVALB (a real tagger's
tags); ``"auto"`` (default) chooses ``"gold"`` for a test tree whose tags are all ``XX``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

from ablate.data.treebank.tree import Tree, preterminals

__all__ = [
    "EvalbParams",
    "COLLINS",
    "SentenceResult",
    "EvalbSummary",
    "EvalbResult",
    "evalb",
    "sentence_length",
]

OK, ERROR, SKIP = 0, 1, 2  # EVALB's per-sentence "Stat." column (error: Status 1, skip: Status 2)

TestTags = Literal["auto", "own", "gold"]


@dataclass(frozen=True)
class EvalbParams:
    """EVALB parameters; the defaults are the standard ``COLLINS.prm``."""

    delete_labels: frozenset[str] = frozenset({"TOP", "-NONE-", ",", ":", "``", "''", "."})
    delete_labels_for_length: frozenset[str] = frozenset({"-NONE-"})
    eq_labels: tuple[tuple[str, str], ...] = (("ADVP", "PRT"),)
    cutoff_len: int = 40
    labeled: bool = True

    def label_class(self, label: str) -> str:
        """A canonical representative, so that EQ_LABEL pairs compare equal."""
        for a, b in self.eq_labels:
            if label == b:
                return a
        return label


COLLINS = EvalbParams()


@dataclass(frozen=True)
class _Sentence:
    """What EVALB reads from one tree."""

    words: list[str]  # remaining words (deleted preterminals removed)
    tags: list[str]
    brackets: list[tuple[int, int, str]]  # (start, end exclusive, label) over remaining words
    length: int  # words not in DELETE_LABEL_FOR_LENGTH (the len<=40 figure)


def _modify_label(label: str) -> str:
    # EVALB cuts constituent labels at the first '-' or '=' (function tags, indices).
    for k, ch in enumerate(label):
        if ch in "-=":
            return label[:k]
    return label


def _read(tree: Tree, params: EvalbParams) -> _Sentence:
    """Words, tags, brackets and length of a tree, the way EVALB's ``read_line`` sees them."""
    words: list[str] = []
    tags: list[str] = []
    raw: list[tuple[int, int, str]] = []
    length = 0
    # (node, start) pairs; start is None until the node is opened.
    stack: list[tuple[Tree, int | None]] = [(tree, None)]
    while stack:
        node, start = stack.pop()
        if node.is_preterminal:
            if node.label not in params.delete_labels_for_length:
                length += 1
            if node.label not in params.delete_labels:
                words.append(node.word or "")
                tags.append(node.label)
        elif start is None:
            stack.append((node, len(words)))
            stack.extend((c, None) for c in reversed(node.children))
        else:
            raw.append((start, len(words), node.label))
    brackets = []
    for start, end, label in raw:
        label = _modify_label(label)
        if start == end or label in params.delete_labels:
            continue  # zero-width after word deletion, or a deleted label such as TOP
        brackets.append((start, end, label))
    return _Sentence(words, tags, brackets, length)


def sentence_length(tree: Tree, params: EvalbParams = COLLINS) -> int:
    """EVALB's length of a gold sentence: words except ``-NONE-`` (punctuation counted)."""
    return sum(1 for p in preterminals(tree) if p.label not in params.delete_labels_for_length)


@dataclass(frozen=True)
class SentenceResult:
    """One line of EVALB's per-sentence table (ID is 1-based, as EVALB's line number)."""

    id: int
    length: int
    status: int  # 0 ok, 1 error, 2 skip
    matched: int = 0
    gold_brackets: int = 0
    test_brackets: int = 0
    crossing: int = 0
    words: int = 0
    correct_tags: int | None = 0  # None when the test tags were copied from gold
    message: str = ""

    @property
    def recall(self) -> float:
        return 100.0 * self.matched / self.gold_brackets if self.gold_brackets else 0.0

    @property
    def precision(self) -> float:
        return 100.0 * self.matched / self.test_brackets if self.test_brackets else 0.0


@dataclass(frozen=True)
class EvalbSummary:
    """EVALB's ``=== Summary ===`` block for all sentences or for ``len <= max_len``.

    Percentages are on EVALB's 0-100 scale; ``average_crossing`` is per valid sentence.
    """

    max_len: int | None
    n_sentences: int
    n_error: int
    n_skip: int
    n_valid: int
    matched: int
    gold_brackets: int
    test_brackets: int
    words: int
    correct_tags: int | None
    recall: float
    precision: float
    fmeasure: float
    complete_match: float
    average_crossing: float
    no_crossing: float
    two_or_less_crossing: float
    tagging_accuracy: float | None


def _ratio(num: float, den: float, scale: float = 100.0) -> float:
    return scale * num / den if den else 0.0


@dataclass
class EvalbResult:
    """Per-sentence EVALB results, with :meth:`summary` and :meth:`format`."""

    sentences: list[SentenceResult] = field(default_factory=list)
    params: EvalbParams = COLLINS
    # The F1 of one flat tree per sentence, (S w1 .. wn), over the same gold trees (set by
    # ablate.tasks.parsing.score.score_trees): the floor below which a parser has learned nothing.
    flat_f1: float | None = None

    def summary(self, max_len: int | None = None) -> EvalbSummary:
        """Corpus figures over all sentences, or over those of gold length <= ``max_len``."""
        sel = [s for s in self.sentences if max_len is None or s.length <= max_len]
        valid = [s for s in sel if s.status == OK]
        matched = sum(s.matched for s in valid)
        gold = sum(s.gold_brackets for s in valid)
        test = sum(s.test_brackets for s in valid)
        n_words = sum(s.words for s in valid)
        tagged = all(s.correct_tags is not None for s in valid)
        correct = sum(s.correct_tags or 0 for s in valid) if tagged else None
        recall, precision = _ratio(matched, gold), _ratio(matched, test)
        fmeasure = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        n = len(valid)
        return EvalbSummary(
            max_len=max_len,
            n_sentences=len(sel),
            n_error=sum(s.status == ERROR for s in sel),
            n_skip=sum(s.status == SKIP for s in sel),
            n_valid=n,
            matched=matched,
            gold_brackets=gold,
            test_brackets=test,
            words=n_words,
            correct_tags=correct,
            recall=recall,
            precision=precision,
            fmeasure=fmeasure,
            complete_match=_ratio(sum(s.matched == s.gold_brackets == s.test_brackets for s in valid), n),
            average_crossing=_ratio(sum(s.crossing for s in valid), n, scale=1.0),
            no_crossing=_ratio(sum(s.crossing == 0 for s in valid), n),
            two_or_less_crossing=_ratio(sum(s.crossing <= 2 for s in valid), n),
            tagging_accuracy=_ratio(correct, n_words) if correct is not None else None,
        )

    def format(self) -> str:
        """EVALB-like report: the per-sentence table, its totals line, and both summaries."""
        lines = [
            "  Sent.                        Matched  Bracket   Cross        Correct Tag",
            " ID  Len.  Stat. Recal  Prec.  Bracket gold test Bracket Words  Tags Accracy",
            "=" * 76,
        ]
        for s in self.sentences:
            tag_cols = (
                f"{s.correct_tags:4d}   {_ratio(s.correct_tags, s.words):6.2f}"
                if s.correct_tags is not None
                else "   -      -   "
            )
            lines.append(
                f"{s.id:4d}  {s.length:3d}    {s.status:d}  {s.recall:6.2f} {s.precision:6.2f}   "
                f"{s.matched:3d}    {s.gold_brackets:3d}  {s.test_brackets:3d}    {s.crossing:3d}"
                f"   {s.words:4d}  {tag_cols}"
            )
        lines.append("=" * 76)
        total = self.summary()
        acc = f"{total.tagging_accuracy:6.2f}" if total.tagging_accuracy is not None else "     -"
        lines.append(
            f"                {total.recall:6.2f} {total.precision:6.2f} {total.matched:6d} "
            f"{total.gold_brackets:5d} {total.test_brackets:5d}  "
            f"{sum(s.crossing for s in self.sentences if s.status == OK):5d}  {total.words:5d} "
            f"{total.correct_tags if total.correct_tags is not None else '-':>5}   {acc}"
        )
        lines.append("=== Summary ===")
        cut = self.params.cutoff_len
        lines += _format_summary(total, "All")
        lines += _format_summary(self.summary(cut), f"len<={cut}")
        for s in self.sentences:
            if s.message:
                lines.append(f"{s.id} : {s.message}")
        return "\n".join(lines) + "\n"


def _format_summary(s: EvalbSummary, title: str) -> list[str]:
    acc = f"{s.tagging_accuracy:6.2f}" if s.tagging_accuracy is not None else "     -"
    return [
        "",
        f"-- {title} --",
        f"Number of sentence        = {s.n_sentences:6d}",
        f"Number of Error sentence  = {s.n_error:6d}",
        f"Number of Skip  sentence  = {s.n_skip:6d}",
        f"Number of Valid sentence  = {s.n_valid:6d}",
        f"Bracketing Recall         = {s.recall:6.2f}",
        f"Bracketing Precision      = {s.precision:6.2f}",
        f"Bracketing FMeasure       = {s.fmeasure:6.2f}",
        f"Complete match            = {s.complete_match:6.2f}",
        f"Average crossing          = {s.average_crossing:6.2f}",
        f"No crossing               = {s.no_crossing:6.2f}",
        f"2 or less crossing        = {s.two_or_less_crossing:6.2f}",
        f"Tagging accuracy          = {acc}",
    ]


def copy_gold_tags(gold: Tree, test: Tree, params: EvalbParams) -> Tree | None:
    """``test`` with its POS tags replaced by the gold ones, position by position.

    ``-NONE-`` elements are skipped on both sides; returns None when the word counts differ
    (EVALB will then report the length mismatch).
    """
    skip = params.delete_labels_for_length
    gold_tags = [p.label for p in preterminals(gold) if p.label not in skip]
    it = iter(gold_tags)
    n_test = sum(1 for p in preterminals(test) if p.label not in skip)
    if n_test != len(gold_tags):
        return None

    def copy(node: Tree) -> Tree:
        if node.is_preterminal:
            label = node.label if node.label in skip else next(it)
            return Tree.leaf(label, node.word or "")
        return Tree(node.label, [copy(c) for c in node.children])

    return copy(test)


def _all_xx(tree: Tree) -> bool:
    return all(p.label == "XX" for p in preterminals(tree))


def _crossing(gold: list[tuple[int, int, str]], test: list[tuple[int, int, str]]) -> int:
    """Number of test brackets crossing at least one gold bracket (labels are irrelevant)."""
    spans = {(g[0], g[1]) for g in gold}
    n = 0
    for ts, te, _ in test:
        if any((gs < ts < ge < te) or (ts < gs < te < ge) for gs, ge in spans):
            n += 1
    return n


def _score_sentence(
    sid: int, gold: Tree, test: Tree, params: EvalbParams, test_tags: TestTags
) -> SentenceResult:
    copy_tags = test_tags == "gold" or (test_tags == "auto" and _all_xx(test))
    if copy_tags:
        test = copy_gold_tags(gold, test, params) or test
    g, t = _read(gold, params), _read(test, params)
    if not t.words:
        return SentenceResult(sid, g.length, SKIP, message="Skip (test tree has no word)")
    if len(g.words) != len(t.words):
        return SentenceResult(sid, g.length, ERROR, message=f"Length unmatch ({len(g.words)}|{len(t.words)})")
    for gw, tw in zip(g.words, t.words, strict=True):
        if gw != tw:
            return SentenceResult(sid, g.length, ERROR, message=f"Words unmatch ({gw}|{tw})")

    def key(b: tuple[int, int, str]) -> tuple[int, int, str]:
        return (b[0], b[1], params.label_class(b[2]) if params.labeled else "")

    # Multiset intersection == EVALB's greedy one-to-one matching, because EQ_LABEL classes
    # partition the labels (any two equivalent brackets are interchangeable).
    gold_count, test_count = Counter(map(key, g.brackets)), Counter(map(key, t.brackets))
    matched = sum((gold_count & test_count).values())
    correct = None
    if not copy_tags:
        correct = sum(
            params.label_class(a) == params.label_class(b) for a, b in zip(g.tags, t.tags, strict=True)
        )
    return SentenceResult(
        sid,
        g.length,
        OK,
        matched=matched,
        gold_brackets=len(g.brackets),
        test_brackets=len(t.brackets),
        crossing=_crossing(g.brackets, t.brackets),
        words=len(g.words),
        correct_tags=correct,
    )


def evalb(
    gold: list[Tree], test: list[Tree], params: EvalbParams = COLLINS, test_tags: TestTags = "auto"
) -> EvalbResult:
    """Score ``test`` trees against ``gold`` trees, sentence by sentence, as EVALB does.

    Trees may be raw (traces, function tags, ``TOP``) or cleaned: the deletions above apply
    either way.  ``test_tags`` chooses how test POS tags are treated (see the module
    docstring); ``"auto"`` makes ``XX``-tagged model output scorable.  Raises ``ValueError``
    if the two lists differ in length (EVALB's "Number of lines unmatch").
    """
    if len(gold) != len(test):
        raise ValueError(f"evalb: {len(gold)} gold trees but {len(test)} test trees")
    results = [
        _score_sentence(i + 1, g, t, params, test_tags)
        for i, (g, t) in enumerate(zip(gold, test, strict=True))
    ]
    return EvalbResult(results, params)
