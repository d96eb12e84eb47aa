"""The built-in Transformer's components as options (docs/models.md): the defaults are the paper's model as
it was built before the options existed, and each option computes its formula, checked by hand on small
tensors with the module's own weights. Parameter counts: tests/test_report_params.py; cached decoding of
every combination: tests/test_decode.py."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

from ablate.config import ConfigError, ModelConfig, RunConfig, ScaleConfig, effective_model, to_dataclass
from ablate.config.validate import validate
from ablate.nn.config import FFN_KINDS, GATED_FFN, TransformerConfig
from ablate.nn.model import FeedForward, Rotary, Transformer, count_parameters
from ablate.run import register_configs  # noqa: F401 - registers the schema

ROOT = Path(__file__).resolve().parents[1]


def small(**kw) -> TransformerConfig:
    base = dict(vocab_size=50, n_layers=2, d_model=16, d_ff=32, n_heads=4, d_k=4, d_v=4, dropout=0.0)
    base.update(kw)
    return TransformerConfig(**base)


def built(seed: int = 0, **kw) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(small(**kw)).double().eval()


SRC = torch.tensor([[5, 6, 7, 8, 3, 0], [9, 10, 11, 12, 13, 3]])
TGT = torch.tensor([[2, 14, 15, 16, 0], [2, 17, 18, 19, 20]])

# ----------------------------------------------------------------------------------------------------------
# The defaults: the paper's model, as the code before the options built it


# The parameters of one encoder and one decoder layer of the default model, by name and shape: the names a
# checkpoint of it holds, and their order, which is the order of the initialization's random draws.
ENCODER_LAYER = [
    ("attn.qkv.weight", (48, 16)), ("attn.qkv.bias", (48,)), ("attn.out.weight", (16, 16)),
    ("attn.out.bias", (16,)), ("ffn.w1.weight", (32, 16)), ("ffn.w1.bias", (32,)),
    ("ffn.w2.weight", (16, 32)), ("ffn.w2.bias", (16,)), ("res1.norm.weight", (16,)),
    ("res1.norm.bias", (16,)), ("res2.norm.weight", (16,)), ("res2.norm.bias", (16,)),
]  # fmt: skip
DECODER_LAYER = [
    ("self_attn.qkv.weight", (48, 16)), ("self_attn.qkv.bias", (48,)), ("self_attn.out.weight", (16, 16)),
    ("self_attn.out.bias", (16,)), ("cross_attn.q.weight", (16, 16)), ("cross_attn.q.bias", (16,)),
    ("cross_attn.kv.weight", (32, 16)), ("cross_attn.kv.bias", (32,)), ("cross_attn.out.weight", (16, 16)),
    ("cross_attn.out.bias", (16,)), ("ffn.w1.weight", (32, 16)), ("ffn.w1.bias", (32,)),
    ("ffn.w2.weight", (16, 32)), ("ffn.w2.bias", (16,)), ("res1.norm.weight", (16,)),
    ("res1.norm.bias", (16,)), ("res2.norm.weight", (16,)), ("res2.norm.bias", (16,)),
    ("res3.norm.weight", (16,)), ("res3.norm.bias", (16,)),
]  # fmt: skip


def test_the_default_model_keeps_its_parameters_by_name_shape_and_order():
    m = Transformer(small())
    tables = [(f"{k}.weight", (50, 16)) for k in ("embedding", "src_embed.tokens", "tgt_embed.tokens")]
    expected = tables + [
        *((f"encoder.{i}.{k}", s) for i in range(2) for k, s in ENCODER_LAYER),
        *((f"decoder.{i}.{k}", s) for i in range(2) for k, s in DECODER_LAYER),
    ]
    assert [(k, tuple(v.shape)) for k, v in m.state_dict().items()] == expected
    assert m.src_embed.tokens is m.embedding is m.tgt_embed.tokens and m.output_weight is m.embedding.weight


def test_the_default_model_gives_the_logits_the_code_before_the_options_gave():
    """Seeded as the code before the options (commit 4614d4d) was: the same draws in the same order, the same
    forward, evaluation and training mode (dropout 0.1, a seeded mask). The figures were printed by that
    code; the tolerance takes a machine whose random normals differ in their last bit."""
    torch.manual_seed(0)
    m = Transformer(small(dropout=0.1)).double().eval()
    with torch.no_grad():
        lo = m.logits(m(SRC, TGT))
    assert lo.sum().item() == pytest.approx(-47.434868303613285, rel=1e-5)
    assert (lo**2).sum().item() == pytest.approx(365.10273879487175, rel=1e-5)
    row = [0.0, -1.046513380090555, 1.080127634578601, 0.208669870884455]  # the padding token's logit: 0
    assert lo[1, 2, :4].tolist() == pytest.approx(row, rel=1e-5)
    m.train()
    torch.manual_seed(1)
    with torch.no_grad():
        lt = m.logits(m(SRC, TGT))
    assert lt.sum().item() == pytest.approx(-53.11039163287468, rel=1e-5)
    assert (lt**2).sum().item() == pytest.approx(385.34176115031516, rel=1e-5)


def _paper_logits(m: Transformer, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
    """The paper's model (post-LN, ReLU FFN, sinusoids, one tied matrix) written out from its equations with
    the model's weights, in evaluation mode: the reference the default model must equal."""
    p, c = dict(m.named_parameters()), m.cfg
    d, h, dk, dv, eps = c.d_model, c.n_heads, c.d_k, c.d_v, c.norm_eps
    E = p["embedding.weight"]

    def pe(n):  # PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...), kept in float32
        out = torch.zeros(n, d, dtype=torch.float64)
        for pos in range(n):
            for i in range(0, d, 2):
                out[pos, i] = math.sin(pos / 10000 ** (i / d))
                out[pos, i + 1] = math.cos(pos / 10000 ** (i / d))
        return out.float().double()

    def ln(x, pre):
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        return (x - mu) / torch.sqrt(var + eps) * p[f"{pre}.weight"] + p[f"{pre}.bias"]

    def lin(x, pre):
        return x @ p[f"{pre}.weight"].T + p[f"{pre}.bias"]

    def heads(x, n):
        return x.view(x.shape[0], x.shape[1], h, n).transpose(1, 2)

    def attention(q, k, v, allowed, out):  # allowed (B or 1, 1, L or 1, S): True where a key is seen
        scores = (heads(q, dk) @ heads(k, dk).transpose(-2, -1)) / math.sqrt(dk)
        a = scores.masked_fill(~allowed, float("-inf")).softmax(-1) @ heads(v, dv)  # (B, h, L, dv)
        return lin(a.transpose(1, 2).reshape(q.shape[0], q.shape[1], h * dv), out)

    keys = (src != c.pad_id)[:, None, None, :]
    x = E[src] * math.sqrt(d) + pe(src.shape[1])
    for i in range(c.n_layers):
        q, k, v = lin(x, f"encoder.{i}.attn.qkv").split([h * dk, h * dk, h * dv], -1)
        x = ln(x + attention(q, k, v, keys, f"encoder.{i}.attn.out"), f"encoder.{i}.res1.norm")
        f = lin(torch.relu(lin(x, f"encoder.{i}.ffn.w1")), f"encoder.{i}.ffn.w2")
        x = ln(x + f, f"encoder.{i}.res2.norm")
    T = tgt.shape[1]
    causal = torch.ones(T, T, dtype=torch.bool).tril()[None, None]
    y = E[tgt] * math.sqrt(d) + pe(T)
    for i in range(c.n_dec_layers):
        pre = f"decoder.{i}"
        q, k, v = lin(y, f"{pre}.self_attn.qkv").split([h * dk, h * dk, h * dv], -1)
        y = ln(y + attention(q, k, v, causal, f"{pre}.self_attn.out"), f"{pre}.res1.norm")
        k, v = lin(x, f"{pre}.cross_attn.kv").split([h * dk, h * dv], -1)
        cross = attention(lin(y, f"{pre}.cross_attn.q"), k, v, keys, f"{pre}.cross_attn.out")
        y = ln(y + cross, f"{pre}.res2.norm")
        f = lin(torch.relu(lin(y, f"{pre}.ffn.w1")), f"{pre}.ffn.w2")
        y = ln(y + f, f"{pre}.res3.norm")
    return y @ E.T


