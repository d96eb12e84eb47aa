"""Constituency trees and the Penn Treebank bracketed (``.mrg``) format.

Used by the English constituency-parsing experiment of section 6.3 of the paper (Table 4),
which trains on the WSJ part of the Penn Treebank.  Plain Python, no third-party imports.

A :class:`Tree` is either a *preterminal* ``(POS word)`` (``word`` is set, no children) or a
*constituent* ``(LABEL child child ...)`` whose children are trees.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "Tree",
    "parse_bracketed",
    "read_mrg",
    "clean",
    "strip_label",
    "to_string",
    "words",
    "tags",
    "preterminals",
]

# Labels that look like function-tagged labels but are atomic PTB symbols (brackets, empty element).
_ATOMIC_LABELS = frozenset({"-NONE-", "-LRB-", "-RRB-", "-LCB-", "-RCB-", "-LSB-", "-RSB-"})
_NONE = "-NONE-"
# Root labels that `clean` drops when they only wrap one constituent (PTB's unlabeled outer
# bracket, and the TOP / ROOT wrappers written by common parsers).
_ROOT_LABELS = frozenset({"", "TOP", "ROOT"})
_TOKEN_RE = re.compile(r"\(|\)|[^\s()]+")


@dataclass
class Tree:
    """A constituency tree node.

    ``word`` is set only for preterminals ``(POS word)``; constituents have ``word=None`` and a
    list of children.  Equality is structural (label, word, children).
    """

    label: str
    children: list[Tree] = field(default_factory=list)
    word: str | None = None

    @property
    def is_preterminal(self) -> bool:
        return self.word is not None

    @classmethod
    def leaf(cls, pos: str, word: str) -> Tree:
        """A preterminal ``(pos word)``."""
        return cls(pos, [], word)

    def __str__(self) -> str:
        return to_string(self)


class _Open:
    """A bracket being read: label, children so far, and where it started (for error messages)."""

    __slots__ = ("label", "items", "line")

    def __init__(self, label: str, line: int) -> None:
        self.label = label
        self.items: list[Tree | str] = []
        self.line = line


def _blank_headers(text: str) -> str:
    # Some PTB distributions start files with "*x*" copyright lines; blank them but keep the
    # newlines so that line numbers in error messages stay right.
    if "*x*" not in text:
        return text
    return "\n".join("" if ln.startswith("*x*") else ln for ln in text.split("\n"))


def _finish(node: _Open, where: str) -> Tree:
    """Turn a closed bracket into a Tree, checking the PTB shape rules."""
    items = node.items
    if not items:
        raise ValueError(f"{where}: empty bracket '({node.label} )'")
    strings = [x for x in items if isinstance(x, str)]
    if strings:
        if len(items) != 1:
            raise ValueError(f"{where}: bracket '({node.label}' mixes words and subtrees")
        if not node.label:
            raise ValueError(f"{where}: word '{strings[0]}' has no POS label")
        return Tree.leaf(node.label, strings[0])
    return Tree(node.label, [x for x in items if isinstance(x, Tree)])


def parse_bracketed(text: str, source: str = "<string>", first_line: int = 1) -> list[Tree]:
    """Read every tree in Penn Treebank bracketed text.

    Accepts any whitespace and newlines, several trees per text, the unlabeled outer bracket
    ``( (S ...) )`` (kept as a root with label ``""``; see :func:`clean`), and arbitrary word
    and label tokens (``-LRB-``, ``*T*-1``, ``U.S.``, ``&``...): a token is any run of
    characters other than whitespace and parentheses.  The trees are returned raw (traces,
    function tags and indices kept).

    Raises ``ValueError`` with a one-line message ``"<source>:<line>: <problem>"`` on
    unbalanced brackets, empty brackets, words outside brackets, or a bracket mixing a word
    with subtrees; ``first_line`` is the number of the text's first line in ``source``.
    """
    text = _blank_headers(text)
    trees: list[Tree] = []
    stack: list[_Open] = []
    line, pos = first_line, 0
    tokens = list(_TOKEN_RE.finditer(text))
    i = 0
    while i < len(tokens):
        match = tokens[i]
        line += text.count("\n", pos, match.start())
        pos = match.start()
        tok = match.group()
        where = f"{source}:{line}"
        if tok == "(":
            label = ""
            nxt = tokens[i + 1] if i + 1 < len(tokens) else None
            if nxt is not None and nxt.group() not in "()":
                # The label must be on the same line as "(" only by convention; allow any space.
                label = nxt.group()
                line += text.count("\n", pos, nxt.start())
                pos = nxt.start()
                i += 1
            stack.append(_Open(label, line))
        elif tok == ")":
            if not stack:
                raise ValueError(f"{where}: unmatched ')'")
            node = _finish(stack.pop(), where)
            if stack:
                stack[-1].items.append(node)
            else:
                trees.append(node)
        else:
            if not stack:
                raise ValueError(f"{where}: token '{tok}' outside any bracket")
            stack[-1].items.append(tok)
        i += 1
    if stack:
        raise ValueError(f"{source}:{stack[0].line}: bracket opened here is never closed")
    return trees


def read_mrg(path: str | Path) -> list[Tree]:
    """Read all (raw) trees of one ``.mrg`` file; ``ValueError`` names file and line if malformed."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        # Some LDC releases are Latin-1; every byte decodes, and words stay one-to-one.
        text = path.read_text(encoding="latin-1")
    return parse_bracketed(text, source=str(path))


