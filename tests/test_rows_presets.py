"""Every row keeps its meaning under every preset: each row file in conf/model/ x each recipe x each scale,
and x each experiment, either trains a model that differs from that preset's own base exactly where the
paper's row differs from the paper's base (by the paper's ratio or value), or is refused with one line
naming the row, the preset and the key. New row, recipe, scale or experiment files are covered as they are.

The expected change of a paper row comes from the paper's Table 3 (ablate/report/paper_table3.csv), not from
the row files; a user's row (not in the paper) is held to what its file changes from base.
"""

from dataclasses import replace
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from ablate import paper
from ablate.config import (
    ConfigError,
    ModelConfig,
    effective_model,
    row_arch,
    to_dataclass,
    total_steps,
    validate,
)
from ablate.run import register_configs  # noqa: F401 - registers the schema

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
ROWS = sorted(p.stem for p in (CONF / "model").glob("*.yaml"))
RECIPES = sorted(p.stem for p in (CONF / "recipe").glob("*.yaml"))
SCALES = sorted(p.stem for p in (CONF / "scale").glob("*.yaml"))
EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))
PRESETS = [(f"recipe={r}", f"scale={s}") for r in RECIPES for s in SCALES] + [
    (f"experiment={e}",) for e in EXPERIMENTS
]
# Where the product promises Table 3: every paper row is accepted, none refused.
TABLE3_PRESETS = [
    ("recipe=paper", "scale=paper"),
    ("recipe=cpu", "scale=cpu"),
    ("recipe=cpu_table3", "scale=cpu_table3"),
]

SIZES = ("n_layers", "n_dec_layers", "d_model", "d_ff", "train_steps")
ROW_TO_EFFECTIVE = {"decoder_layers": "n_dec_layers"}
_PAPER_KEYS = ("n_layers", "d_model", "d_ff", "n_heads", "d_k", "d_v", "dropout", "label_smoothing",
               "train_steps", "positional")  # fmt: skip


def _paper_rows() -> dict[str, dict]:
    return {name: {k: r.model_dict()[k] for k in _PAPER_KEYS} for name, r in paper.table3().items()}


PAPER = _paper_rows()


def _compose(*overrides: str):
    return to_dataclass(compose("config", overrides=list(overrides)))


@pytest.fixture(scope="module")
def composed():
    """Each row file and each preset composed once, as the command line composes them."""
    with initialize_config_dir(str(CONF), version_base="1.3"):
        rows = {r: _compose(f"model={r}").model for r in ROWS}
        presets = {p: _compose(*p) for p in PRESETS}
        # the row that sets the most keys, composed with each preset on one command line
        with_big = {p: _compose(*p, "model=big").model for p in PRESETS}
    return rows, presets, with_big


def _change(row: str, model: ModelConfig) -> dict[str, object]:
    """What the row changes from base: the paper's Table 3, or a user's row file. N is both stacks' depth
    unless the row gives the decoder its own."""
    if row in PAPER:
        out = {k: v for k, v in PAPER[row].items() if v != PAPER["base"][k]}
    else:
        base = ModelConfig()
        out = {
            ROW_TO_EFFECTIVE.get(k, k): getattr(model, k)
            for k in vars(base)
            if k not in ("name", "group", "explicit") and getattr(model, k) != getattr(base, k)
        }
    if "n_layers" in out:
        out.setdefault("n_dec_layers", out["n_layers"])
    return out


def _measures(cfg) -> dict[str, object]:
    m = effective_model(cfg, 1000)
    out = {k: v for k, v in vars(m).items() if k != "vocab_size"}
    out["label_smoothing"] = row_arch(cfg).label_smoothing
    out["train_steps"] = total_steps(cfg)
    return out


