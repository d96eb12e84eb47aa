"""Vinyals et al. 2015 linearization and the repairing delinearizer (section 6.3)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from ablate.data.treebank.builtin import generate_trees
from ablate.data.treebank.linearize import delinearize, delinearize_with_report, linearize, strip_tags
from ablate.data.treebank.tree import Tree, clean, parse_bracketed, preterminals, to_string, words
from ablate.data.treebank.wsj import load_wsj, parallel_text

WSJ = Path(__file__).parent / "fixtures" / "ptb" / "wsj"


def _tree(text: str) -> Tree:
    return parse_bracketed(text)[0]


def test_linearize_example():
    tree = _tree("(S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .))")
    assert linearize(tree) == "(S (NP XX XX )NP (VP XX )VP XX )S"


def test_round_trip_on_fixtures_and_builtin():
    trees = load_wsj(WSJ, ["02", "22", "23"]) + [clean(t) for t in generate_trees(300, seed=5)]
    assert len(trees) == 306
    for tree in trees:
        rebuilt, notes = delinearize_with_report(linearize(tree), words(tree))
        assert rebuilt == strip_tags(tree)
        assert notes == []


def test_parallel_text():
    trees = load_wsj(WSJ, ["22"])
    assert parallel_text(trees) == (["It rained ."], ["(S (NP XX )NP (VP XX )VP XX )S"])


def _repair(target: str, sentence: str) -> str:
    return to_string(delinearize(target, sentence.split()))


@pytest.mark.parametrize(
    "target, sentence, expected",
    [
        # unclosed brackets are closed at the end
        ("(S (NP XX XX )NP (VP XX", "a b c", "(S (NP (XX a) (XX b)) (VP (XX c)))"),
        # unmatched closes ignored; the stray XX after the root closed joins the root
        ("(S (NP XX )NP )S )S XX", "a b", "(S (NP (XX a)) (XX b))"),
        # a mismatched close label closes the innermost constituent (VP, then NP)
        ("(S (NP XX (VP XX )NP XX )S", "a b c", "(S (NP (XX a) (VP (XX b)) (XX c)))"),
        # too many XX: extras dropped, the VP left empty is removed
        ("(S (NP XX XX XX )NP (VP XX )VP )S", "a b", "(S (NP (XX a) (XX b)))"),
        # too few XX: the missing words are attached to the root, in order
        ("(S (NP XX )NP )S", "a b c", "(S (NP (XX a)) (XX b) (XX c))"),
        # garbage tokens ignored (including a bare '(' and a POS tag)
        ("<unk> (S NN XX ( XX )S </s>", "a b", "(S (XX a) (XX b))"),
        # nothing usable: a default S root over the words
        ("", "a b", "(S (XX a) (XX b))"),
        ("garbage", "a", "(S (XX a))"),
        # several top-level constituents are wrapped in a default S root
        ("(NP XX )NP (VP XX )VP", "a b", "(S (NP (XX a)) (VP (XX b)))"),
        # empty constituents are removed, nested ones too
        ("(S (NP )NP (VP XX )VP (ADJP (QP )QP )ADJP )S", "a", "(S (VP (XX a)))"),
        # a word before the root becomes its first child
        ("XX (S XX )S", "a b", "(S (XX a) (XX b))"),
    ],
)
def test_repairs(target, sentence, expected):
    assert _repair(target, sentence) == expected
    _, notes = delinearize_with_report(target, sentence.split())
    assert notes  # every case above needed at least one repair


def test_unlabeled_close_is_accepted_as_is():
    tree, notes = delinearize_with_report("(S (NP XX ) XX )", ["a", "b"])
    assert to_string(tree) == "(S (NP (XX a)) (XX b))" and notes == []


def test_no_words():
    tree = delinearize("(S XX )S", [])
    assert tree.label == "S" and list(preterminals(tree)) == []


def _well_formed(tree: Tree) -> bool:
    if tree.is_preterminal:
        return tree.children == [] and tree.label == "XX"
    return bool(tree.children) and all(_well_formed(c) for c in tree.children)


def test_random_outputs_always_give_a_tree_over_the_words():
    rng = random.Random(0)
    vocab = ["(S", ")S", "(NP", ")NP", "(VP", ")VP", "(PP", ")", "XX", "XX", "XX", "<unk>", "("]
    for _ in range(500):
        sentence = [f"w{i}" for i in range(rng.randint(0, 12))]
        target = " ".join(rng.choice(vocab) for _ in range(rng.randint(0, 40)))
        tree = delinearize(target, sentence)
        assert words(tree) == sentence
        assert not tree.is_preterminal
        assert all(_well_formed(c) for c in tree.children)
        if sentence:
            assert parse_bracketed(to_string(tree)) == [tree]


def test_deep_nesting_does_not_recurse():
    depth = 5000  # far beyond Python's recursion limit
    target = " ".join(["(NP"] * depth + ["XX"] + [")NP"] * depth)
    tree = delinearize(target, ["a"])
    assert words(tree) == ["a"]
    assert to_string(tree).count("(NP") == depth