def test_the_default_model_is_the_papers_written_out():
    m = built()
    with torch.no_grad():
        torch.testing.assert_close(m.logits(m(SRC, TGT)), _paper_logits(m, SRC, TGT), rtol=0, atol=1e-12)


def test_a_row_with_no_component_key_builds_the_default_config():
    c = effective_model(RunConfig(), 100)
    assert (c.ffn, c.norm_type, c.positional, c.norm, c.tie_embeddings) == (
        "relu", "layer", "sinusoidal", "post", True
    )  # fmt: skip
    for key in ("ffn", "norm_type", "tie_embeddings"):  # the run id holds only keys off their defaults
        assert getattr(ModelConfig(), key) == getattr(TransformerConfig(vocab_size=1), key)


# ----------------------------------------------------------------------------------------------------------
# The feed-forward network (3.3; Shazeer 2020)


def _sigmoid(x):
    return 1.0 / (1.0 + torch.exp(-x))


# Each kind's activation written from its definition (not torch's functions)
BY_HAND = {
    "relu": lambda x: torch.where(x > 0, x, torch.zeros_like(x)),  # max(0, x)
    "gelu": lambda x: 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0))),  # x Phi(x)
    "swish": lambda x: x * _sigmoid(x),  # Swish_1
    "glu": _sigmoid,
    "bilinear": lambda x: x,
    "reglu": lambda x: torch.where(x > 0, x, torch.zeros_like(x)),
    "geglu": lambda x: 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0))),
    "swiglu": lambda x: x * _sigmoid(x),
}