def _check_row(row: str, change: dict, mine: dict, theirs: dict, where: str) -> None:
    differs = {k for k in mine if mine[k] != theirs[k]}
    assert differs == set(change), (
        f"{row} under {where}: differs from base in {differs}, the paper in {set(change)}"
    )
    paper_base = PAPER["base"]
    for key, value in change.items():
        got, base = mine[key], theirs[key]
        # sizes by the paper's ratio; h too where the row keeps the head size (big: more heads of base's size)
        head_ratio = "d_k" not in change and key == "n_heads"
        if key in SIZES or head_ratio or (key in ("d_k", "d_v") and "n_heads" not in change):
            ref = paper_base.get(key) or paper_base["n_layers"]  # n_dec_layers: a ratio of N
            ratio = value / ref
            assert (got > base) == (ratio > 1), f"{row} under {where}: {key} {base} -> {got}, paper x{ratio}"
            assert abs(got - ratio * base) <= 1 + 0.5 * ratio, (
                f"{row} under {where}: {key} {got}, base {base}"
            )
        elif key in (
            "d_k",
            "d_v",
        ):  # the row's heads split d_model as the paper's row splits it (A: h*d_k = d_model)
            share = value * change["n_heads"] / change.get("d_model", paper_base["d_model"])
            assert abs(got * mine["n_heads"] - share * mine["d_model"]) < mine["n_heads"], (
                f"{row} under {where}"
            )
        else:  # h, P_drop, eps_ls, positions, norm: the row's own value
            assert got == value, f"{row} under {where}: {key}={got}, the row's value is {value}"


@pytest.mark.parametrize("preset", PRESETS, ids=" ".join)
def test_every_row_keeps_its_meaning(composed, preset):
    rows, presets, _ = composed
    cfg = presets[preset]
    validate(cfg)  # the preset's own base is a valid model
    theirs = _measures(replace(cfg, model=ModelConfig()))
    refused = []
    for row, model in rows.items():
        if row == "base":
            continue
        c = replace(cfg, model=replace(model, name=row))
        try:
            validate(c)
        except ConfigError as e:
            msg = str(e)
            assert "\n" not in msg and f"row {row} under recipe={cfg.recipe} scale={cfg.scale.name}" in msg
            assert any(f"model.{k}=" in msg for k in vars(model)), msg
            refused.append(row)
            continue
        _check_row(row, _change(row, model), _measures(c), theirs, " ".join(preset))
    if preset in TABLE3_PRESETS:
        assert not [r for r in refused if r in PAPER], f"Table 3 rows refused under {preset}: {refused}"


@pytest.mark.parametrize("preset", PRESETS, ids=" ".join)
def test_presets_leave_rows_alone(composed, preset):
    """A preset composed on the command line with a row keeps every key of the row file (the row is merged
    first; a recipe, scale or experiment that set model keys would overwrite it)."""
    rows, _, with_big = composed
    got, want = with_big[preset], rows["big"]
    label_only = {k for k in vars(want) if getattr(got, k) != getattr(want, k)} <= {"name", "group"}
    assert label_only, f"{' '.join(preset)} changes row big: {got} instead of {want}"


def test_multi30k_30min_trains_three_different_rows():
    """-m model=A1,D1,D2 under the 30-minute Multi30k preset: three models, each with its row's values."""
    with initialize_config_dir(str(CONF), version_base="1.3"):
        a1, d1, d2 = (_compose("experiment=multi30k_30min", f"model={r}") for r in ("A1", "D1", "D2"))
    m = [effective_model(c, 6000) for c in (a1, d1, d2)]
    assert (m[0].n_heads, m[0].d_k, m[0].d_model) == (1, 256, 256)
    assert (m[1].dropout, m[2].dropout) == (0.0, 0.2)
    assert len({repr(x) for x in m}) == 3


def test_command_line_wins():
    """model.KEY=... given on the command line is taken as it is (ablate.run marks it explicit)."""
    from ablate.jobs.sweep import explicit_model_keys

    assert explicit_model_keys(["model=A1", "model.dropout=0.3", "++model.d_ff=64", "seed=2"]) == [
        "d_ff",
        "dropout",
    ]
    with initialize_config_dir(str(CONF), version_base="1.3"):
        cfg = _compose("experiment=multi30k_30min", "model=A2")
    with pytest.raises(ConfigError, match="row A2 under recipe=multi30k_30min scale=paper: model.n_heads=4"):
        validate(cfg)
    cfg.model.explicit = ["n_heads"]
    cfg.model.explicit = ["d_k", "d_v", "n_heads"]
    cfg.model.d_k = cfg.model.d_v = 64
    validate(cfg)  # the user asked for base's heads: granted
    cfg.model.d_model, cfg.model.explicit = 128, ["d_model", "d_k", "d_v", "n_heads"]
    cfg.model.d_k = cfg.model.d_v = 32
    m = effective_model(cfg, 6000)
    assert (m.d_model, m.d_k, m.n_heads) == (128, 32, 4)  # not 128 x 256/512


