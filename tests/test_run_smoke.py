"""`python -m ablate.run` end to end with the tiny preset: the record's contents, and a second call skips."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

from ablate.config import ModelConfig, RunConfig, ScaleConfig, effective_model
from ablate.nn.model import Transformer, count_parameters

ROOT = Path(__file__).resolve().parents[1]


def run(tmp_path, *overrides):
    env = dict(os.environ, WANDB_MODE="offline", PYTHONUNBUFFERED="1")
    cmd = [
        sys.executable,
        "-m",
        "ablate.run",
        "scale=tiny",
        "recipe=tiny",
        "logger=none",
        f"results_dir={tmp_path}/results",
        f"data.cache_dir={tmp_path}/cache",
        *overrides,
    ]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_smoke_run_writes_a_complete_record(tmp_path):
    p = run(tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    records = list((tmp_path / "results").rglob("record.json"))
    assert len(records) == 1
    rec = json.loads(records[0].read_text())
    assert rec["status"] == "finished" and rec["row"] == "base" and rec["seed"] == 1
    assert rec["run_id"].startswith("base-") and records[0].parent.name == rec["run_id"]
    # tiny preset: 100000 * 0.0002 = 20 steps
    assert rec["steps"] == 20
    # stdout is no terminal here (a pipe, as a SLURM job log or `> log`): plain lines, no carriage return
    assert "\r" not in p.stdout + p.stderr
    steps = [int(x.split()[2].split("/")[0]) for x in p.stdout.splitlines() if x.startswith("[ablate] step ")]
    assert steps == [1 * i for i in range(1, 21)], steps  # every max(1, min(100, 20 // 20)) = 1 steps
    assert "[ablate] step 20/20 (100%)  loss " in p.stdout and " eta 0:00:00" in p.stdout
    m = rec["metrics"]
    assert math.isclose(m["dev_ppl"], math.exp(m["dev_nll_sum"] / m["dev_tokens"]), rel_tol=1e-9)
    assert "tok:13a" in m["dev_bleu_signature"] and 0.0 <= m["dev_bleu"] <= 100.0
    # Parameters: the effective model (d_model 512/16 = 32, N = 1) with the vocabulary the data gave.
    cfg = RunConfig(model=ModelConfig(), scale=ScaleConfig("tiny", 0.0625, 0.1667, 0.0002))
    vocab = rec["model_effective"]["vocab_size"]
    with torch.device("meta"):
        assert rec["params"] == count_parameters(Transformer(effective_model(cfg, vocab)))
    assert rec["model_effective"]["d_model"] == 32 and rec["model_effective"]["n_layers"] == 1
    assert rec["params_paper_scale"] == 63_082_496
    assert rec["config"]["model"]["name"] == "base" and rec["config"]["decode"]["beam"] == 2
    assert rec["tokens_per_s"] > 0 and rec["wall_time_s"] > 0 and rec["versions"]["torch"]
    assert rec["precision"] == "32-true"  # the paper's float32 unless a preset or the user asks otherwise
    # Per-sentence statistics behind the report's bootstrap.
    d = rec["data"]["splits"]["dev"]["pairs"]
    z = np.load(records[0].parent / "dev_sentences.npz")
    assert z["nll"].shape == (d,) and z["bleu_stats"].shape == (d, 10)
    assert math.isclose(z["nll"].sum(), m["dev_nll_sum"], rel_tol=1e-6)
    assert int(z["tokens"].sum()) == m["dev_tokens"]
    hyps = (records[0].parent / "dev.hyp.txt").read_text().split("\n")
    assert len(hyps) == d + 1
    assert "dev BLEU" in p.stdout and rec["run_id"] in p.stdout
    # Same command again: the finished run is found and skipped.
    p2 = run(tmp_path)
    assert p2.returncode == 0 and "already finished" in p2.stdout


def test_config_help_and_cfg_job():
    p = subprocess.run(
        [sys.executable, "-m", "ablate.run", "--cfg", "job", "model=A1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    assert "n_heads: 1" in p.stdout and "d_k: 512" in p.stdout and "d_ff: 2048" in p.stdout
    h = subprocess.run(
        [sys.executable, "-m", "ablate.run", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert h.returncode == 0 and "model: " in h.stdout and "A1" in h.stdout


def test_time_budget_ends_the_decay_and_the_run_at_the_deadline(tmp_path):
    # 6 seconds of training where the step cap (100,000) is far: the clock decides the schedule and the stop
    warmup = 1  # every logged step (each 10th) is past the warmup
    p = run(
        tmp_path,
        "schedule=cosine",
        "schedule.peak=1e-3",
        f"schedule.warmup_steps={warmup}",
        "train.budget_minutes=0.1",
        "train.max_steps=100000",
        "train.checkpoint_every=100000",
        "train.val_every=100000",  # no dev pass inside the last step: the clock moves by one step at most
    )
    assert p.returncode == 0, p.stderr[-3000:]
    (rec_path,) = (tmp_path / "results").rglob("record.json")
    rec = json.loads(rec_path.read_text())
    steps = rec["steps"]
    assert rec["status"] == "finished" and warmup < steps < 100_000
    ckpt = torch.load(rec_path.parent / "checkpoints" / f"step{steps:07d}.ckpt", weights_only=False)
    assert ckpt["global_step"] == steps
    # The clock decides the stop: the stop step is the first to end past the 6 seconds (TrainClock's time
    # in the checkpoint); the last logged step before it ended inside them.
    budget_s = 0.1 * 60
    clock = next(v for k, v in ckpt["callbacks"].items() if k.startswith("TrainClock"))
    warm_end_s = next(v for k, v in ckpt["callbacks"].items() if k.startswith("Budget"))["warm_end_s"]
    rows = [json.loads(r) for r in (rec_path.parent / "curves.jsonl").read_text().splitlines()]
    logged = [r for r in rows if "lr" in r and warmup < r["step"] < steps]
    t_last = max([warm_end_s] + [r["time_s"] - 0.005 for r in logged])  # curves.jsonl rounds to 0.01 s
    assert clock["time_s"] >= budget_s > t_last
    # The rate set for the step after the stop follows the clock, not the 100,000-step cap (which would
    # leave it near the peak): at most the cosine at the last logged step's time, since the clock only moves
    # on. No bound on how far the decay got: on a loaded machine one step can take seconds.
    x = (t_last - warm_end_s) / (budget_s - warm_end_s)
    assert ckpt["optimizer_states"][0]["param_groups"][0]["lr"] <= 1e-3 * 0.5 * (1 + math.cos(math.pi * x))
    lrs = [r["lr"] for r in logged]
    assert lrs == sorted(lrs, reverse=True)  # decays with the clock, never back up
