"""The parser's target languages (data.tgt_lang) on the real WSJ trees of the Penn Treebank sample: every
language gives every tree back, and the symbol languages keep each label one piece of the vocabulary."""

import collections

import pytest

from ablate.data.tokenizer import load_or_train
from ablate.parsing.linearize import (
    LANGUAGES,
    PTB_LABELS,
    SYMBOL,
    delinearize,
    linearize,
    readable,
    strip_tags,
)
from ablate.parsing.tree import parse_bracketed, words
from ablate.parsing.wsj import load_split, parallel_text


@pytest.fixture(scope="module")
def sample(request):
    root = request.getfixturevalue("ptb_sample_dir")
    return {split: load_split(root, split) for split in ("train", "dev", "test")}


@pytest.mark.parametrize("language", LANGUAGES)
def test_every_language_gives_every_tree_back(sample, language):
    trees = [t for split in sample.values() for t in split]
    assert len(trees) > 3800
    bad = [t for t in trees if delinearize(linearize(t, language), words(t)) != strip_tags(t)]
    assert not bad


def test_the_languages_written_out():
    t = parse_bracketed("(S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .))")[0]
    assert linearize(t) == "(S (NP XX XX )NP (VP XX )VP XX )S"
    assert readable(linearize(t, "tree_sym")).split() == linearize(t).split()
    assert readable(linearize(t, "tree_words")).split() == "(S (NP The cat )NP (VP sat )VP . )S".split()
    assert all(len(tok) == 1 for tok in linearize(t, "tree_sym").split())
    with pytest.raises(ValueError, match="unknown tree language 'trees'"):
        linearize(t, "trees")


def test_a_words_output_is_read_by_position_and_symbols_glued_to_words_are_split():
    # the model copies the words; its text is not trusted (a misspelt copy still takes its place)
    s = SYMBOL
    out = f"{s['(S']}{s['(NP']}The kat {s[')NP']} {s['(VP']} sat{s[')VP']} . {s[')S']}"
    assert str(delinearize(out, "The cat sat .".split())) == str(
        parse_bracketed("(S (NP (XX The) (XX cat)) (VP (XX sat)) (XX .))")[0]
    )


def test_every_label_seen_twice_is_one_piece_of_the_recipes_vocabulary(sample, tmp_path):
    """The 4,000-piece BPE vocabulary of recipe=cpu_wsj, learned by ablate.data.tokenizer on the sample's
    tree_sym training text: every bracket of a label seen at least twice is one piece. Written out
    (language tree), none is: sentencepiece splits "(NP" into "(" and "NP"."""
    counts = collections.Counter(tok for line in parallel_text(sample["train"])[1] for tok in line.split())
    seen = [tok for tok in SYMBOL if counts[tok] >= 2]
    assert len(seen) >= 2 * 20 and all(tok[1:] in PTB_LABELS for tok in seen if tok != "XX")

    def vocabulary(language):
        src, tgt = parallel_text(sample["train"], language)
        return load_or_train(str(tmp_path), language, lambda: src + tgt, 4000)

    sp = vocabulary("tree_sym")
    assert [tok for tok in seen if len(sp.encode(SYMBOL[tok])) != 1] == []
    sp = vocabulary("tree")
    assert [tok for tok in seen if tok != "XX" and len(sp.encode(tok)) == 1] == []