def strip_label(label: str) -> str:
    """Drop function tags and co-indices: ``NP-SBJ-1`` -> ``NP``, ``PP-LOC=2`` -> ``PP``.

    Atomic symbols such as ``-NONE-``, ``-LRB-`` and ``-RRB-`` are kept as they are.  (EVALB's
    own ``modify_label`` also cuts at the first ``-`` or ``=``; it is only applied to
    constituent labels, where these atomic symbols never occur.)
    """
    if label in _ATOMIC_LABELS:
        return label
    cut = len(label)
    for sep in "-=":
        k = label.find(sep, 1)  # from 1: a leading '-' is part of the symbol, not a tag
        if k != -1:
            cut = min(cut, k)
    return label[:cut]


def _clean_node(node: Tree) -> Tree | None:
    """Clean one subtree; None if nothing but empty elements is left under it."""
    if node.is_preterminal:
        if node.label == _NONE:
            return None
        return Tree.leaf(strip_label(node.label), node.word or "")
    kids = [c for c in (_clean_node(k) for k in node.children) if c is not None]
    if not kids:
        return None  # a constituent that only held traces, e.g. (NP-SBJ (-NONE- *T*-1))
    return Tree(strip_label(node.label), kids)


def clean(tree: Tree) -> Tree:
    """Return the tree as parsers are trained and scored on it (section 6.3, standard practice).

    * ``-NONE-`` empty elements (traces ``*T*-1``, ``*``, ``0``, ``*U*`` ...) are removed, and so
      are constituents left without any word;
    * function tags and indices are stripped (``NP-SBJ-1`` -> ``NP``, ``PP-LOC=2`` -> ``PP``)
      while ``-LRB-``/``-RRB-`` and the like are kept;
    * the outer root (PTB's unlabeled bracket, or ``TOP``/``ROOT``) is dropped when it wraps a
      single constituent; if it wraps several children (or a bare word) it is kept and labeled
      ``TOP``, which EVALB (COLLINS.prm ``DELETE_LABEL TOP``) never scores.

    Raises ``ValueError`` if the tree has no word at all once empty elements are removed.
    """
    out = _clean_node(tree)
    if out is None:
        raise ValueError(f"tree has no words once -NONE- elements are removed: {to_string(tree)[:80]}")
    if out.label in _ROOT_LABELS and not out.is_preterminal:
        only_child = out.children[0] if len(out.children) == 1 else None
        if only_child is not None and not only_child.is_preterminal:
            return only_child
        out.label = "TOP"
    return out


def preterminals(tree: Tree) -> Iterator[Tree]:
    """The preterminals ``(POS word)`` from left to right (iterative: deep trees are fine)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if node.is_preterminal:
            yield node
        else:
            stack.extend(reversed(node.children))


def words(tree: Tree) -> list[str]:
    """The words (leaves) from left to right, including any ``-NONE-`` element still present."""
    return [p.word or "" for p in preterminals(tree)]


def tags(tree: Tree) -> list[str]:
    """The POS tags (preterminal labels) from left to right."""
    return [p.label for p in preterminals(tree)]


def to_string(tree: Tree) -> str:
    """One-line bracketed form, e.g. ``(S (NP (DT the) (NN cat)) (VP (VBD sat)))``.

    An empty root label gives PTB's ``( (S ...))``.  Iterative, so very deep trees are fine.
    """
    parts: list[str] = []
    # Work items: a Tree to open, or a str to emit verbatim (the closing brackets).
    stack: list[Tree | str] = [tree]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            parts.append(item)
            continue
        if parts and not parts[-1].endswith(("(", " ")):
            parts.append(" ")
        if item.is_preterminal:
            parts.append(f"({item.label} {item.word})")
            continue
        parts.append(f"({item.label}" if item.label else "( ")
        stack.append(")")
        stack.extend(reversed(item.children))
    return "".join(parts)
