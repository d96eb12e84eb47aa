"""The optimizer and the schedule groups (conf/optim/, conf/schedule/, ablate/nn/optim.py): every file of
each group builds and checks, each schedule gives its formula's rates (worked out by hand), the paper's
keep the paper's numbers, and a run of each optimizer and each schedule stopped mid-training resumes to
the files of the run nothing stopped."""

from __future__ import annotations

import json
import math
from functools import partial
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

from ablate.config import ConfigError, register_configs, to_dataclass, validate
from ablate.config.targets import build, check, node
from ablate.nn.optim import Constant, Cosine, InverseSqrt, Linear, build_optimizer, inverse_sqrt_lr

ROOT = Path(__file__).resolve().parents[1]
OPTIMS = sorted(p.stem for p in (ROOT / "conf" / "optim").glob("*.yaml"))
SCHEDULES = sorted(p.stem for p in (ROOT / "conf" / "schedule").glob("*.yaml"))


def cfg(*overrides: str):
    register_configs()
    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        return to_dataclass(compose("config", overrides=["logger=none", *overrides]))


@pytest.mark.parametrize("optim", OPTIMS)
@pytest.mark.parametrize("schedule", SCHEDULES)
def test_every_optimizer_and_schedule_file_checks_and_builds_under_the_default_recipe(optim, schedule):
    c = cfg(f"optim={optim}", f"schedule={schedule}")
    validate(c)
    opt = build_optimizer(build(c, "optim"), torch.nn.Linear(3, 2).parameters())
    assert type(opt) is check(c, "optim") and opt.param_groups[0]["lr"] == 1.0  # the schedule's rate
    sched = build(c, "schedule", d_model=128, total_steps=600)
    rates = [sched(s) for s in range(1, 601)]
    assert all(r >= 0 and math.isfinite(r) for r in rates) and max(rates) > 0


def test_the_paper_s_optimizer_and_schedule_are_the_defaults():
    c = cfg("recipe=paper", "scale=paper")
    assert node(c, "optim") == {
        "_target_": "torch.optim.Adam",
        "_partial_": True,
        "betas": [0.9, 0.98],
        "eps": 1e-9,
    }
    opt = build_optimizer(build(c, "optim"), torch.nn.Linear(3, 2).parameters())
    assert opt.defaults["betas"] == (0.9, 0.98) and opt.defaults["eps"] == 1e-9
    sched = build(c, "schedule", d_model=512, total_steps=100_000)
    assert isinstance(sched, InverseSqrt) and sched.warmup_steps == 4000
    assert sched(4000) == pytest.approx(512**-0.5 * 4000**-0.5, rel=1e-12)  # equation 3's peak


def test_each_schedule_gives_its_formulas_rates():
    kw = dict(d_model=64, total_steps=110, warmup_steps=10)
    peak = 64**-0.5 * 10**-0.5  # equation 3 at the end of the warmup: the default peak
    lin = Linear(**kw)
    assert lin.peak == pytest.approx(peak)
    assert lin(5) == pytest.approx(peak / 2) and lin(10) == pytest.approx(peak)
    assert lin(60) == pytest.approx(peak / 2) and lin(110) == pytest.approx(0.0)
    assert Linear(**kw, end=0.1)(110) == pytest.approx(0.1 * peak)
    assert Linear(**kw)(60, progress=0.75) == pytest.approx(peak / 4)  # the time budget further along
    const = Constant(**kw, peak=0.01)
    assert [const(s) for s in (1, 5, 10, 11, 110)] == pytest.approx([0.001, 0.005, 0.01, 0.01, 0.01])
    assert Constant(d_model=64, total_steps=110, warmup_steps=0, peak=0.02)(1) == 0.02  # no warmup
    cos = Cosine(**kw, peak=1.0)
    assert cos(60) == pytest.approx(0.5) and cos(110) == pytest.approx(0.0)
    assert Cosine(d_model=64, total_steps=100, warmup_steps=0, peak=1.0)(50) == pytest.approx(0.5)
    scaled = Cosine(**kw, scale=0.5)
    assert scaled.peak == pytest.approx(0.5 * peak)  # scale multiplies equation 3's peak
    inv = InverseSqrt(**kw, scale=0.3)
    assert inv(40) == pytest.approx(0.3 * inverse_sqrt_lr(40, 64, 10))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["schedule=constant", "schedule.warmup_steps=0"], "schedule.peak: needed"),
        (["schedule=linear", "+schedule.d_model=4"], "schedule.d_model: set by the run"),
        (["optim=adamw", "+optim.weight_decy=0.1"], "did you mean weight_decay"),
        (["optim=sgd", "+optim.lr=0.1"], "optim.lr: set by the run"),
        (["optim._target_=os.system"], "not a class"),
    ],
)
def test_a_bad_node_is_one_line_naming_its_key(overrides, message):
    with pytest.raises(ConfigError, match=message) as e:
        validate(cfg(*overrides))
    assert "\n" not in str(e.value)