@pytest.mark.parametrize("kind", FFN_KINDS)
def test_each_ffn_kind_computes_its_formula(kind):
    torch.manual_seed(0)
    f = FeedForward(small(ffn=kind)).double()
    with torch.no_grad():
        for p in f.parameters():  # biases too, so that the formula's b, c and b2 show
            p.normal_()
    x = torch.randn(3, 5, 16, dtype=torch.float64)
    W1, b1, W2, b2 = f.w1.weight, f.w1.bias, f.w2.weight, f.w2.bias
    act = BY_HAND[kind]
    if kind in GATED_FFN:  # (act(x W + b) * (x V + c)) W2 + b2: three matrices
        assert f.v is not None and f.v.weight.shape == W1.shape == (32, 16)
        hidden = act(x @ W1.T + b1) * (x @ f.v.weight.T + f.v.bias)
    else:  # act(x W1 + b1) W2 + b2: two
        assert f.v is None
        hidden = act(x @ W1.T + b1)
    torch.testing.assert_close(f(x), hidden @ W2.T + b2, rtol=0, atol=1e-12)


def test_swiglu_is_silu_of_x_w_times_x_v_then_w2():
    # Shazeer's form, without biases: (silu(x W) * x V) W2 with the module's weights, its biases zero (as
    # the Transformer initializes them)
    torch.manual_seed(1)
    f = FeedForward(small(ffn="swiglu"))
    for lin in (f.w1, f.v, f.w2):
        torch.nn.init.zeros_(lin.bias)
    x = torch.randn(4, 16)
    ref = (torch.nn.functional.silu(x @ f.w1.weight.T) * (x @ f.v.weight.T)) @ f.w2.weight.T
    torch.testing.assert_close(f(x), ref)


@pytest.mark.parametrize("kind", ["relu", "swiglu"])
def test_relu_dropout_drops_the_hidden_units_of_every_kind(kind):
    from ablate.nn.model import ACTIVATIONS

    f = FeedForward(small(ffn=kind, relu_dropout=0.5)).train()
    x = torch.randn(2, 3, 16)
    torch.manual_seed(7)
    out = f(x)
    hidden = ACTIVATIONS[kind](f.w1(x)) * (f.v(x) if f.v is not None else 1.0)
    torch.manual_seed(7)
    mask = f.dropout.mask(hidden.shape, hidden.dtype)  # the same draw: 0 or 1 / (1 - p)
    torch.testing.assert_close(out, f.w2(hidden * mask))
    assert 0 < int((mask == 0).sum()) < mask.numel()


