import math
from dataclasses import replace

import pytest
import torch

from ablate.config import ModelConfig, RunConfig, ScaleConfig, effective_model, paper_model
from ablate.nn.model import Transformer, TransformerConfig, count_parameters, sinusoid_table, softmax_last


def small(**kw) -> TransformerConfig:
    base = dict(vocab_size=50, n_layers=2, d_model=16, d_ff=32, n_heads=4, d_k=4, d_v=4, dropout=0.0)
    base.update(kw)
    return TransformerConfig(**base)


def test_sinusoid_table_matches_the_papers_formula():
    pe = sinusoid_table(50, 8)
    # PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)), d = 8
    assert pe[0, 0] == 0.0 and pe[0, 1] == 1.0
    assert pe[1, 0].item() == pytest.approx(math.sin(1.0), abs=1e-7)
    assert pe[1, 1].item() == pytest.approx(math.cos(1.0), abs=1e-7)
    assert pe[3, 2].item() == pytest.approx(math.sin(3 / 10000 ** (2 / 8)), abs=1e-7)  # i = 1
    assert pe[3, 3].item() == pytest.approx(math.cos(3 / 10000 ** (2 / 8)), abs=1e-7)
    assert pe[49, 6].item() == pytest.approx(math.sin(49 / 10000 ** (6 / 8)), abs=1e-6)  # i = 3
    assert pe[49, 7].item() == pytest.approx(math.cos(49 / 10000 ** (6 / 8)), abs=1e-6)


def test_embedding_is_shared_three_ways_and_scaled():
    torch.manual_seed(0)
    m = Transformer(small()).eval()
    assert m.src_embed.tokens.weight is m.embedding.weight is m.tgt_embed.tokens.weight
    ids = torch.tensor([[5, 7]])
    expected = m.embedding.weight[ids] * math.sqrt(16) + sinusoid_table(2, 16)
    assert torch.allclose(m.src_embed(ids), expected, atol=1e-6)
    h = torch.randn(3, 16)
    assert torch.allclose(m.logits(h), h @ m.embedding.weight.T, atol=1e-6)


def test_decoder_never_sees_later_positions():
    torch.manual_seed(0)
    m = Transformer(small()).eval()
    src = torch.tensor([[5, 6, 7, 3]])
    a = torch.tensor([[2, 10, 11, 12, 13]])
    b = a.clone()
    b[0, 3:] = torch.tensor([40, 41])  # change only positions 3 and 4
    ha, hb = m(src, a), m(src, b)
    assert torch.allclose(ha[:, :3], hb[:, :3], atol=1e-6)
    assert not torch.allclose(ha[:, 3:], hb[:, 3:], atol=1e-3)


def test_padding_is_ignored():
    torch.manual_seed(0)
    m = Transformer(small()).eval()
    src = torch.tensor([[5, 6, 7, 3]])
    tgt = torch.tensor([[2, 10, 11]])
    ref = m(src, tgt)
    src_pad = torch.tensor([[5, 6, 7, 3, 0, 0, 0]])
    tgt_pad = torch.tensor([[2, 10, 11, 0, 0]])
    out = m(src_pad, tgt_pad)
    assert torch.allclose(out[:, :3], ref, atol=1e-5)
    # And in a batch beside a longer sentence.
    batch_src = torch.tensor([[5, 6, 7, 3, 0, 0], [8, 9, 10, 11, 12, 3]])
    batch_tgt = torch.tensor([[2, 10, 11, 0], [2, 4, 5, 6]])
    assert torch.allclose(m(batch_src, batch_tgt)[0, :3], ref[0], atol=1e-5)


def closed_form(N, d, d_ff, h, d_k, d_v, V, learned_positions=0):
    """facts.md section 6, without the output-projection bias (the tied matrix has none here)."""
    attn = d * (h * d_k) * 2 + d * (h * d_v) + (h * d_v) * d + (2 * h * d_k + h * d_v + d)
    ffn = 2 * d * d_ff + d_ff + d
    enc = attn + ffn + 2 * (2 * d)
    dec = 2 * attn + ffn + 3 * (2 * d)
    return N * (enc + dec) + V * d + 2 * learned_positions * d


@pytest.mark.parametrize(
    "row",
    [
        dict(),  # base
        dict(d_k=16),  # B1: d_k != d_model / h
        dict(n_heads=1, d_k=512, d_v=512),  # A1
        dict(d_model=1024, d_ff=4096, n_heads=16),  # big
    ],
)
def test_parameter_count_matches_closed_form(row):
    cfg = ModelConfig(**row)
    with torch.device("meta"):
        n = count_parameters(Transformer(paper_model(cfg, 37000)))
    assert n == closed_form(cfg.n_layers, cfg.d_model, cfg.d_ff, cfg.n_heads, cfg.d_k, cfg.d_v, 37000)


