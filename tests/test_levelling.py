"""The step rule of the Multi30k Table 3 protocol (ablate/report/levelling.py), on hand-made curves."""

from __future__ import annotations

import pytest

from ablate.report.levelling import Rule, levelled_step, main, read_curve

CURVE = [(1000, 10.0), (1500, 9.0), (2000, 8.5), (2500, 8.6), (3000, 8.4), (4000, 8.3)]


def test_threshold_is_the_compound_of_one_percent_per_ten_percent():
    # ln 1.5 / ln 1.1 = 4.25416; 1.01 ** 4.25416 = exp(4.25416 * 0.00995033) = 1.043239
    assert Rule().threshold == pytest.approx(1.043239, abs=1e-6)
    assert Rule(horizon=1.1).threshold == pytest.approx(1.01)


def test_first_evaluation_within_the_threshold_of_its_horizon():
    # 1000: 10 / best up to 1500 (9.0) = 1.111; 1500: 9.0 / best up to 2250 (8.5) = 1.059;
    # 2000: 8.5 / best up to 3000 (8.4) = 1.0119 <= 1.0432
    assert levelled_step(CURVE, Rule()) == 2000


def test_a_noisy_high_point_does_not_make_the_curve_look_flat():
    # falling 10% per 500 steps; at 3000 (1.5 x 2000) a high point equal to 2000's value. Comparing the value
    # at s with the value at 1.5 s would call 2000 levelled (ratio 1); best-so-far sees 2500's drop.
    noisy = [(s, 10.0 * 0.9 ** ((s - 1000) / 500)) for s in range(1000, 4001, 500)]
    noisy[4] = (3000, noisy[2][1])
    assert levelled_step(noisy, Rule()) is None
    falling = [(s, 100.0 / s**0.5) for s in range(1000, 20001, 500)]  # 18% better per 1.5x: never flat
    assert levelled_step(falling, Rule()) is None


def test_no_answer_before_start_or_beyond_the_curve():
    assert levelled_step(CURVE, Rule(start=3000)) is None  # 3000 needs a point at 4500 or later
    assert levelled_step(CURVE + [(4500, 8.2)], Rule(start=3000)) == 3000  # 8.4 / 8.2 = 1.024
    assert levelled_step(CURVE[:3], Rule()) is None  # 2000 needs a point at 3000 or later


def test_reads_dev_ppl_from_curves_and_names_a_bad_line(tmp_path, capsys):
    f = tmp_path / "curves.jsonl"
    f.write_text('{"step": 10, "train_loss": 9.1}\n{"step": 1000, "dev_ppl": 10.0}\n')
    assert read_curve(tmp_path) == [(1000, 10.0)]
    f.write_text('{"curve": "a", "step": 1, "dev_ppl": 8.0}\n{"curve": "b", "step": 10, "dev_ppl": 9.0}\n')
    assert read_curve(f, "b") == [(10, 9.0)]
    f.write_text('{"step": 1000, "dev_ppl": 10.0}\n{"step": 15\n')
    assert main([str(f)]) == 2
    assert f"{f}:2: not JSON" in capsys.readouterr().err


def test_the_multi30k_table3_recipe_trains_to_where_its_base_curve_levels_off():
    # the recipe's step count is the rule applied to base's recorded curve, not a number typed in
    from pathlib import Path

    from omegaconf import OmegaConf

    root = Path(__file__).resolve().parents[1]
    curve = read_curve(root / "docs" / "data" / "table3_multi30k_base_curves.jsonl", "protocol")
    recipe = OmegaConf.load(root / "conf" / "recipe" / "multi30k_table3.yaml")
    assert levelled_step(curve, Rule()) == recipe.base.train_steps


@pytest.mark.parametrize(
    "text,curve,message",
    [
        ('{"step": 1000, "dev_ppl": NaN}\n', None, ":1: dev_ppl nan at step 1000: the run diverged"),
        ('{"dev_ppl": 9.0}\n', None, ":1: not an object with an integer step and a dev_ppl"),
        ("[1, 2]\n", None, ":1: not an object with an integer step and a dev_ppl"),
        ('{"curve": "a", "step": 1, "dev_ppl": 8.0}\n{"curve": "b", "step": 1, "dev_ppl": 9.0}\n', None,
         ": several curves (a, b): choose one with --curve"),
        ('{"curve": "a", "step": 1, "dev_ppl": 8.0}\n', "ab", ': no dev_ppl lines with "curve": "ab"'),
    ],
)  # fmt: skip
def test_bad_curves_are_one_line_errors_naming_the_file(tmp_path, capsys, text, curve, message):
    f = tmp_path / "curves.jsonl"
    f.write_text(text)
    assert main([str(f), *(["--curve", curve] if curve else [])]) == 2
    assert capsys.readouterr().err == f"error: {f}{message}\n"


def test_more_and_horizon_must_make_a_threshold(capsys):
    for flag, value in (("--more", "0"), ("--horizon", "1")):
        with pytest.raises(SystemExit):
            main(["curves.jsonl", flag, value])
        assert "must be above" in capsys.readouterr().err
