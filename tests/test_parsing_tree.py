"""Penn Treebank reading and cleaning (ablate.data.treebank.tree), on hand-written .mrg fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

from ablate.data.treebank.tree import (
    Tree,
    clean,
    parse_bracketed,
    read_mrg,
    strip_label,
    tags,
    to_string,
    words,
)

FIXTURES = Path(__file__).parent / "fixtures" / "ptb"
WSJ = FIXTURES / "wsj"

# The cleaned form of the three trees of wsj/02, worked out by hand from the raw files:
# (NP-SBJ (-NONE- *-1)) and (SBAR (-NONE- 0) ...) lose their empty elements, the emptied NP-SBJ
# disappears, WHNP-2 / NP-EXT / PP-LOC=2 lose tag and index, -LRB-/-RRB- survive.
CLEAN_0201 = [
    "(S (NP (NP (NNP Ms.) (NNP Haag)) (, ,) (NP (NP (DT the) (NN director)) (PP (IN of) (NP (NNP AT&T) "
    "(NNP Corp.)))) (, ,)) (VP (VBD declined) (S (VP (TO to) (VP (VB comment))))) (. .))",
    "(S (NP (DT The) (NN company)) (VP (VBD said) (SBAR (S (NP (PRP it)) (VP (MD will) (VP (VB sell) "
    "(NP (NP (DT the) (NN unit)) (PRN (-LRB- -LRB-) (NP (NNP U.S.) (NN arm)) (-RRB- -RRB-))) "
    "(PP (IN in) (NP (NNP Tokyo)))))))) (. .))",
]
CLEAN_0202 = (
    "(S (NP (NP (DT the) (NNS shares)) (SBAR (WHNP (WDT which)) (S (VP (VBD rose) (NP (CD 5\\/8) "
    "(NN %)))))) (VP (VBD were) (VP (VBN sold) (PRT (RP off)))) (. .))"
)


def test_reads_several_trees_per_file_with_outer_bracket():
    raw = read_mrg(WSJ / "02" / "wsj_0201.mrg")
    assert len(raw) == 2
    assert [t.label for t in raw] == ["", ""]  # PTB's unlabeled outer bracket
    assert [t.children[0].label for t in raw] == ["S", "S"]
    assert raw[0].children[0].children[0].label == "NP-SBJ-1"  # raw: function tags kept


def test_raw_words_keep_empty_elements_and_special_tokens():
    raw = read_mrg(WSJ / "02" / "wsj_0202.mrg")[0]
    assert " ".join(words(raw)) == "the shares which *T*-2 rose 5\\/8 % were sold *-3 off ."
    assert tags(raw)[3] == "-NONE-"


@pytest.mark.parametrize(
    "path, expected", [("02/wsj_0201.mrg", CLEAN_0201), ("02/wsj_0202.mrg", [CLEAN_0202])]
)
def test_clean_matches_hand_cleaned_trees(path, expected):
    assert [to_string(clean(t)) for t in read_mrg(WSJ / path)] == expected


def test_clean_words_and_tags():
    tree = clean(read_mrg(WSJ / "02" / "wsj_0202.mrg")[0])
    assert words(tree) == ["the", "shares", "which", "rose", "5\\/8", "%", "were", "sold", "off", "."]
    assert tags(tree) == ["DT", "NNS", "WDT", "VBD", "CD", "NN", "VBD", "VBN", "RP", "."]


@pytest.mark.parametrize(
    "label, stripped",
    [
        ("NP-SBJ-1", "NP"),
        ("PP-LOC=2", "PP"),
        ("NP=3", "NP"),
        ("S-TPC-1", "S"),
        ("WHNP-2", "WHNP"),
        ("ADVP-TMP-CLR", "ADVP"),
        ("-NONE-", "-NONE-"),
        ("-LRB-", "-LRB-"),
        ("-RRB-", "-RRB-"),
        ("PRP$", "PRP$"),
        ("S", "S"),
    ],
)
def test_strip_label(label, stripped):
    assert strip_label(label) == stripped


def test_clean_root_handling():
    # TOP / ROOT / unlabeled wrappers around one constituent are dropped ...
    for text in ["(TOP (S (NN a)))", "(ROOT (S (NN a)))", "( (S (NN a)))", "(S (NN a))"]:
        assert to_string(clean(parse_bracketed(text)[0])) == "(S (NN a))"
    # ... but a wrapper over several children (or a bare word) is kept, labeled TOP.
    assert to_string(clean(parse_bracketed("( (NP (NN a)) (. .))")[0])) == "(TOP (NP (NN a)) (. .))"
    assert to_string(clean(parse_bracketed("( (NN a))")[0])) == "(TOP (NN a))"


def test_clean_removes_nested_empty_constituents():
    raw = parse_bracketed("(S (NP-SBJ (NP (-NONE- *)) (SBAR (-NONE- 0) (S (-NONE- *T*-1)))) (VP (VB go)))")[0]
    assert to_string(clean(raw)) == "(S (VP (VB go)))"
    with pytest.raises(ValueError, match="no words"):
        clean(parse_bracketed("( (S (-NONE- *)))")[0])


def test_to_string_round_trips_raw_trees():
    for path in sorted(WSJ.glob("*/*.mrg")):
        for tree in read_mrg(path):
            assert parse_bracketed(to_string(tree)) == [tree]
    assert to_string(Tree("", [Tree("S", [Tree.leaf("NN", "a")])])) == "( (S (NN a)))"


def test_whitespace_is_free():
    text = "(S\n\t(NP   (DT  the)\n(NN cat) )(VP (VBD sat)))(S (NN x))"
    trees = parse_bracketed(text)
    assert [to_string(t) for t in trees] == ["(S (NP (DT the) (NN cat)) (VP (VBD sat)))", "(S (NN x))"]


@pytest.mark.parametrize(
    "text, line, problem",
    [
        ("(S (NN a))\n(S (NN b))\n)", 3, "unmatched ')'"),
        ("(S (NN a))\n\n(S\n (NN b)", 3, "never closed"),
        ("(S (NN a))\nstray (S (NN b))", 2, "outside any bracket"),
        ("(S\n(NP ))", 2, "empty bracket"),
        ("(S (NN a b))", 1, "mixes words"),
        ("(S (NN a) word)", 1, "mixes words"),
    ],
)
def test_malformed_text_names_source_and_line(text, line, problem):
    with pytest.raises(ValueError) as err:
        parse_bracketed(text, source="f.mrg")
    message = str(err.value)
    assert message.startswith(f"f.mrg:{line}: ") and problem in message
    assert "\n" not in message


def test_read_mrg_error_names_file_and_line():
    path = FIXTURES / "malformed.mrg"
    with pytest.raises(ValueError, match=r"malformed\.mrg:3: bracket opened here is never closed"):
        read_mrg(path)


def test_header_lines_are_skipped_and_latin1_read(tmp_path):
    path = tmp_path / "x.mrg"
    path.write_bytes(b"*x* header line\n( (S (NNP Jos\xe9) ) )\n")
    [tree] = read_mrg(path)
    assert words(tree) == ["José"]