def test_a_gated_ffn_initializes_w_and_v_as_two_matrices_of_the_model():
    torch.manual_seed(0)
    m = Transformer(small(ffn="geglu", d_ff=64))
    f = m.encoder[0].ffn
    bound = math.sqrt(6 / (16 + 64))  # Xavier-uniform of a (64, 16) matrix
    for w in (f.w1.weight, f.v.weight, f.w2.weight):
        assert w.abs().max() <= bound and w.abs().max() > 0.9 * bound
    assert not torch.equal(f.w1.weight, f.v.weight)
    assert torch.equal(f.w1.bias, torch.zeros(64)) and torch.equal(f.v.bias, torch.zeros(64))


# ----------------------------------------------------------------------------------------------------------
# The norm (3.1; Zhang & Sennrich 2019)


def test_rmsnorm_is_x_over_its_root_mean_square_times_the_gain():
    m = built(norm_type="rms")
    norm = m.encoder[0].res1.norm
    with torch.no_grad():
        norm.weight.normal_()
    x = torch.randn(3, 7, 16, dtype=torch.float64) * 3 + 1
    ref = x / torch.sqrt((x**2).mean(-1, keepdim=True) + 1e-6) * norm.weight
    torch.testing.assert_close(norm(x), ref, rtol=0, atol=1e-12)
    assert [n for n, _ in norm.named_parameters()] == ["weight"]  # a gain, no bias


@pytest.mark.parametrize("where", ["post", "pre"])
def test_every_norm_of_the_model_is_its_norm_type(where):
    m = Transformer(small(norm_type="rms", norm=where))
    kinds = {type(x).__name__ for x in m.modules() if isinstance(x, torch.nn.LayerNorm | torch.nn.RMSNorm)}
    assert kinds == {"RMSNorm"}
    n = sum(isinstance(x, torch.nn.RMSNorm) for x in m.modules())
    assert n == 2 * 2 + 2 * 3 + (2 if where == "pre" else 0)  # 2 units an encoder layer, 3 a decoder's
    # post: Norm(x + Sublayer(x)); pre: x + Sublayer(Norm(x)), with a final norm
    r, x = m.encoder[0].res2, torch.randn(2, 3, 16)
    sub = m.encoder[0].ffn
    m.eval()
    ref = x + sub(r.norm(x)) if where == "pre" else r.norm(x + sub(x))
    torch.testing.assert_close(r(x, sub), ref)


# ----------------------------------------------------------------------------------------------------------
# Rotary positions (Su et al. 2021)


def _rotary(d_k=8, positions=16) -> Rotary:
    return Rotary(small(positional="rotary", d_k=d_k, n_heads=2, max_positions=positions))


def test_rotary_turns_each_pair_by_its_positions_angle():
    rot = _rotary()
    x = torch.randn(2, 3, 5, 8, dtype=torch.float64)  # (B, h, L, d_k)
    out = rot(x, start=4)
    for pos in range(5):
        m = 4 + pos
        for i in range(4):  # pairs (x_2i, x_2i+1), theta_i = 10000^(-2i/d_k)
            a = m * 10000 ** (-2 * i / 8)
            x0, x1 = x[..., pos, 2 * i], x[..., pos, 2 * i + 1]
            torch.testing.assert_close(out[..., pos, 2 * i], x0 * math.cos(a) - x1 * math.sin(a))
            torch.testing.assert_close(out[..., pos, 2 * i + 1], x0 * math.sin(a) + x1 * math.cos(a))
    assert torch.equal(rot(x[..., :1, :], 0), x[..., :1, :])  # position 0: no turn