def test_a_researchers_optimizer_and_schedule_come_by_their_target():
    # a study's own file (conf/optim/rmsprop.yaml) is the usual way; on the command line, Adam's keys
    # leave with their class
    overrides = ["optim._target_=torch.optim.RMSprop", "~optim.betas", "~optim.eps", "+optim.alpha=0.9"]
    c = cfg(*overrides, "schedule=constant", "schedule.peak=0.01")
    validate(c)
    opt = build_optimizer(build(c, "optim"), torch.nn.Linear(3, 2).parameters())
    assert isinstance(opt, torch.optim.RMSprop) and opt.defaults["alpha"] == 0.9
    assert isinstance(build(c, "optim"), partial)


# A run of each optimizer and each schedule (paired so that every file of both groups trains), stopped by
# Ctrl-C between two checkpoints, resumes to the uninterrupted run's files: their states (momentum
# buffers, Adafactor's factored moments) and the schedule's position travel in the checkpoint.
PAIRS = list(zip(OPTIMS, SCHEDULES * len(OPTIMS), strict=False))
RESUME = [
    pytest.param(o, s, marks=() if (o, s) == ("sgd", "linear") else pytest.mark.slow, id=f"{o}-{s}")
    for o, s in PAIRS
]


@pytest.mark.parametrize(("optim", "schedule"), RESUME)
def test_every_optimizer_and_schedule_resumes_exactly_after_a_stop(tmp_path, optim, schedule):
    from test_stop_anywhere import STOP_ENV, assert_same, run, run_dir, what_it_left

    extra = [f"optim={optim}", f"schedule={schedule}", "schedule.warmup_steps=3"]
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    whole.mkdir(), stopped.mkdir()
    p = run(whole, *extra)
    assert p.returncode == 0, p.stderr[-3000:]
    s = run(stopped, *extra, **{STOP_ENV: "step@6:SIGINT"})
    assert s.returncode == 130 and "injected fault" in s.stdout, s.stderr[-3000:]
    again = run(stopped, *extra)
    assert again.returncode == 0, again.stderr[-3000:]
    assert_same(what_it_left(run_dir(whole)), what_it_left(run_dir(stopped)))


def test_a_run_of_the_new_components_and_adamw_resumes_exactly_after_a_stop(tmp_path):
    """SwiGLU, rotary positions and AdamW together: Ctrl-C at step 6, the same command again, and the files
    the uninterrupted run leaves (its weights, curves, hypotheses and metrics)."""
    from test_stop_anywhere import STOP_ENV, assert_same, run, run_dir, what_it_left

    extra = ["model.ffn=swiglu", "model.positional=rotary", "optim=adamw"]
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    whole.mkdir(), stopped.mkdir()
    assert run(whole, *extra).returncode == 0
    s = run(stopped, *extra, **{STOP_ENV: "step@6:SIGINT"})
    assert s.returncode == 130 and "injected fault" in s.stdout, s.stderr[-3000:]
    assert run(stopped, *extra).returncode == 0
    assert_same(what_it_left(run_dir(whole)), what_it_left(run_dir(stopped)))
    assert json.loads((run_dir(whole) / "record.json").read_text())["model_effective"]["ffn"] == "swiglu"
