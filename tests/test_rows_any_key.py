"""A row states any key of the run (docs/study.md, "A row of any key"): the model's, the criterion's
(`criterion_args`) and the run's (`run:`: optimizer, schedule, data, the task's keys, decoding). Each is
applied over the recipe, loses to the command line, enters the run's identity and the plan line, and a
key nothing reads is refused; a command-line sweep of such keys keeps each setting as a row of the
report. Tried from a fresh study (`ablate.new`), as a researcher would."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_study import clean_env

ROWS = {
    "warm": "run:\n  schedule: {warmup_steps: 3}\n",
    "tenth": "run:\n  task_cfg: {train_pairs: 200}\n",
    "sgd": "run:\n  optim: {_target_: torch.optim.SGD, momentum: 0.9}\n  schedule: {scale: 5.0}\n",
    "cosine": "run:\n  schedule: {_target_: ablate.nn.optim.Cosine}\n",
    "beam1": "run:\n  decode: {beam: 1}\n",
}


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> Path:
    from ablate.new import main

    root = tmp_path_factory.mktemp("s") / "keys"
    assert main([str(root)]) == 0
    for name, body in ROWS.items():
        head = f"defaults: [base, _self_]\nname: {name}\ngroup: {name}\n"
        (root / "conf" / "model" / f"{name}.yaml").write_text(head + body)
    return root


def ablate(study: Path, *args: str, ok: int = 0) -> subprocess.CompletedProcess:
    env = clean_env(study.parent) | {"ABLATE_CACHE": str(study.parent / "cache"), "WANDB_MODE": "disabled"}
    flags = [a for a in args if a in ("-m", "--plan")]
    cmd = [sys.executable, "-m", "ablate.run", *flags[:1], "experiment=keys", "recipe=tiny", "scale=tiny",
           "logger=none", *(a for a in args if a != "-m")]  # fmt: skip
    p = subprocess.run(cmd, cwd=study, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == ok, (cmd, p.stdout[-2000:], p.stderr[-3000:])
    return p


def plan_lines(p: subprocess.CompletedProcess) -> dict[str, str]:
    return {
        m.group(1): line for line in p.stdout.splitlines() if (m := re.match(r"\[plan\] (\S+) s1 ", line))
    }


def test_each_row_of_another_key_plans_with_its_key_named_and_an_id_of_its_own(study):
    lines = plan_lines(ablate(study, "-m", f"model=base,{','.join(ROWS)}", "--plan"))
    assert set(lines) == {"base", *ROWS}
    assert "sets schedule.warmup_steps=3" in lines["warm"]
    assert "sets task_cfg.train_pairs=200" in lines["tenth"]
    assert "sets optim={'_target_': 'torch.optim.SGD', 'momentum': 0.9} schedule.scale=5.0" in lines["sgd"]
    assert "sets decode.beam=1" in lines["beam1"]
    ids = {re.search(r"\b(\w+-[0-9a-f]{12}-s1)\b", line).group(1).split("-")[1] for line in lines.values()}
    assert len(ids) == len(lines)  # every row names a run of its own


def test_a_command_line_sweep_of_the_optimizer_schedule_and_components_plans_each_key(study):
    p = ablate(study, "-m", "optim=sgd,adamw", "schedule=linear,constant", "--plan")
    lines = [line for line in p.stdout.splitlines() if line.startswith("[plan] base s1")]
    assert len(lines) == 4 and len({line.split("  varies ")[1].split("  ")[0] for line in lines}) == 4
    assert any("varies optim=sgd schedule=constant" in line for line in lines)
    one = ablate(study, "model.ffn=swiglu", "model.norm_type=rms", "model.positional=rotary",
                 "model.tie_embeddings=false", "--plan")  # fmt: skip
    (line,) = [x for x in one.stdout.splitlines() if x.startswith("[plan] base s1")]
    for key in (
        "model.ffn=swiglu",
        "model.norm_type=rms",
        "model.positional=rotary",
        "model.tie_embeddings=False",
    ):
        assert key in line, line


@pytest.mark.parametrize(
    ("override", "says"),
    [
        ("+train.optimizer=sgd", "train.optimizer: not a key of the run"),
        (
            "+model.tie_embedding=false",
            "model.tie_embedding: not a key of the run (did you mean model.tie_embeddings",
        ),
        ("+decode.beams=2", "decode.beams: not a key of the run (did you mean decode.beam?)"),
    ],
)
def test_a_key_nothing_reads_is_refused_with_the_nearest_known(study, override, says):
    p = ablate(study, override, "--plan", ok=2)
    assert says in p.stdout + p.stderr


def test_a_rows_keys_go_over_the_recipe_and_under_the_command_line():
    from dataclasses import replace

    from ablate.config import RunConfig
    from ablate.config.schema import PAPER_SCHEDULE
    from ablate.jobs.sweep import apply_row_run

    recipe = {**PAPER_SCHEDULE, "warmup_steps": 100, "scale": 0.3}
    cfg = RunConfig(schedule=recipe)
    row = {"schedule": {"warmup_steps": 7}, "data": {"vocab_size": 500}}
    got = apply_row_run(replace(cfg, model=replace(cfg.model, run=row)), [])
    assert (got.schedule["warmup_steps"], got.schedule["scale"], got.data.vocab_size) == (7, 0.3, 500)
    given = apply_row_run(replace(cfg, model=replace(cfg.model, run=row)), ["schedule.warmup_steps=9"])
    assert given.schedule["warmup_steps"] == 100  # the command line's value is already in the config
    chosen = apply_row_run(replace(cfg, model=replace(cfg.model, run=row)), ["schedule=cosine"])
    assert chosen.schedule == recipe and chosen.data.vocab_size == 500
    other = {"schedule": {"_target_": "ablate.nn.optim.Cosine", "peak": 0.01}}
    cos = apply_row_run(replace(cfg, model=replace(cfg.model, run=other)), [])
    assert cos.schedule == {"_target_": "ablate.nn.optim.Cosine", "_partial_": True, "warmup_steps": 100,
                            "scale": 0.3, "peak": 0.01}  # fmt: skip  # the recipe's warmup goes on
    sgd = {"optim": {"_target_": "torch.optim.SGD", "momentum": 0.9}}
    got = apply_row_run(replace(cfg, model=replace(cfg.model, run=sgd)), [])
    assert "betas" not in got.optim and got.optim["momentum"] == 0.9  # Adam's keys stay with Adam


def test_a_sweep_of_a_schedule_key_reports_each_setting_as_a_row(study):
    results = study / "results"
    ablate(study, "-m", "schedule.warmup_steps=3,8", "train.max_steps=20", "seed=1", "trainer.threads=1")
    env = clean_env(study.parent) | {"ABLATE_CACHE": str(study.parent / "cache")}
    p = subprocess.run([sys.executable, "-m", "ablate.report", "--out", str(study / "t.md")], cwd=study,
                       env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    summary = p.stdout.split("## Table")[0]
    for value in (3, 8):  # the key the sweep varied names each row; the one both were given, the table
        keys = f"schedule.warmup_steps={value}"
        row = f"| base {keys} | {keys} |"
        assert row in summary, summary
    assert "Every run was given `train.max_steps=20` beyond its row." in summary
    assert "duplicate" not in p.stdout + p.stderr
    assert len(list(results.glob("base/*/record.json"))) == 2
    assert os.path.exists(study / "t.md")