def test_rotary_keeps_norms_and_scores_depend_on_relative_position_only():
    rot = _rotary(positions=8)  # the table grows past its 8 positions
    q = torch.randn(1, 2, 6, 8, dtype=torch.float64)
    k = torch.randn(1, 2, 6, 8, dtype=torch.float64)
    for start in (0, 3, 40):
        torch.testing.assert_close(rot(q, start).norm(dim=-1), q.norm(dim=-1), rtol=0, atol=1e-12)
    scores = rot(q, 0) @ rot(k, 0).transpose(-2, -1)  # (1, 2, 6, 6): q at m, k at n
    for offset in (1, 7, 100):  # both shifted alike: the same scores
        shifted = rot(q, offset) @ rot(k, offset).transpose(-2, -1)
        torch.testing.assert_close(shifted, scores, rtol=0, atol=1e-10)
    # and a score is <q, R_(n-m) k>: the key turned by the difference alone
    m, n = 2, 5
    ref = (q[..., m, :] * rot(k[..., n : n + 1, :], n - m)[..., 0, :]).sum(-1)
    torch.testing.assert_close(scores[..., m, n], ref, rtol=0, atol=1e-12)
    assert not torch.allclose(scores, q @ k.transpose(-2, -1))  # positions do change them


def test_rotary_applies_to_self_attention_only_and_adds_nothing_to_the_embeddings():
    m = built(positional="rotary")
    assert m.src_embed.positions is None and m.tgt_embed.positions is None
    ids = torch.tensor([[5, 7, 9]])
    torch.testing.assert_close(m.src_embed(ids), m.embedding.weight[ids] * 4.0)  # sqrt(16), no position
    selfs = [m.encoder[0].attn, m.decoder[0].self_attn, m.decoder[1].self_attn]
    assert all(a.rotary is m.encoder[0].attn.rotary is not None for a in selfs)  # one shared table
    assert all(layer.cross_attn.rotary is None for layer in m.decoder)
    assert count_parameters(m) == count_parameters(built())  # no parameters
    with torch.no_grad():  # the encoder's output changes with the order of its tokens (positions count)
        a, _ = m.encode(torch.tensor([[5, 6, 7, 8]]))
        b, _ = m.encode(torch.tensor([[8, 7, 6, 5]]))
    assert not torch.allclose(a, b.flip(1))


def test_rotary_needs_an_even_head_size():
    with pytest.raises(ValueError, match="rotary positions need an even d_k"):
        small(positional="rotary", d_k=5)
    # under a scale an odd head size grows by one, as d_model does for sinusoids
    cfg = RunConfig(model=ModelConfig(positional="rotary"), scale=ScaleConfig(width=3 / 64))
    assert effective_model(cfg, 100).d_k == 4  # 64 x 3/64 = 3 -> 4


# ----------------------------------------------------------------------------------------------------------
# No positions


def test_without_positions_the_encoder_is_order_invariant():
    """positional=none: nothing tells the encoder where a token is: its output permutes with its input, and
    the decoder sees the source as a bag of tokens (its own causal mask still orders the target)."""
    m = built(positional="none")
    assert m.src_embed.positions is None and all(a.attn.rotary is None for a in m.encoder)
    src = torch.tensor([[5, 6, 7, 8, 9, 3]])
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    with torch.no_grad():
        mem, mask = m.encode(src)
        mem_p, mask_p = m.encode(src[:, perm])
        torch.testing.assert_close(mem_p, mem[:, perm], rtol=0, atol=1e-12)
        tgt = torch.tensor([[2, 10, 11, 12]])
        torch.testing.assert_close(m.decode(tgt, mem_p, mask_p), m.decode(tgt, mem, mask), rtol=0, atol=1e-12)
        # the decoder's own order still counts: a swapped target prefix changes the next hidden state
        swapped = torch.tensor([[2, 11, 10, 12]])
        assert not torch.allclose(m.decode(tgt, mem, mask)[:, -1], m.decode(swapped, mem, mask)[:, -1])


# ----------------------------------------------------------------------------------------------------------
# Untied embeddings


