import math

import pytest
import torch

from ablate.nn.decode import (
    CachedStepper,
    EnsembleStepper,
    UncachedStepper,
    beam_search,
    greedy_search,
    length_penalty,
)
from ablate.nn.model import Transformer, TransformerConfig

BOS, EOS = 2, 3


class TableStepper:
    """A hand-built model: next-token probabilities looked up by the prefix generated so far."""

    def __init__(self, table: dict[tuple, dict[int, float]], vocab: int = 8):
        self.table, self.vocab = table, vocab

    def start(self, src, max_len, beams=1):
        return [() for _ in range(src.shape[0] * beams)]

    def step(self, tokens, state):
        logits = torch.full((len(state), self.vocab), -1e9)
        for r, tok in enumerate(tokens.tolist()):
            prefix = state[r] + ((tok,) if tok != BOS else ())
            state[r] = prefix
            for t, p in self.table.get(prefix, {EOS: 1.0}).items():
                logits[r, t] = math.log(p)
        return logits

    def reorder(self, state, index, same_source=False):
        return [state[i] for i in index.tolist()]


# Short: "4 EOS" with p = 0.5 * 0.6 = 0.30; long: "5 6 EOS" with p = 0.4 * 0.8 * 0.85 = 0.272.
TABLE = {
    (): {4: 0.5, 5: 0.4, 7: 0.1},
    (4,): {EOS: 0.6, 6: 0.4},
    (4, 6): {EOS: 0.3, 7: 0.7},
    (4, 6, 7): {EOS: 1.0},
    (5,): {6: 0.8, EOS: 0.2},
    (5, 6): {EOS: 0.85, 7: 0.15},
    (5, 6, 7): {EOS: 1.0},
    (7,): {EOS: 1.0},
}


def run(alpha, beam=2, b=10):
    src = torch.zeros(1, 3, dtype=torch.long)
    return beam_search(
        TableStepper(TABLE), src, torch.tensor([3]), BOS, EOS, beam=beam, alpha=alpha, max_len_b=b
    )


def test_length_penalty_formula():
    assert length_penalty(1.0, 0.6) == 1.0
    assert length_penalty(7.0, 1.0) == 2.0  # (5 + 7) / 6


def test_beam_without_penalty_prefers_the_more_probable_short_hypothesis():
    out = run(alpha=0.0)
    assert out.tokens == [[4]]
    assert out.scores[0].item() == pytest.approx(math.log(0.30), rel=1e-5)


def test_beam_at_0_6_still_short_and_at_2_prefers_longer():
    # alpha 0.6: short log(0.30) / ((5+2)/6)^0.6 = -1.0976; long log(0.272) / ((5+3)/6)^0.6 = -1.0956: long
    # (the long one wins already at 0.6: the GNMT penalty favours length)
    short = math.log(0.30) / ((5 + 2) / 6) ** 0.6
    long = math.log(0.272) / ((5 + 3) / 6) ** 0.6
    assert long > short
    out = run(alpha=0.6)
    assert out.tokens == [[5, 6]]
    assert out.scores[0].item() == pytest.approx(long, rel=1e-5)
    # alpha 0.3: short -1.2040 / 1.0474 = -1.1495 vs long -1.3020 / 1.0901 = -1.1943 -> short
    assert run(alpha=0.3).tokens == [[4]]


def test_beam_finds_what_greedy_misses():
    # Greedy: 4 (0.5), then EOS (0.6) -> [4]; with alpha 0.6 the beam prefers [5, 6].
    src = torch.zeros(1, 3, dtype=torch.long)
    g = greedy_search(TableStepper(TABLE), src, torch.tensor([3]), BOS, EOS)
    assert g.tokens == [[4]]
    assert run(alpha=0.6, beam=1).tokens == [[4]]  # beam 1 is greedy


def test_max_length_forces_end():
    # input length 3, a = 1, b = -1: at most 2 tokens (EOS included) -> "4 EOS" or "5 EOS"...
    src = torch.zeros(1, 3, dtype=torch.long)
    out = beam_search(TableStepper(TABLE), src, torch.tensor([3]), BOS, EOS, beam=2, alpha=0.6, max_len_b=-1)
    assert len(out.tokens[0]) <= 1
    assert out.tokens == [[4]]  # p(4 EOS) = 0.30 > p(5 EOS) = 0.08


