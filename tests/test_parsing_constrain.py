"""task_cfg.well_formed (ablate/tasks/parsing/constrain.py): the search writes only well-formed trees with one
leaf per source word. Checked both ways, in every target language: every gold tree is allowed piece by piece
(the constraint never rules out a right answer), and a search over arbitrary scores, greedy or beam, with room
to spare or with the output cap at the flat tree's length, writes only trees that the reader takes
without a single repair."""

import pytest
import torch

from ablate.data.tokenizer import BOS, EOS, load_or_train
from ablate.data.treebank.builtin import generate_trees
from ablate.data.treebank.linearize import LANGUAGES, delinearize_with_report, linearize
from ablate.data.treebank.tree import clean, words
from ablate.data.treebank.wsj import load_split
from ablate.nn.decode import CachedStepper, UncachedStepper, beam_search, greedy_search
from ablate.nn.model import Transformer, TransformerConfig
from ablate.tasks.parsing.constrain import PieceTable, TreeGrammar, TreeState, TreeStepper

TREES = [clean(t) for t in generate_trees(300, seed="constrain")]


@pytest.fixture(scope="module", params=LANGUAGES)
def vocab(request, tmp_path_factory):
    """A 300-piece vocabulary of the built-in trees in one language: words and `tree`'s written brackets
    take several pieces, so multi-piece tokens are exercised."""
    language = request.param
    src = [" ".join(words(t)) for t in TREES]
    tgt = [linearize(t, language) for t in TREES]
    sp = load_or_train(str(tmp_path_factory.mktemp("spm")), language, lambda: src + tgt, 300)
    return language, sp


def grammar(sp, language, max_len_b=300):
    return TreeGrammar(PieceTable.from_processor(sp), language, 1.0, max_len_b)


def allowed_ids(g: TreeGrammar, st: TreeState, s) -> set[int]:
    a = g.allowed(st, s)
    out = set(a.ids)
    if a.word_start:
        out |= set(g.word_start.nonzero().flatten().tolist())
    if a.word_more:
        out |= set(g.word_more.nonzero().flatten().tolist())
    return out


def source_row(sp, tree) -> list[int]:
    return sp.encode(" ".join(words(tree))) + [EOS]


def gold_is_allowed(g: TreeGrammar, sp, tree, language) -> bool:
    s = g.sentence(source_row(sp, tree))
    st = TreeState()
    for piece in sp.encode(linearize(tree, language)):
        if piece not in allowed_ids(g, st, s):
            return False
        st = g.feed(st, s, piece)
    return EOS in allowed_ids(g, st, s) and g.feed(st, s, EOS).closed


def test_every_gold_tree_is_allowed_piece_by_piece(vocab):
    language, sp = vocab
    g = grammar(sp, language)
    assert [t for t in TREES if not gold_is_allowed(g, sp, t, language)] == []


def test_every_gold_tree_of_the_sample_is_allowed(ptb_sample_dir, tmp_path):
    """On the real trees of sections 22 and 23 (the recipe's language, tree_words), with a vocabulary of the
    training sections: rare words, the rare labels, long sentences."""
    train = load_split(ptb_sample_dir, "train")
    src = [" ".join(words(t)) for t in train]
    sp = load_or_train(
        str(tmp_path), "tree_words", lambda: src + [linearize(t, "tree_words") for t in train], 4000
    )
    g = grammar(sp, "tree_words")
    trees = load_split(ptb_sample_dir, "dev") + load_split(ptb_sample_dir, "test")
    assert len(trees) == 245
    assert [t for t in trees if not gold_is_allowed(g, sp, t, "tree_words")] == []


