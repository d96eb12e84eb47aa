"""A small built-in WSJ-like treebank, for running the section 6.3 parsing pipeline without the PTB.

The Penn Treebank is licensed (LDC99T42) and cannot be shipped, so this module generates a
deterministic English-like treebank from a hand-written PCFG (a few dozen rules, a few hundred
words) and writes it in real ``.mrg`` format, laid out like the WSJ release
(``<dir>/02/wsj_0200.mrg`` ... ``<dir>/23/wsj_23NN.mrg``), so that exactly the same reading
and cleaning path (:mod:`ablate.data.treebank.wsj`) is used as for the real data.  The raw trees
carry what ``clean`` must remove: function tags (``NP-SBJ``, ``PP-LOC``), co-indexed WH
traces (``WHNP-1`` ... ``(-NONE- *T*-1)``), PRO subjects ``(-NONE- *)``, null complementizers
``(-NONE- 0)``, plus punctuation (scored or deleted by EVALB) and ``-LRB-``/``-RRB-``.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import tempfile
from pathlib import Path

from .tree import Tree, preterminals

__all__ = ["generate_trees", "write_builtin_treebank", "format_mrg", "BUILTIN_VERSION"]

BUILTIN_VERSION = 1  # bump when the grammar changes, so that stale folders are regenerated
_STAMP = "BUILTIN.json"
_TRAIN_SECTIONS = [f"{i:02d}" for i in range(2, 22)]  # same split as ablate.data.treebank.wsj

# ---------------------------------------------------------------------------------------------
# Lexicon: POS tag -> words.  Words with special characters on purpose (U.S., AT&T, 10.5, $).
_LEXICON: dict[str, list[str]] = {
    "DT": "the a an this that these those some every no each another".split(),
    "NN": (
        "company market stock price share year month week investor analyst bank fund rate "
        "index bond dollar yen economy industry plan report quarter profit loss sale deal "
        "board chairman president officer unit firm government agency court law issue trade "
        "oil gas car computer program system product business interest debt offer bid group "
        "manager spokesman executive director lawyer trader client customer contract budget "
        "tax cost revenue growth decline increase drop gain period yesterday today"
    ).split(),
    "NNS": (
        "companies markets stocks prices shares years investors analysts banks funds rates "
        "bonds dollars earnings profits losses sales deals officers units firms issues cars "
        "computers programs products businesses securities traders clients customers "
        "contracts taxes costs revenues months weeks points"
    ).split(),
    "NNP": (
        "Mr. Mrs. Ms. Smith Jones Brown Johnson Chicago London Tokyo Japan Congress Treasury "
        "IBM AT&T U.S. Wall Street Friday Monday October Ford General Motors Sony Bush "
        "Washington California"
    ).split(),
    "JJ": (
        "new big small large major other last next first third recent strong weak high low "
        "big-time financial federal foreign economic public private early late good bad "
        "annual quarterly long short old young similar certain free heavy light"
    ).split(),
    "VBD": (
        "said rose fell reported agreed bought sold expected announced acquired gave took "
        "made raised cut told received closed opened ended showed declined jumped added "
        "approved rejected filed paid"
    ).split(),
    "VB": "buy sell pay make take give raise cut reach see help keep hold offer expect".split(),
    "VBZ": "is seems remains looks appears becomes".split(),
    "MD": "will would could may might should can must".split(),
    "IN": "in on at with from for by about after before under over into near during of".split(),
    "IN_that": ["that"],
    "RB": "also still now only just very already recently sharply slightly quickly again".split(),
    "RP": "up down out off".split(),
    "CC": "and but or".split(),
    "PRP": "he she it they we I you".split(),
    "WDT": ["which", "that"],
    "WP": ["who"],
    "TO": ["to"],
    "CD": "two three four 10 20 100 1.5 10.5 1989 million billion".split(),
    "$": ["$"],
    ",": [","],
    ".": [".", ".", ".", "?"],  # repeated entries weight the choice
    ":": [";", "--"],
    "``": ["``"],
    "''": ["''"],
    "-LRB-": ["-LRB-"],
    "-RRB-": ["-RRB-"],
}
_POS_OF = {"IN_that": "IN"}  # lexicon entries that print under another tag

# ---------------------------------------------------------------------------------------------
# Grammar: category -> [(weight, right-hand side)].  The FIRST rule of each category never
# recurses; it is the only one used once the depth limit is reached, so generation stops.
# A right-hand side symbol is a lexicon tag, a category (optionally with a function tag,
# "NP-SBJ"), or one of the empty-element symbols below.
#   "*T*"   trace of the innermost WH phrase:       (NP (-NONE- *T*-k))
#   "*PRO*" understood subject:                      (NP-SBJ (-NONE- *))
#   "0"     null complementizer:                     (-NONE- 0)
#   "WHNP#" a WH phrase opening a new co-index k:    (WHNP-k (WDT which))
_RULES: dict[str, list[tuple[float, list[str]]]] = {
    "ROOT": [
        (0.45, ["NP-SBJ", "VP", "."]),
        (0.08, ["NP-SBJ", "ADVP", "VP", "."]),
        (0.05, ["NP-SBJ", "MD", "VP_B", "."]),
        (0.08, ["PP-TMP", ",", "NP-SBJ", "VP", "."]),
        (0.08, ["S", ",", "CC", "S", "."]),
        (0.06, ["``", "S-TPC", ",", "''", "NP-SBJ", "VP_SAY", "."]),
        (0.05, ["S", ":", "S", "."]),
        (0.05, ["ADVP", ",", "NP-SBJ", "VP", "."]),
        (0.05, ["NP-SBJ", "VP"]),  # no final punctuation, like headlines in the WSJ
        (0.05, ["SINV"]),
    ],
    "S": [
        (0.78, ["NP-SBJ", "VP"]),
        (0.12, ["NP-SBJ", "ADVP", "VP"]),
        (0.10, ["NP-SBJ", "MD", "VP_B"]),
    ],
    "SINV": [(1.0, ["S-TPC", ",", "VP_SAY", "NP-SBJ", "."])],
    "VP_SAY": [(1.0, ["VBD_say"])],
    "VP": [
        (0.25, ["VBD", "NP"]),
        (0.10, ["VBD", "NP", "PP-LOC"]),
        (0.08, ["VBD", "PP-DIR"]),
        (0.08, ["VBZ", "ADJP-PRD"]),
        (0.08, ["VBD", "PRT", "NP"]),
        (0.08, ["VBD", "SBAR"]),
        (0.07, ["VBD", "S_INF"]),
        (0.06, ["VBD", "NP", "ADVP-MNR"]),
        (0.06, ["VBD"]),
        (0.06, ["VBD", "NP", "PP-TMP"]),
        (0.04, ["VP", "CC", "VP"]),
        (0.04, ["VBD", "NP", "PP", "PP"]),
    ],
    "VP_B": [(0.6, ["VB", "NP"]), (0.2, ["VB", "PP"]), (0.2, ["VB", "PRT", "NP"])],
    "VP_TO": [(1.0, ["TO", "VP_B"])],
    "S_INF": [(1.0, ["*PRO*", "VP_TO"])],
    "NP": [
        (0.28, ["DT", "NN"]),
        (0.12, ["DT", "JJ", "NN"]),
        (0.08, ["NNP"]),
        (0.06, ["NNP", "NNP"]),
        (0.09, ["PRP"]),
        (0.07, ["DT", "NNS"]),
        (0.05, ["JJ", "NNS"]),
        (0.04, ["CD", "NNS"]),
        (0.03, ["$", "CD", "CD"]),
        (0.07, ["NP", "PP"]),
        (0.05, ["NP", "SBAR_REL"]),
        (0.02, ["NP", ",", "NP", ","]),
        (0.02, ["NP", "CC", "NP"]),
        (0.02, ["NP", "PRN"]),
    ],
    "PRN": [(1.0, ["-LRB-", "NP", "-RRB-"])],
    "PP": [(1.0, ["IN", "NP"])],
    "ADJP": [(0.6, ["JJ"]), (0.25, ["RB", "JJ"]), (0.15, ["JJ", "PP"])],
    "ADVP": [(0.8, ["RB"]), (0.2, ["RB", "RB"])],
    "PRT": [(1.0, ["RP"])],
    "SBAR": [(0.6, ["IN_that", "S"]), (0.4, ["0", "S"])],
    "SBAR_REL": [(0.6, ["WHNP#", "S_SUBJGAP"]), (0.4, ["WHNP#", "S_OBJGAP"])],
    "S_SUBJGAP": [(1.0, ["NP-SBJ_T", "VP"])],
    "S_OBJGAP": [(1.0, ["NP-SBJ", "VP_OBJGAP"])],
    "VP_OBJGAP": [(1.0, ["VBD", "NP_T"])],
    "WHNP": [(0.7, ["WDT"]), (0.3, ["WP"])],
}
# Categories that print under another label (helper categories of the grammar above).
_CATEGORY_LABEL = {
    "ROOT": "S",
    "VP_SAY": "VP",
    "VP_B": "VP",
    "VP_TO": "VP",
    "VP_OBJGAP": "VP",
    "S_INF": "S",
    "S_SUBJGAP": "S",
    "S_OBJGAP": "S",
    "SBAR_REL": "SBAR",
}
_MAX_DEPTH = 7


class _Gen:
    """One sentence's generation state (random stream and the WH co-index stack)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.next_index = 1
        self.wh: list[int] = []

    def word(self, tag: str) -> Tree:
        if tag == "VBD_say":
            return Tree.leaf("VBD", "said")
        return Tree.leaf(_POS_OF.get(tag, tag), self.rng.choice(_LEXICON[tag]))

    def empty(self, word: str) -> Tree:
        return Tree.leaf("-NONE-", word)

    def symbol(self, sym: str, depth: int) -> Tree:
        if sym == "*PRO*":
            return Tree("NP-SBJ", [self.empty("*")])
        if sym == "0":
            return self.empty("0")
        if sym in ("NP-SBJ_T", "NP_T"):
            label = "NP-SBJ" if sym == "NP-SBJ_T" else "NP"
            return Tree(label, [self.empty(f"*T*-{self.wh[-1]}")])
        if sym in _LEXICON or sym == "VBD_say":
            return self.word(sym)
        if sym == "WHNP#":
            k = self.next_index
            self.next_index += 1
            self.wh.append(k)
            node = self.expand("WHNP", depth)
            node.label = f"WHNP-{k}"
            return node
        base, _, ftag = sym.partition("-")
        node = self.expand(base, depth)
        if ftag:
            node.label = f"{node.label}-{ftag}"
        return node

    def expand(self, cat: str, depth: int) -> Tree:
        rules = _RULES[cat]
        if depth >= _MAX_DEPTH:
            rhs = rules[0][1]
        else:
            rhs = self.rng.choices([r for _, r in rules], weights=[w for w, _ in rules])[0]
        wh_before = len(self.wh)
        kids = [self.symbol(s, depth + 1) for s in rhs]
        if cat == "SBAR_REL":
            del self.wh[wh_before:]  # the WH phrase's index is only visible inside its clause
        return Tree(_CATEGORY_LABEL.get(cat, cat), kids)