def model64(seed=0, **kw):
    torch.manual_seed(seed)
    cfg = TransformerConfig(
        vocab_size=30, n_layers=2, d_model=32, d_ff=64, n_heads=4, d_k=8, d_v=8, dropout=0.0, **kw
    )
    m = Transformer(cfg).double().eval()
    # Sharpen the random model so that hypotheses differ in length and content.
    with torch.no_grad():
        m.output_weight.mul_(4.0)
    return m


# The components (docs/models.md), each alone and all at once
COMPONENTS = [
    {"positional": "rotary"},
    {"positional": "none"},
    {"ffn": "swiglu"},
    {"ffn": "gelu"},
    {"norm_type": "rms"},
    {"tie_embeddings": False},
    {"ffn": "geglu", "norm_type": "rms", "norm": "pre", "positional": "rotary", "tie_embeddings": False},
]


@pytest.mark.parametrize("kw", [{}, {"positional": "learned"}, {"norm": "pre"}, *COMPONENTS])
def test_cached_decoding_equals_full_decoding(kw):
    m = model64(**kw)
    src = torch.tensor([[5, 6, 7, 8, 3, 0], [9, 10, 11, 12, 13, 3]])
    lens = torch.tensor([4, 5])
    a = beam_search(CachedStepper(m), src, lens, BOS, EOS, beam=4, alpha=0.6, max_len_b=6)
    b = beam_search(UncachedStepper(m), src, lens, BOS, EOS, beam=4, alpha=0.6, max_len_b=6)
    assert a.tokens == b.tokens
    assert torch.allclose(a.scores, b.scores, rtol=0, atol=1e-12)
    g1 = greedy_search(CachedStepper(m), src, lens, BOS, EOS, max_len_b=6)
    g2 = greedy_search(UncachedStepper(m), src, lens, BOS, EOS, max_len_b=6)
    assert g1.tokens == g2.tokens


def _steps_and_full(m, src, tgt):
    """The logits of each step on the cache, and of the teacher-forced decoder over the same prefix."""
    memory, mask = m.encode(src)
    full = m.logits(m.decode(tgt, memory, mask))  # (B, T, V)
    cache = m.start_cache(memory, mask, tgt.shape[1])
    steps = torch.stack([m.step(tgt[:, t], cache) for t in range(tgt.shape[1])], dim=1)
    return steps, full


def test_cached_step_logits_equal_full_decoder_logits():
    m = model64()
    steps, full = _steps_and_full(m, torch.tensor([[5, 6, 7, 3]]), torch.tensor([[BOS, 9, 4, 11, 12]]))
    assert torch.allclose(full, steps, rtol=0, atol=1e-10)


def test_every_combination_of_the_components_decodes_on_its_cache_as_teacher_forced():
    """ffn x norm_type x norm x positional x tie_embeddings, all 256: a step on the cache gives the logits of
    the full decoder over the same prefix, in a batch with padding (rotary: queries and keys turned by
    their positions in both)."""
    import itertools

    from ablate.nn.config import FFN_KINDS, NORM_TYPES, NORMS, POSITIONALS

    src = torch.tensor([[5, 6, 7, 3, 0], [8, 9, 10, 11, 3]])
    tgt = torch.tensor([[BOS, 9, 4, 11, 12, 13], [BOS, 5, 5, 6, 7, 8]])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tensors this small gain nothing from a second thread, and wait on a busy one
    try:
        for ffn, norm_type, norm, positional, tie in itertools.product(
            FFN_KINDS, NORM_TYPES, NORMS, POSITIONALS, (True, False)
        ):
            kw = dict(ffn=ffn, norm_type=norm_type, norm=norm, positional=positional, tie_embeddings=tie)
            m = model64(max_positions=8, **kw)
            with torch.no_grad():
                steps, full = _steps_and_full(m, src, tgt)
            assert torch.allclose(full, steps, rtol=0, atol=1e-10), kw
    finally:
        torch.set_num_threads(threads)


