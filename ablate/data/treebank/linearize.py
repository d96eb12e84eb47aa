"""Trees as token sequences, after Vinyals et al. 2015 ("Grammar as a Foreign Language").

Section 6.3 of the paper casts English constituency parsing as sequence-to-sequence
translation: the source is the sentence's words, the target is the linearized tree.  Opening
brackets carry the label (``(S``), closing brackets carry it too (``)S``), and every
preterminal is replaced by ``XX``, so POS tags are neither predicted nor scored::

    (S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .))  ->  (S (NP XX XX )NP (VP XX )VP XX )S

:func:`delinearize` turns a model output back into a tree over the source words, repairing
whatever is malformed so that every prediction can be scored by EVALB.
"""

from __future__ import annotations

from .tree import Tree

__all__ = [
    "XX", "LANGUAGES", "linearize", "spell", "readable", "delinearize", "delinearize_with_report",
    "strip_tags",
]  # fmt: skip

XX = "XX"  # the placeholder for every preterminal, as in Vinyals et al. 2015
DEFAULT_ROOT = "S"  # the most frequent WSJ root label; used only when the output gives no single root

# The target languages of the parsing task (data.tgt_lang): how a tree is written as tokens.
#   tree        section 6.3, after Vinyals et al. 2015: (S (NP XX XX )NP (VP XX )VP XX )S  (the default)
#   tree_sym    the same tokens, each bracket and XX written as one symbol (below), so that a subword
#               vocabulary keeps it one piece: sentencepiece splits "(NP" into "(" and "NP" at the script
#               boundary, whatever the vocabulary size
#   tree_words  the words themselves as the leaves instead of XX, brackets as in tree_sym: the decoder
#               copies the source in order (attention aligns it) instead of counting XX against it
LANGUAGES = ("tree", "tree_sym", "tree_words")

# The phrase labels of the Penn Treebank (Bies et al. 1995, "Bracketing Guidelines", 1.2), a fixed list so
# that a symbol means the same on any treebank. A label outside it (an annotation error such as ADVP|PRT)
# keeps its written form, which the reader takes too.
PTB_LABELS = (
    "ADJP", "ADVP", "CONJP", "FRAG", "INTJ", "LST", "NAC", "NP", "NX", "PP", "PRN", "PRT", "QP", "RRC",
    "S", "SBAR", "SBARQ", "SINV", "SQ", "UCP", "VP", "WHADJP", "WHADVP", "WHNP", "WHPP", "X",
)  # fmt: skip
# One character of Unicode's Private Use Area (U+E000..) each: no text holds them, and sentencepiece keeps
# every character of its training text (character_coverage 1.0).
_TOKENS = [XX] + [b + label for label in PTB_LABELS for b in "()"]
SYMBOL = {tok: chr(0xE000 + i) for i, tok in enumerate(_TOKENS)}
_TOKEN = {c: tok for tok, c in SYMBOL.items()}


def linearize(tree: Tree, language: str = "tree") -> str:
    """The target sequence for ``tree`` in ``language`` (one of LANGUAGES); for ``tree`` (section 6.3):
    ``(S (NP XX XX )NP (VP XX )VP XX )S``."""
    if language not in LANGUAGES:
        raise ValueError(f"unknown tree language {language!r} (one of {', '.join(LANGUAGES)})")
    out: list[str] = []
    stack: list[Tree | str] = [tree]  # a str on the stack is a closing token waiting to be emitted
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.append(spell(item, language))
        elif item.is_preterminal:
            out.append(item.word or "" if language == "tree_words" else spell(XX, language))
        else:
            out.append(spell("(" + item.label, language))
            stack.append(")" + item.label)
            stack.extend(reversed(item.children))
    return " ".join(out)


def spell(token: str, language: str) -> str:
    """How ``language`` writes the token ``(NP``, ``)NP`` or ``XX``: as it is (``tree``), or as its symbol."""
    return token if language == "tree" else SYMBOL.get(token, token)


def readable(target: str) -> str:
    """A target of any language with its symbols written out (``(NP``, ``XX``), a space around each: what
    the reader and a person read. Text without symbols comes back as it is."""
    if not any(c in _TOKEN for c in target):
        return target
    return "".join(f" {_TOKEN[c]} " if c in _TOKEN else c for c in target)


def strip_tags(tree: Tree, tag: str = XX) -> Tree:
    """A copy of ``tree`` with every POS tag replaced by ``tag`` (what a round trip gives back)."""
    if tree.is_preterminal:
        return Tree.leaf(tag, tree.word or "")
    return Tree(tree.label, [strip_tags(c, tag) for c in tree.children])


class _Node:
    """A constituent under construction (mutable; turned into a Tree at the end)."""

    __slots__ = ("label", "kids")

    def __init__(self, label: str) -> None:
        self.label = label
        self.kids: list[_Node | Tree] = []