def test_untied_embeddings_are_three_matrices():
    m = built(tie_embeddings=False)
    src_w, tgt_w, out_w = m.src_embed.tokens.weight, m.tgt_embed.tokens.weight, m.output.weight
    assert len({id(src_w), id(tgt_w), id(out_w)}) == 3 and not hasattr(m, "embedding")
    assert m.output.bias is None and m.output_weight is out_w
    names = {k for k in m.state_dict() if "encoder." not in k and "decoder." not in k}
    assert names == {"src_embed.tokens.weight", "tgt_embed.tokens.weight", "output.weight"}
    h = torch.randn(3, 16, dtype=torch.float64)
    torch.testing.assert_close(m.logits(h), h @ out_w.T, rtol=0, atol=1e-12)
    ids = torch.tensor([[5, 7]])
    torch.testing.assert_close(m.src_embed(ids), src_w[ids] * 4.0 + m.src_embed.positions(0, 2).double())
    torch.testing.assert_close(m.tgt_embed(ids), tgt_w[ids] * 4.0 + m.tgt_embed.positions(0, 2).double())
    for w in (src_w, tgt_w, out_w):  # each initialized as the tied matrix: N(0, 1/d), padding row zero
        assert torch.equal(w[0], torch.zeros(16, dtype=w.dtype)) and 0.15 < w[1:].std().item() < 0.35
    assert count_parameters(m) - count_parameters(built()) == 2 * 50 * 16
    with torch.no_grad():  # the source embedding is the encoder's alone
        before = m.logits(m(SRC, TGT))
        src_w[10:14] += 1.0  # tokens only the source holds
        after = m.logits(m(SRC, TGT))
    assert not torch.allclose(before, after) and torch.equal(out_w, m.output_weight)


# ----------------------------------------------------------------------------------------------------------
# The row's keys: given on the command line or in a row file, checked in one line


def _composed(*overrides: str) -> RunConfig:
    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        return to_dataclass(compose("config", overrides=["recipe=tiny", "scale=tiny", *overrides]))


def test_the_keys_reach_the_model_from_the_command_line():
    cfg = _composed(
        "model.ffn=swiglu", "model.norm_type=rms", "model.positional=rotary", "model.tie_embeddings=false"
    )
    validate(cfg)
    c = effective_model(cfg, 300)
    assert (c.ffn, c.norm_type, c.positional, c.tie_embeddings) == ("swiglu", "rms", "rotary", False)
    base = effective_model(_composed(), 300)
    assert (c.d_model, c.d_ff, c.d_k, c.n_layers) == (base.d_model, base.d_ff, base.d_k, base.n_layers)


@pytest.mark.parametrize(
    ("override", "said"),
    [
        ("model.ffn=swiglu2", "model.ffn='swiglu2' is not one of relu, gelu, swish, glu, bilinear, geglu, "
                              "reglu, swiglu"),
        ("model.norm_type=batch", "model.norm_type='batch' is not one of layer, rms"),
        ("model.positional=alibi", "model.positional='alibi' is not one of sinusoidal, learned, rotary, "
                                   "none"),
        ("base.ffn=relu6", "base.ffn='relu6' is not one of relu, gelu"),
        ("model.d_k=7", "model.d_k=7 must be even for rotary positions"),
    ],
)  # fmt: skip
def test_a_bad_value_is_refused_in_one_line_naming_its_key(override, said):
    extra = ["model.positional=rotary", "model.strict_heads=false"] if "d_k" in override else []
    with pytest.raises(ConfigError) as e:
        validate(_composed(*extra, override))
    assert said in str(e.value) and "\n" not in str(e.value)


def test_a_non_boolean_tie_embeddings_is_refused_where_the_config_composes():
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException, match="model.tie_embeddings=maybe"):
        _composed("model.tie_embeddings=maybe")


def test_a_record_written_before_the_components_is_of_the_same_model_as_a_default_run():
    """The plan's estimates match a run to the records of its model (`model_key`): a record's
    `model_effective` from before the component keys lacks them, and is the default model."""
    from dataclasses import asdict

    from ablate.jobs.estimate import model_key
    from ablate.nn.config import ADDED_DEFAULTS

    now = asdict(effective_model(RunConfig(), 37_000))
    older = {k: v for k, v in now.items() if k not in ADDED_DEFAULTS}
    assert set(now) - set(older) == {"ffn", "norm_type", "tie_embeddings"}
    assert model_key(now) == model_key(older)
    assert model_key({**now, "ffn": "swiglu"}) != model_key(older)
    assert model_key({**now, "tie_embeddings": False}) != model_key(older)
