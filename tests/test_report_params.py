"""Parameter counts at the paper's scale: meta-device model vs closed form vs the project's facts (section 6:
non-embedding counts + V * d_model, no output bias)."""

from __future__ import annotations

import json

import pytest

from ablate import paper
from ablate.config import ModelConfig, paper_model
from ablate.report.__main__ import main
from ablate.report.collect import load_row_model, row_configs
from ablate.report.params import closed_form, meta_count

# non-embedding parameters (facts.md section 6, biases on every linear, 2 LayerNorm params per unit)
NON_EMB = {
    "base": 44_138_496,
    "A1": 44_138_496,
    "B1": 37_046_784,
    "B2": 39_410_688,
    "C1": 14_712_832,
    "C2": 29_425_664,
    "C3": 58_851_328,
    "C4": 17_362_944,
    "C5": 126_001_152,
    "C6": 31_543_296,
    "C7": 69_328_896,
    "D1": 44_138_496,
    "big": 176_357_376,
}


def _paper_cfg(row: str) -> ModelConfig:
    return ModelConfig(**paper.table3()[row].model_dict())


@pytest.mark.parametrize("row", sorted(NON_EMB))
def test_closed_form_matches_facts(row):
    m = _paper_cfg(row)
    assert closed_form(paper_model(m, 37_000)) == NON_EMB[row] + 37_000 * m.d_model


def test_meta_count_matches_closed_form_and_known_totals():
    assert meta_count(paper_model(_paper_cfg("base"), 37_000)) == 63_082_496
    assert meta_count(paper_model(_paper_cfg("B1"), 37_000)) == 37_046_784 + 18_944_000
    assert meta_count(paper_model(_paper_cfg("big"), 37_000)) == 176_357_376 + 37_000 * 1024
    for row in ("A4", "C4", "E"):
        c = paper_model(_paper_cfg(row), 37_000)
        assert meta_count(c) == closed_form(c)
    pre = paper_model(ModelConfig(norm="pre", positional="learned", max_positions=64), 1000)
    assert meta_count(pre) == closed_form(pre)


def test_row_yaml_merges_over_base(tmp_path):
    p = tmp_path / "B1.yaml"
    p.write_text("# row B1\ndefaults:\n  - base\n  - _self_\n\nname: B1\ngroup: B\nd_k: 16\n")
    m = load_row_model(p)
    assert (m.name, m.group, m.d_k, m.d_v, m.n_heads, m.d_model) == ("B1", "B", 16, 64, 8, 512)
    (tmp_path / "zz_user.yaml").write_text("n_layers: 3\n")
    rc = row_configs(tmp_path)
    assert list(rc.models)[:2] == ["base", "A1"] and list(rc.models)[-1] == "zz_user"
    assert rc.source["B1"] == "yaml" and rc.source["base"] == "paper" and rc.models["zz_user"].n_layers == 3