def test_rotary_decodes_past_its_table_on_the_cache_as_teacher_forced():
    # the table holds 3 positions; both paths grow it (as sinusoids do) and agree on every step
    m = model64(positional="rotary", max_positions=3)
    tgt = torch.tensor([[BOS, 9, 4, 11, 12, 13, 14, 15]])
    with torch.no_grad():
        steps, full = _steps_and_full(m, torch.tensor([[5, 6, 7, 8, 9, 3]]), tgt)
    assert torch.allclose(full, steps, rtol=0, atol=1e-10)
    assert m.encoder[0].attn.rotary.cos.shape[0] >= 8


def test_batched_beam_equals_one_sentence_at_a_time():
    m = model64(seed=1)
    src = torch.tensor([[5, 6, 7, 8, 3, 0, 0], [9, 10, 11, 12, 13, 14, 3]])
    lens = torch.tensor([4, 6])
    both = beam_search(CachedStepper(m), src, lens, BOS, EOS, beam=3, alpha=0.6, max_len_b=5)
    one = beam_search(CachedStepper(m), src[:1, :5], lens[:1], BOS, EOS, beam=3, alpha=0.6, max_len_b=5)
    two = beam_search(CachedStepper(m), src[1:], lens[1:], BOS, EOS, beam=3, alpha=0.6, max_len_b=5)
    assert both.tokens == one.tokens + two.tokens
    assert torch.allclose(both.scores, torch.cat([one.scores, two.scores]), atol=1e-9)


def test_grouped_cache_equals_a_copy_of_the_source_per_row():
    # A beam search keeps one copy of each sentence's encoder keys/values for its K beams (group = K) and
    # attends with the K beams as K queries; a cache with the source copied to every row is the reference.
    m = model64(seed=2)
    src = torch.tensor([[5, 6, 7, 8, 3, 0], [9, 10, 11, 12, 13, 3]])
    memory, mask = m.encode(src)
    rows = torch.arange(2).repeat_interleave(3)
    grouped = m.start_cache(memory, mask, 8, group=3)
    copied = m.start_cache(memory[rows], mask[rows], 8)
    assert grouped.layers[0].cross_k.shape[0] == 2 and copied.layers[0].cross_k.shape[0] == 6
    tokens = torch.tensor([BOS] * 6)
    within = torch.tensor([2, 2, 0, 4, 3, 3])  # each row's new parent decodes the same sentence
    across = torch.tensor([4, 0, 1, 5, 2, 2])  # rows move between sentences: the grouped cache ungroups
    for t, (index, same) in enumerate([(within, True), (within, True), (across, False), (within, False)]):
        a, b = m.step(tokens, grouped), m.step(tokens, copied)
        assert torch.allclose(a, b, rtol=0, atol=1e-10), t
        grouped.reorder(index, same_source=same)
        copied.reorder(index, same_source=same)
        tokens = a.argmax(-1)[index]
    assert grouped.group == 1
    assert torch.allclose(m.step(tokens, grouped), m.step(tokens, copied), rtol=0, atol=1e-10)