def test_shallower_decoder_option():
    # model.decoder_layers (an option; the paper uses N for both stacks) is scaled like N: 4 x depth 0.5 = 2.
    cfg = replace(RunConfig(), model=ModelConfig(decoder_layers=4), scale=ScaleConfig(width=0.5, depth=0.5))
    c = effective_model(cfg, 6000)
    assert (c.n_layers, c.n_dec_layers, c.d_model, c.d_ff, c.n_heads, c.d_k) == (3, 2, 256, 1024, 8, 32)
    with torch.device("meta"):
        m = Transformer(c)
    assert (len(m.encoder), len(m.decoder)) == (3, 2)
    d, d_ff = 256, 1024
    enc_layer = 4 * d * d + 4 * d + 2 * d * d_ff + d_ff + d + 2 * 2 * d  # hand count: q/k/v/o, FFN, 2 norms
    assert count_parameters(m) == closed_form(2, d, d_ff, 8, 32, 32, 6000) + enc_layer
    assert small().n_dec_layers == 2  # None: the decoder has N layers, as in the paper


def test_base_parameter_count_is_the_known_number():
    with torch.device("meta"):
        n = count_parameters(Transformer(paper_model(ModelConfig(), 37000)))
    # facts.md section 6: 63,119,496 with an output bias of V = 37000 -> 63,082,496 without.
    assert n == 63_082_496


def test_learned_positions_add_one_table_per_stack():
    with torch.device("meta"):
        n = count_parameters(Transformer(small(positional="learned", max_positions=64)))
        n0 = count_parameters(Transformer(small()))
    assert n - n0 == 2 * 64 * 16


def test_pre_ln_is_an_option_with_final_norms():
    with torch.device("meta"):
        n_post = count_parameters(Transformer(small()))
        n_pre = count_parameters(Transformer(small(norm="pre")))
    assert n_pre - n_post == 2 * 2 * 16  # two final LayerNorms (gain + bias)


def test_odd_d_model_with_sinusoids_is_rejected():
    with pytest.raises(ValueError, match="even d_model"):
        TransformerConfig(vocab_size=10, d_model=15)


def test_cpu_dropout_rate_and_scale():
    # P(drop) = round(p * 2^16) / 2^16 and kept values scaled by 1 / (1 - p) (inverted dropout, 5.4); the
    # mask comes from the torch RNG, so a seed reproduces it.
    from ablate.nn.model import Dropout

    d = Dropout(0.1).train()
    x = torch.ones(1_000_003)  # not a multiple of 4: the last 64-bit word is cut
    torch.manual_seed(0)
    y = d(x)
    kept = y != 0
    assert torch.allclose(y[kept], torch.full_like(y[kept], 1 / 0.9))
    drop = 1 - kept.double().mean().item()
    expected = round(0.1 * 2**16) / 2**16
    assert abs(drop - expected) < 4 * (expected * (1 - expected) / x.numel()) ** 0.5  # 4 sigma
    torch.manual_seed(0)
    assert torch.equal(d(x), y)
    assert torch.equal(d.eval()(x), x)


@pytest.mark.parametrize("causal", [False, True])
def test_cpu_attention_equals_sdpa(causal):
    # The written-out equation 1 used on CPU against torch's SDPA (its math kernel in float64), values
    # and gradients, with a padding mask that hides the last keys of some rows.
    from ablate.nn.model import scaled_dot_product

    g = torch.Generator().manual_seed(0)
    B, h, L, d = 3, 2, 5, 4
    q, k, v = (torch.randn(B, h, L, d, generator=g, dtype=torch.float64, requires_grad=True) for _ in "qkv")
    mask = torch.ones(B, 1, 1, L, dtype=torch.bool)
    mask[1, ..., 3:] = False
    mask[2, ..., 1:] = False
    go = torch.randn(B, h, L, d, generator=g, dtype=torch.float64)
    ours = scaled_dot_product(q, k, v, mask, causal, torch.nn.Identity())
    (ours * go).sum().backward()
    grads = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=False)
    if causal:  # SDPA takes one of the two: build the combined mask by hand
        both = mask & torch.ones(L, L, dtype=torch.bool).tril()
        ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=both)
    (ref * go).sum().backward()
    assert torch.allclose(ours, ref, atol=1e-12)
    for a, t in zip(grads, (q, k, v)):
        assert torch.allclose(a, t.grad, atol=1e-12)
    # row 2 sees only key 0: its output is exactly v[..., 0, :]
    assert torch.allclose(ours[2], v[2, :, :1].expand(h, L, d), atol=1e-12)


def test_softmax_last_matches_torch_below_and_above_16_keys():
    # the short-row path (three elementwise ops, detached shift) against torch.softmax: values and
    # gradients, with masked (-inf) keys as attention has them
    for keys in (1, 7, 15, 16, 31):
        x = torch.randn(3, 2, 5, keys, dtype=torch.float64)
        x[..., 1:][torch.rand(3, 2, 5, keys - 1) < 0.3] = float("-inf")
        a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
        g = torch.randn_like(x)
        ya, yb = softmax_last(a), torch.softmax(b, -1)
        torch.testing.assert_close(ya, yb)
        ya.backward(g)
        yb.backward(g)
        torch.testing.assert_close(a.grad, b.grad)