def test_params_cli(tmp_path, capsys):
    assert main(["params", "--conf", str(tmp_path / "none"), "--format", "json", "--closed-form"]) == 0
    rows = {r["row"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert list(rows) == list(paper.PAPER_ORDER)
    assert (
        rows["base"]["params"] == 63_082_496
        and rows["base"]["paper_m"] == 65
        and rows["base"]["diff_m"] == -1.92
    )
    assert rows["big"]["params_m"] == 214.25 and rows["big"]["diff_m"] == 1.25
    assert not rows["A1"]["paper_printed"] and rows["B1"]["paper_printed"]
    assert main(["params", "--conf", str(tmp_path / "none"), "--rows", "base,C5"]) == 0
    out = capsys.readouterr().out
    assert "| base | 6 | 512 | 2048 | 8 | 64 | 64 | sinusoidal | 63.08 | 65 | -1.92 |" in out
    assert "| C5 | 6 | 1024 | 2048 | 8 | 128 | 128 | sinusoidal | 163.89 | 168 | -4.11 |" in out


def test_project_row_yamls_match_the_paper():
    rc = row_configs()  # the project's conf/model; rows without a YAML fall back to the paper itself
    for row, pr in paper.table3().items():
        m = rc.models[row]
        got = {k: getattr(m, k) for k in pr.model_dict()}
        assert got == pr.model_dict(), f"conf/model/{row}.yaml differs from the paper's Table 3"


def test_closed_form_counts_every_combination_of_the_components():
    """ffn x norm_type x norm x positional x tie_embeddings, all 256: the formula against the built model's
    own parameters (each shared tensor once)."""
    import itertools

    from ablate.nn.config import FFN_KINDS, NORM_TYPES, NORMS, POSITIONALS, TransformerConfig
    from ablate.nn.model import Transformer

    combos = list(itertools.product(FFN_KINDS, NORM_TYPES, NORMS, POSITIONALS, (True, False)))
    assert len(combos) == 8 * 2 * 2 * 4 * 2
    for ffn, norm_type, norm, positional, tie in combos:
        c = TransformerConfig(
            vocab_size=37, n_layers=2, n_dec_layers=1, d_model=12, d_ff=20, n_heads=3, d_k=4, d_v=5,
            max_positions=9, ffn=ffn, norm_type=norm_type, norm=norm, positional=positional,
            tie_embeddings=tie,
        )  # fmt: skip
        model = Transformer(c)
        assert closed_form(c) == sum(p.numel() for p in model.parameters()), c


def test_each_components_count_by_hand():
    """The closed form's terms, one component at a time, at base's size (d 512, d_ff 2048, N 6, V 37000)."""
    d, f, n_units, layers = 512, 2048, 6 * 2 + 6 * 3, 12
    base = paper_model(ModelConfig(), 37_000)
    assert closed_form(base) == 63_082_496

    def count(**kw):
        return closed_form(paper_model(ModelConfig(**kw), 37_000))

    for kind in ("gelu", "swish"):  # the activation alone
        assert count(ffn=kind) == 63_082_496
    for kind in ("glu", "bilinear", "geglu", "reglu", "swiglu"):  # + V and its bias, each FFN
        assert count(ffn=kind) == 63_082_496 + layers * (d * f + f)
    assert count(norm_type="rms") == 63_082_496 - n_units * d  # no bias a norm
    assert count(norm="pre", norm_type="rms") == 63_082_496 - n_units * d + 2 * d  # final norms: gains
    assert count(tie_embeddings=False) == 63_082_496 + 2 * 37_000 * d
    assert count(positional="rotary") == count(positional="none") == 63_082_496
    # a gated FFN at 2/3 of ReLU's d_ff (1365): ReLU's parameters within 0.01%
    gated = count(ffn="swiglu", d_ff=1365)
    assert gated - 63_082_496 == layers * ((3 * d * 1365 + 2 * 1365 + d) - (2 * d * f + f + d)) == 2_040
    assert meta_count(paper_model(ModelConfig(ffn="swiglu", d_ff=1365), 37_000)) == gated


def test_params_table_names_a_rows_components(tmp_path, capsys):
    (tmp_path / "swiglu.yaml").write_text(
        "defaults:\n  - base\n  - _self_\nname: swiglu\nffn: swiglu\nd_ff: 1365\nnorm_type: rms\n"
        "positional: rotary\ntie_embeddings: false\n"
    )
    assert main(["params", "--conf", str(tmp_path), "--rows", "base,swiglu"]) == 0
    out = capsys.readouterr().out
    assert "| base | 6 | 512 | 2048 | 8 | 64 | 64 | sinusoidal | 63.08 |" in out
    # 63,082,496 + 2,040 (gated at 1365) - 30 x 512 (RMSNorm) + 2 x 37,000 x 512 (untied) = 100,957,176
    assert "| swiglu | 6 | 512 | 1365 | 8 | 64 | 64 | rotary, RMSNorm, swiglu FFN, untied | 100.96 |" in out