def test_best_continuations_equal_the_full_log_softmax_ranking():
    # Independent path: the full (R, V) log-softmax, alive scores added, top-2K over each sentence's K * V.
    from ablate.nn.decode import best_continuations

    g = torch.Generator().manual_seed(0)
    B, K, V = 3, 4, 50
    logits = torch.randn(B * K, V, generator=g, dtype=torch.float64) * 4
    alive = torch.randn(B, K, generator=g, dtype=torch.float64)
    full = torch.log_softmax(logits, -1)  # (B*K, V)
    ref_logp, ref_idx = (alive[..., None] + full.view(B, K, V)).view(B, K * V).topk(2 * K, dim=1)
    eos_only = torch.tensor([False] * K + [True] * K + [False] * K)
    row_logp, row_tok = best_continuations(logits.clone(), 2 * K, EOS, eos_only)
    ours, idx = (alive[..., None] + row_logp.view(B, K, -1)).view(B, -1).topk(2 * K, dim=1)
    tok = row_tok.view(B, -1).gather(1, idx)
    for b in (0, 2):  # free sentences: the same 2K candidates, same order, same scores
        assert torch.allclose(ours[b], ref_logp[b], atol=1e-12)
        assert torch.equal(tok[b], ref_idx[b] % V)
        assert torch.equal(idx[b] // (2 * K), ref_idx[b] // V)  # the same parent beams
    # sentence 1 is at its length cap: each beam's one candidate is EOS with its own log p(EOS)
    finite = torch.isfinite(ours[1])
    assert int(finite.sum()) == K and bool((tok[1][finite] == EOS).all())
    expect = (alive[1] + full.view(B, K, V)[1, :, EOS]).sort(descending=True).values
    assert torch.allclose(ours[1][finite], expect, atol=1e-12)


# A second hand-built model over the same prefixes; an ensemble of TABLE and OTHER searches their mean
# conditional probabilities, prefix by prefix: MEAN, averaged by hand.
OTHER = {
    (): {4: 0.2, 5: 0.7, 7: 0.1},
    (4,): {EOS: 0.2, 6: 0.8},
    (4, 6): {EOS: 0.9, 7: 0.1},
    (4, 6, 7): {EOS: 1.0},
    (5,): {6: 0.4, EOS: 0.6},
    (5, 6): {EOS: 0.5, 7: 0.5},
    (5, 6, 7): {EOS: 1.0},
    (7,): {EOS: 1.0},
}
MEAN = {
    (): {4: 0.35, 5: 0.55, 7: 0.1},
    (4,): {EOS: 0.4, 6: 0.6},
    (4, 6): {EOS: 0.6, 7: 0.4},
    (4, 6, 7): {EOS: 1.0},
    (5,): {6: 0.6, EOS: 0.4},
    (5, 6): {EOS: 0.675, 7: 0.325},
    (5, 6, 7): {EOS: 1.0},
    (7,): {EOS: 1.0},
}


@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.0])
def test_an_ensemble_searches_the_mean_of_its_models_probabilities(alpha):
    """The ensemble of two hand-built models finds what one model with their averaged table finds, with the
    same scores; its first step's log-probabilities are the logs of the hand-averaged ones."""
    src, lens = torch.zeros(1, 3, dtype=torch.long), torch.tensor([3])
    ens = EnsembleStepper([TableStepper(TABLE), TableStepper(OTHER)])
    first = ens.step(torch.tensor([BOS]), ens.start(src, 10))[0]
    assert first[[4, 5, 7]].exp().tolist() == pytest.approx([0.35, 0.55, 0.1])
    a = beam_search(ens, src, lens, BOS, EOS, beam=2, alpha=alpha, max_len_b=10)
    b = beam_search(TableStepper(MEAN), src, lens, BOS, EOS, beam=2, alpha=alpha, max_len_b=10)
    assert a.tokens == b.tokens
    assert torch.allclose(a.scores, b.scores, atol=1e-6)
    # the mean differs from either model: 5 6 EOS (0.55 * 0.6 * 0.675 = 0.223) beats 4 EOS (0.35 * 0.4)
    assert beam_search(ens, src, lens, BOS, EOS, beam=2, alpha=0.0, max_len_b=10).tokens == [[5, 6]]
    assert run(alpha=0.0).tokens == [[4]]


def test_an_ensemble_of_models_decodes_alike_cached_and_uncached_and_of_one_as_the_model():
    m1, m2 = model64(seed=0), model64(seed=2)
    src = torch.tensor([[5, 6, 7, 8, 3, 0], [9, 10, 11, 12, 13, 3]])
    lens = torch.tensor([4, 5])

    def beams(stepper):
        return beam_search(stepper, src, lens, BOS, EOS, beam=4, alpha=0.6, max_len_b=6)

    a = beams(EnsembleStepper([CachedStepper(m1), CachedStepper(m2)]))
    b = beams(EnsembleStepper([UncachedStepper(m1), UncachedStepper(m2)]))
    assert a.tokens == b.tokens and torch.allclose(a.scores, b.scores, rtol=0, atol=1e-12)
    one, alone = beams(EnsembleStepper([CachedStepper(m1)])), beams(CachedStepper(m1))
    assert one.tokens == alone.tokens and torch.allclose(one.scores, alone.scores, rtol=0, atol=1e-12)
    assert a.tokens != alone.tokens or not torch.allclose(a.scores, alone.scores)  # m2 counts