def generate_trees(n: int, seed: int | str = 0, max_words: int = 60) -> list[Tree]:
    """``n`` raw PTB-style trees (outer unlabeled bracket included), deterministic in ``seed``.

    Sentences with more than ``max_words`` words are redrawn (the WSJ has few of them).
    """
    rng = random.Random(f"ablate-builtin-treebank:{seed}")  # str seeds hash stably (sha512)
    trees: list[Tree] = []
    while len(trees) < n:
        tree = _Gen(rng).expand("ROOT", 0)
        if len(tree.children) == 1:
            tree = tree.children[0]  # ROOT -> SINV: the inverted sentence is the root itself
        if sum(1 for _ in preterminals(tree)) <= max_words:
            trees.append(Tree("", [tree]))
    return trees


def format_mrg(tree: Tree, indent: int = 0) -> str:
    """Pretty-print a tree the way the ``.mrg`` files do (one constituent per line)."""
    if tree.is_preterminal:
        return f"({tree.label} {tree.word})"
    head = f"({tree.label} " if tree.label else "( "
    if all(c.is_preterminal for c in tree.children):
        return head + " ".join(format_mrg(c) for c in tree.children) + " )"
    pad = " " * (indent + 2)
    body = f"\n{pad}".join(format_mrg(c, indent + 2) for c in tree.children)
    return f"{head}{body} )"