def _build(node: _Node, notes: list[str]) -> Tree | None:
    """Freeze a constituent, dropping constituents without any word (returns None if empty).

    Iterative post-order walk, since a garbage output can nest a few hundred brackets deep.
    """
    done: dict[int, Tree | None] = {}
    stack: list[tuple[_Node, bool]] = [(node, False)]
    while stack:
        cur, expanded = stack.pop()
        if not expanded:
            stack.append((cur, True))
            stack.extend((k, False) for k in cur.kids if isinstance(k, _Node))
            continue
        kids: list[Tree] = []
        for k in cur.kids:
            sub = k if isinstance(k, Tree) else done.pop(id(k))
            if sub is not None:
                kids.append(sub)
        done[id(cur)] = Tree(cur.label, kids) if kids else None
        if not kids and cur is not node:
            notes.append(f"empty ({cur.label} removed")
    return done[id(node)]


def delinearize_with_report(
    target: str, words: list[str], default_root: str = DEFAULT_ROOT
) -> tuple[Tree, list[str]]:
    """:func:`delinearize`, also returning one note per repair made (empty list if none)."""
    notes: list[str] = []
    top = _Node("")  # virtual root: it collects whatever is outside every constituent
    stack = [top]
    n_used = 0
    tokens = readable(target).split()
    # tree_words: every token that is not a bracket is a leaf; its text is not trusted, its position is
    leaf = (lambda tok: tok == XX) if XX in tokens else (lambda tok: not tok.startswith(("(", ")")))
    for tok in tokens:
        if leaf(tok):
            if n_used < len(words):
                stack[-1].kids.append(Tree.leaf(XX, words[n_used]))
                n_used += 1
            else:
                notes.append("extra XX dropped")
        elif tok.startswith("(") and len(tok) > 1:
            node = _Node(tok[1:])
            stack[-1].kids.append(node)
            stack.append(node)
        elif tok.startswith(")"):
            if len(stack) == 1:
                notes.append(f"unmatched {tok} ignored")
                continue
            if tok[1:] and tok[1:] != stack[-1].label:
                notes.append(f"{tok} closed ({stack[-1].label}")
            stack.pop()
        else:
            notes.append(f"token {tok!r} ignored")
    if len(stack) > 1:
        notes.append(f"{len(stack) - 1} unclosed bracket(s) closed at the end")
    if n_used < len(words):
        notes.append(f"{len(words) - n_used} missing word(s) attached to the root")
        top.kids.extend(Tree.leaf(XX, w) for w in words[n_used:])
    tree = _pick_root(top, default_root, notes)
    return tree, notes


def _pick_root(top: _Node, default_root: str, notes: list[str]) -> Tree:
    """Apply the root rule to the virtual root's children (see :func:`delinearize`)."""
    built = _build(top, notes)
    items = built.children if built is not None else []
    constituents = [k for k in items if not k.is_preterminal]
    if len(constituents) == 1 and len(items) == 1:
        return constituents[0]
    if len(constituents) == 1:
        # Stray words before/after the single root constituent become its first/last children.
        root = constituents[0]
        k = items.index(root)
        notes.append("words outside the root attached to it")
        return Tree(root.label, items[:k] + root.children + items[k + 1 :])
    if items:
        notes.append(f"no single root: wrapped in ({default_root}")
    return Tree(default_root, items)


def delinearize(target: str, words: list[str], default_root: str = DEFAULT_ROOT) -> Tree:
    """Rebuild a tree over ``words`` from a (possibly malformed) linearized model output.

    The result is always a well-formed tree whose leaves are exactly ``words``, in order, each
    under a preterminal tagged ``XX``.  For a well-formed target with one ``XX`` per word the
    tree is rebuilt exactly: ``delinearize(linearize(t), words(t)) == strip_tags(t)`` for any
    cleaned tree ``t`` (see :func:`ablate.data.treebank.tree.clean`).  Repair rules, applied in a
    single left-to-right pass over the whitespace-separated tokens:

    1. ``(LABEL`` opens a constituent; ``XX`` takes the next unused word (in a ``tree_words``
       output, one without any ``XX``, every token that is not a bracket does).
    2. ``)LABEL`` or ``)`` closes the innermost open constituent, even when the label differs
       (a mismatched close label is trusted for position, not for label).
    3. A close with no open constituent left is ignored.
    4. Constituents still open at the end are closed there.
    5. ``XX`` beyond the number of words is dropped.
    6. Words never consumed (too few ``XX``) are attached, in order, as last children of the root.
    7. Constituents with no word under them (``(NP )NP``, or emptied by rule 5) are removed.
    8. Any other token (``(`` alone, a POS tag, ``<unk>``, ``</s>``...) is ignored.
    9. Root: if everything lies in one top-level constituent, it is the root; if there is
       exactly one top-level constituent plus stray words outside it, the words become its
       first/last children; otherwise (no constituent, or several) the top-level items are
       wrapped in a new root labelled ``default_root`` (``S``).

    Symbols (``tree_sym``, ``tree_words``) are read as the tokens they stand for (:func:`readable`).

    :func:`delinearize_with_report` also returns a note for each repair.
    """
    return delinearize_with_report(target, words, default_root)[0]