def test_a_leaf_ends_at_a_boundary_and_a_bracket_closes_its_own_label(vocab):
    language, sp = vocab
    g = grammar(sp, language)
    tree = TREES[0]  # (S (NP ...) (VP ...)): rebuilt here token by token
    s = g.sentence(source_row(sp, tree))
    st = TreeState()
    assert EOS not in allowed_ids(g, st, s)  # not before a root
    for piece in sp.encode(linearize(tree, language).split()[0]):  # the root's opening bracket
        st = g.feed(st, s, piece)
    assert st.stack == () and st.partial  # written, not yet closed by a boundary
    wrong_close = sp.encode(linearize(tree, language).split()[-1].replace(tree.label, "VP"))
    assert not set(wrong_close[:1]) <= allowed_ids(g, st, s) or g.feed(st, s, wrong_close[0]).dead


class RandomScores:
    """A stepper whose next-token scores are random (seeded), whatever was written: the search goes where
    the constraint lets it, which is everywhere it lets it."""

    def __init__(self, vocab_size: int, seed: int):
        self.V, self.gen = vocab_size, torch.Generator().manual_seed(seed)

    def start(self, src, max_len, beams=1):
        return src.shape[0] * beams

    def step(self, tokens, rows):
        return 3.0 * torch.randn(rows, self.V, generator=self.gen)

    def reorder(self, rows, index, same_source=False):
        return rows


@pytest.mark.parametrize("max_len_b", [300, 3], ids=["room", "flat-tree-cap"])
@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_any_scores_give_well_formed_trees(vocab, search, max_len_b):
    """Whatever the scores, every output is a tree the reader takes without a repair, over exactly the
    source's words; with max_len_b=3 the cap is the flat tree's length (root, one piece per source piece,
    close, EOS), so opening a bracket more than that leaves room for is ruled out too."""
    language, sp = vocab
    g = grammar(sp, language, max_len_b)
    trees = TREES[:24]
    rows = [source_row(sp, t) for t in trees]
    width = max(map(len, rows))
    src = torch.tensor([r + [0] * (width - len(r)) for r in rows])
    lens = torch.tensor([len(r) - 1 for r in rows])
    stepper = TreeStepper(RandomScores(sp.get_piece_size(), seed=len(language) + max_len_b), g)
    if search == "greedy":
        out = greedy_search(stepper, src, lens, BOS, EOS, 1.0, max_len_b)
    else:
        out = beam_search(stepper, src, lens, BOS, EOS, 4, 0.3, 1.0, max_len_b)
    for tree, hyp, n in zip(trees, out.tokens, lens.tolist()):
        assert len(hyp) + 1 <= n + max_len_b  # EOS included
        built, repairs = delinearize_with_report(sp.decode(hyp), words(tree))
        assert repairs == [] and words(built) == words(tree), (sp.decode(hyp), repairs)


def test_the_constraint_on_the_cached_and_the_full_decoder_agree(vocab):
    """The wrapper keeps no state of the model's: over a small random Transformer, the cached and the
    uncached decoder (the reference path) give the same constrained beams and scores."""
    language, sp = vocab
    g = grammar(sp, language, max_len_b=30)  # the search's cap below
    torch.manual_seed(0)
    cfg = TransformerConfig(vocab_size=sp.get_piece_size(), n_layers=1, d_model=32, d_ff=64, n_heads=4,
                            d_k=8, d_v=8, dropout=0.0)  # fmt: skip
    m = Transformer(cfg).double().eval()
    rows = [source_row(sp, t) for t in TREES[:4]]
    width = max(map(len, rows))
    src = torch.tensor([r + [0] * (width - len(r)) for r in rows])
    lens = torch.tensor([len(r) - 1 for r in rows])
    a = beam_search(TreeStepper(CachedStepper(m), g), src, lens, BOS, EOS, 4, 0.3, 1.0, 30)
    b = beam_search(TreeStepper(UncachedStepper(m), g), src, lens, BOS, EOS, 4, 0.3, 1.0, 30)
    assert a.tokens == b.tokens and torch.allclose(a.scores, b.scores, rtol=0, atol=1e-12)
    assert all(delinearize_with_report(sp.decode(h), words(t))[1] == [] for h, t in zip(a.tokens, TREES))