def _sections(n_train: int, n_dev: int, n_test: int) -> list[tuple[str, int, str]]:
    """(section, number of trees, seed tag): train spread over 02-21, dev in 22, test in 23."""
    out = []
    for k, sec in enumerate(_TRAIN_SECTIONS):
        share = n_train // len(_TRAIN_SECTIONS) + (1 if k < n_train % len(_TRAIN_SECTIONS) else 0)
        out.append((sec, share, f"train-{sec}"))
    out += [("22", n_dev, "dev"), ("23", n_test, "test")]
    return out


def _write_section(root: Path, section: str, trees: list[Tree]) -> None:
    # At most 100 files per section (wsj_SS00 .. wsj_SS99), as in the WSJ release.
    per_file = max(50, math.ceil(len(trees) / 100))
    folder = root / section
    folder.mkdir(parents=True)
    for f, start in enumerate(range(0, len(trees), per_file)):
        chunk = trees[start : start + per_file]
        text = "\n".join(format_mrg(t) for t in chunk) + "\n"
        (folder / f"wsj_{section}{f:02d}.mrg").write_text(text, encoding="utf-8")


def _stamp(seed: int | str, n_train: int, n_dev: int, n_test: int) -> dict:
    return {"version": BUILTIN_VERSION, "seed": seed, "n_train": n_train, "n_dev": n_dev, "n_test": n_test}