# Each group means one thing: the keys its files may set (experiment/ alone cuts across groups).
GROUP_KEYS = {
    "model": None,  # a row: ModelConfig's keys (checked by the schema)
    "scale": {"name", "width", "depth", "steps"},
    "recipe": {"recipe", "base", "train", "schedule", "data", "decode", "defaults"},
    "trainer": {"accelerator", "devices", "num_nodes", "precision", "strategy", "progress_bar", "threads"},
}


@pytest.mark.parametrize("group", [g for g, keys in GROUP_KEYS.items() if keys])
def test_each_group_sets_only_its_own_keys(group):
    from omegaconf import OmegaConf

    for path in sorted((CONF / group).glob("*.yaml")):
        keys = set(OmegaConf.load(path).keys())
        assert keys <= GROUP_KEYS[group], (
            f"{path.name} sets {sorted(keys - GROUP_KEYS[group])} outside {group}/"
        )


def test_hardware_comes_from_trainer_alone():
    """A recipe or scale cannot pick the device: `trainer=cpu` is the CPU wherever a GPU exists, and no other
    group overrides it (the trainer group is merged after them)."""
    with initialize_config_dir(str(CONF), version_base="1.3"):
        for preset in PRESETS[:: max(1, len(PRESETS) // 8)]:
            c = _compose(*preset, "trainer=cpu") if preset[0].startswith("recipe") else None
            if c is not None:
                assert c.trainer.accelerator == "cpu", preset
        assert _compose().trainer.accelerator == "auto"


USER_MODEL = ROOT / "tests" / "user_model"
USER_ROWS = sorted(p.stem for p in (USER_MODEL / "conf" / "model").glob("*.yaml"))
USER_SCALES = SCALES + sorted(p.stem for p in (USER_MODEL / "conf" / "scale").glob("*.yaml"))


@pytest.fixture(scope="module")
def user_rows():
    """The researcher's rows (tests/user_model) composed from their search path, and its row file's keys."""
    import sys

    import yaml

    sys.path.insert(0, str(USER_MODEL))  # its model loads as `gru_model`
    search = f"hydra.searchpath=[file://{USER_MODEL}/conf]"
    with initialize_config_dir(str(CONF), version_base="1.3"):
        rows = {r: _compose(search, f"model={r}").model for r in USER_ROWS}
        presets = {
            (r, s): _compose(search, f"recipe={r}", f"scale={s}") for r in RECIPES for s in USER_SCALES
        }
    files = {r: yaml.safe_load((USER_MODEL / "conf" / "model" / f"{r}.yaml").read_text()) for r in USER_ROWS}
    return rows, presets, files


@pytest.mark.parametrize("recipe", RECIPES)
def test_a_researchers_rows_keep_their_meaning_or_are_refused_naming_the_key(user_rows, recipe):
    """Each row of the researcher's model under each recipe and scale either builds its base's model
    changed in exactly the keys its file's `args` changes (sizes by the scale's ratio, the rest as given),
    or is refused in one line naming the row, the preset and the key."""
    from ablate.config.arch import arch_of, own_values

    rows, presets, files = user_rows
    base = rows["gru"]
    arch = arch_of(base.arch)
    for scale in USER_SCALES:
        cfg = presets[(recipe, scale)]
        theirs = own_values(replace(cfg, model=base))
        for row, model in rows.items():
            c = replace(cfg, model=model)
            args = (files[row] or {}).get("args") or {}
            try:
                validate(c)
            except ConfigError as e:
                assert f"row {row} under recipe={recipe} scale={scale}: model.args." in str(e)
                assert "\n" not in str(e) and any(f"model.args.{k}=" in str(e) for k in args)
                continue
            mine = own_values(c)
            assert {k for k in mine if mine[k] != theirs[k]} == set(args), (row, recipe, scale)
            for k, v in args.items():
                ratio = c.scale.width if k in arch.widths else c.scale.depth if k in arch.depths else None
                assert mine[k] == (v if ratio is None else max(1, round(v * ratio))), (row, k)
