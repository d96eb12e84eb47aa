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