def _read_stamp(folder: Path) -> dict | None:
    try:
        return json.loads((folder / _STAMP).read_text())
    except (OSError, ValueError):
        return None


def write_builtin_treebank(
    directory: str | Path, seed: int = 0, n_train: int = 4000, n_dev: int = 400, n_test: int = 400
) -> Path:
    """Write the built-in treebank under ``directory`` (WSJ layout); return its path.

    Idempotent: if ``directory`` already holds the treebank for the same parameters, nothing is
    written.  Atomic: the files are written to a temporary sibling folder that is renamed into
    place, so a crash or a concurrent writer never leaves a half-written treebank.  A folder
    written with other parameters is replaced; any other existing folder is left alone
    (``FileExistsError``), so a real PTB copy can never be overwritten by mistake.
    Every section has at least one file, even when its share of trees is zero.
    """
    target = Path(directory)
    want = _stamp(seed, n_train, n_dev, n_test)
    if target.exists():
        if _read_stamp(target) == want:
            return target
        if _read_stamp(target) is None:
            raise FileExistsError(f"{target} exists and is not a built-in treebank; not overwriting it")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        for section, n, tag in _sections(n_train, n_dev, n_test):
            _write_section(tmp, section, generate_trees(n, seed=f"{seed}:{tag}"))
            if n == 0:
                (tmp / section / f"wsj_{section}00.mrg").write_text("", encoding="utf-8")
        (tmp / _STAMP).write_text(json.dumps(want, sort_keys=True) + "\n")
        _swap_into_place(tmp, target, want)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _swap_into_place(tmp: Path, target: Path, want: dict) -> None:
    """Rename ``tmp`` to ``target``; an existing stale built-in treebank is moved aside first."""
    if target.exists():
        old = target.with_name(f".{target.name}.old-{os.getpid()}")
        os.rename(target, old)
        shutil.rmtree(old, ignore_errors=True)
    try:
        os.rename(tmp, target)
    except OSError:
        # Another process won the race; accept its result if it is the same treebank.
        if _read_stamp(target) != want:
            raise
