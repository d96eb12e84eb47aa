"""The experiment configs encode the paper's recipes (composed as the CLI would)."""

from pathlib import Path

from hydra import compose, initialize_config_dir

from ablate.config import accumulation, to_dataclass, total_steps
from ablate.run import register_configs  # noqa: F401 - registers the schema

CONF = str(Path(__file__).resolve().parents[1] / "conf")


def cfg(*overrides):
    with initialize_config_dir(CONF, version_base="1.3"):
        return to_dataclass(compose("config", overrides=list(overrides)))


def test_table2_base_is_the_papers_recipe():
    c = cfg("experiment=table2_base")
    assert (c.model.name, c.data.name, c.scale.name, c.recipe) == ("base", "wmt14_en_de", "paper", "paper")
    assert (c.trainer.accelerator, c.trainer.precision) == ("gpu", "bf16-mixed")
    assert total_steps(c) == 100_000 and c.schedule["warmup_steps"] == 4000 and c.data.vocab_size == 37_000
    assert c.train.average_last == 5 and c.decode.beam == 4 and c.decode.alpha == 0.6
    assert (c.decode.max_len_a, c.decode.max_len_b) == (1.0, 50)
    # ~25,000 target tokens per step on 1 or 8 devices
    assert accumulation(c) * c.train.max_tokens >= 25_000
    c.trainer.devices = 8
    assert accumulation(c) == 1 and 8 * c.train.max_tokens >= 25_000


def test_table2_big():
    c = cfg("experiment=table2_big")
    assert (c.model.d_model, c.model.d_ff, c.model.n_heads, c.model.dropout) == (1024, 4096, 16, 0.3)
    assert total_steps(c) == 300_000 and c.train.average_last == 20


def test_cpu_table3_keeps_what_rows_vary():
    from ablate.config import effective_model

    a4 = effective_model(cfg("scale=cpu_table3", "recipe=cpu_table3", "model=A4"), 500)
    assert (a4.n_heads, a4.d_k, a4.d_model) == (32, 2, 64)  # h kept, d_k scaled with d_model
    c1, c3 = (
        effective_model(cfg("scale=cpu_table3", "recipe=cpu_table3", f"model={r}"), 500) for r in ("C1", "C3")
    )
    assert (c1.n_layers, c3.n_layers) == (1, 4)  # N 2 and 8 -> 1 and 4: the ratio kept
    big = cfg("scale=cpu_table3", "recipe=cpu_table3", "model=big")
    assert total_steps(big) == 3 * total_steps(cfg("scale=cpu_table3", "recipe=cpu_table3"))


def test_multi30k_race_presets():
    from ablate.config import effective_model

    hour = cfg("experiment=multi30k_1h")
    m = effective_model(hour, 8000)
    assert (m.d_model, m.d_ff, m.n_layers, m.n_heads, m.d_k, m.d_v) == (256, 1024, 3, 4, 64, 64)
    assert (m.dropout, total_steps(hour), hour.schedule["_target_"]) == (
        0.2,
        4000,
        "ablate.nn.optim.InverseSqrt",
    )
    half = cfg("experiment=multi30k_30min")
    m30 = effective_model(half, 6000)
    # a smaller model (N 2, d_ff 512); dropout, batches, vocabulary and the (named, non-paper)
    # time-budgeted schedule differ
    assert (m30.d_model, m30.d_ff, m30.n_layers, m30.n_dec_layers, m30.n_heads, m30.d_k) == (
        256,
        512,
        2,
        2,
        4,
        64,
    )
    assert (m30.dropout, half.data.vocab_size, half.schedule["_target_"]) == (
        0.1,
        6000,
        "ablate.nn.optim.Cosine",
    )
    assert (half.train.budget_minutes, total_steps(half)) == (29.5, 8000)  # the step cap
    assert (half.schedule["peak"], half.schedule["warmup_steps"], half.train.batch_tokens) == (
        1.5e-3,
        400,
        1024,
    )
    assert (half.train.max_tokens, half.train.checkpoint_every) == (1024, 200)
    assert half.train.average_last == 5
    # 55 minutes: the same model and recipe, a longer clock budget, more dropout (over ~28 epochs)
    long = cfg("experiment=multi30k_55min")
    m55 = effective_model(long, 6000)
    assert (m55.d_model, m55.d_ff, m55.n_layers, m55.n_heads, m55.dropout) == (256, 512, 2, 4, 0.2)
    assert (long.data.vocab_size, long.schedule["_target_"], long.train.batch_tokens) == (
        6000,
        "ablate.nn.optim.Cosine",
        1024,
    )
    assert (long.train.budget_minutes, total_steps(long), long.train.average_last) == (54.5, 16000, 5)
    assert long.trainer.precision == "32-true"
    # On a CPU with bf16 units: the same model and P_drop under bf16-mixed, ~1.6x the updates on a Zen 5,
    # dropout on the attention weights and the ReLU output as well (both still 0 in _55min)
    bf16 = cfg("experiment=multi30k_55min_bf16")
    mb = effective_model(bf16, 6000)
    assert (mb.d_model, mb.d_ff, mb.n_layers, mb.dropout, bf16.trainer.precision) == (
        256,
        512,
        2,
        0.2,
        "bf16-mixed",
    )
    assert (bf16.train.budget_minutes, total_steps(bf16), bf16.train.batch_tokens) == (54.5, 30000, 1024)
    assert (mb.attn_dropout, mb.relu_dropout, m55.attn_dropout, m55.relu_dropout) == (0.1, 0.1, 0.0, 0.0)
