"""W&B without credentials or network: offline within seconds, no prompt, and the offline run holds the
config, the metric curves and the final figures (read back from the .wandb file itself)."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from wandb_offline import summary, written_summary

from ablate.config import LoggerConfig
from ablate.records.tracking import wandb_mode

ROOT = Path(__file__).resolve().parents[1]


def test_mode_decision_without_credentials(monkeypatch, tmp_path):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc
    t = time.perf_counter()
    mode, why = wandb_mode(LoggerConfig())
    assert mode == "offline" and "credentials" in why
    assert time.perf_counter() - t < 1.0


def test_dummy_key_without_network_goes_offline_in_seconds(monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "0" * 40)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    import socket

    with socket.socket() as sock:  # a loopback port that nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{port}")
    t = time.perf_counter()
    mode, why = wandb_mode(LoggerConfig(probe_timeout_s=1.0))
    assert mode == "offline" and "not reachable" in why
    assert time.perf_counter() - t < 3.0


def test_explicit_modes_win(monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert wandb_mode(LoggerConfig())[0] == "disabled"
    assert wandb_mode(LoggerConfig(mode="offline"))[0] == "offline"


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:  # a loopback port that nothing listens on
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("forced", ["WANDB_MODE=online", "logger.mode=online"])
@pytest.mark.parametrize("missing", ["credentials", "network"])
def test_wandb_forced_online_where_it_cannot_be_is_one_line_within_seconds(forced, missing, monkeypatch):
    """Forced online with no key, or with a key and no server: refused within the probe's time, in one
    line that names the way out (WANDB_MODE=offline), instead of W&B's CommError after minutes."""
    from ablate.records.tracking import WandbUnreachable

    monkeypatch.setenv("HOME", "/nonexistent")  # no ~/.netrc
    monkeypatch.delenv("WANDB_MODE", raising=False)
    if missing == "credentials":
        monkeypatch.delenv("WANDB_API_KEY", raising=False)
    else:
        monkeypatch.setenv("WANDB_API_KEY", "0" * 40)
        monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{_closed_port()}")
    if forced.startswith("WANDB_MODE"):
        monkeypatch.setenv("WANDB_MODE", "online")
    cfg = LoggerConfig(mode="online" if forced.startswith("logger") else "auto", probe_timeout_s=1.0)
    t = time.perf_counter()
    with pytest.raises(WandbUnreachable) as e:
        wandb_mode(cfg)
    assert time.perf_counter() - t < 3.0
    line = str(e.value)
    assert len(line.splitlines()) == 1 and line.startswith(f"W&B: {forced}, but ")
    assert ("no W&B credentials" if missing == "credentials" else "not reachable within 1s") in line
    assert "set WANDB_MODE=offline" in line


@pytest.mark.slow
def test_a_run_forced_online_without_a_server_fails_in_one_line(tmp_path):
    """The whole command: exit status 2, one error line naming WANDB_MODE=offline, and the record says
    why."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(HOME=str(tmp_path), WANDB_MODE="online", WANDB_API_KEY="0" * 40)
    env["WANDB_BASE_URL"] = f"http://127.0.0.1:{_closed_port()}"
    cmd = [sys.executable, "-m", "ablate.run", "scale=tiny", "recipe=tiny", "logger=wandb",
           "logger.probe_timeout_s=1", f"results_dir={tmp_path}/r",
           f"data.cache_dir={tmp_path}/cache"]  # fmt: skip
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    errors = [line for line in p.stderr.splitlines() if line.startswith("error")]
    assert p.returncode == 2 and len(errors) == 1, p.stderr[-2000:]
    assert "WANDB_MODE=online, but 127.0.0.1" in errors[0] and "set WANDB_MODE=offline" in errors[0]
    rec = json.loads(next((tmp_path / "r").rglob("record.json")).read_text())
    assert rec["status"] == "failed" and "set WANDB_MODE=offline" in rec["reason"]


@pytest.mark.slow
def test_offline_run_holds_config_and_metrics(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env["HOME"] = str(tmp_path)  # no credentials anywhere
    cmd = [
        sys.executable,
        "-m",
        "ablate.run",
        "scale=tiny",
        "recipe=tiny",
        "logger=wandb",
        f"results_dir={tmp_path}/r",
        f"data.cache_dir={tmp_path}/cache",
    ]
    p = subprocess.run(
        cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert "W&B offline" in p.stdout and "wandb sync" in p.stdout
    rec_path = next((tmp_path / "r").rglob("record.json"))
    rec = json.loads(rec_path.read_text())
    runs = list(rec_path.parent.glob("wandb/offline-run-*"))
    assert len(runs) == 1 and runs[0].name.endswith(rec["run_id"])  # one W&B run, named by the identity
    s = summary(next(runs[0].glob("*.wandb")))
    assert s["config"]["model"]["name"] == "base" and s["config"]["seed"] == 1
    assert s["summary"]["final/dev_ppl"] == pytest.approx(rec["metrics"]["dev_ppl"], rel=1e-6)
    assert s["summary"]["final/dev_bleu"] == pytest.approx(rec["metrics"]["dev_bleu"], abs=1e-9)
    assert any("dev/ppl" in h for h in s["history"]) and any("train/loss" in h for h in s["history"])
    assert json.loads((runs[0] / "files" / "record.json").read_text())["run_id"] == rec["run_id"]
    # what a dashboard filters and groups on, and summaries that keep the best dev figures
    assert s["run"]["job_type"] == "train"
    assert (s["config"]["table3_row"], s["config"]["table3_group"]) == ("base", "base")
    assert s["config"]["paper_dev_ppl"] == 4.92 and s["config"]["paper_dev_bleu"] == 25.8
    assert {"min", "last"} <= s["metrics"]["dev/ppl"] and {"max", "last"} <= s["metrics"]["dev/bleu"]
    assert not [a for a in s["artifacts"] if a["type"] == "model"]  # checkpoints only when asked for


@pytest.mark.slow
def test_checkpoints_go_as_model_artifacts_when_asked_for(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env["HOME"] = str(tmp_path)
    cmd = [sys.executable, "-m", "ablate.run", "scale=tiny", "recipe=tiny", "logger=wandb",
           "logger.log_checkpoints=true", "train.checkpoint_every=10", f"results_dir={tmp_path}/r",
           f"data.cache_dir={tmp_path}/cache", "trainer.threads=1"]  # fmt: skip
    p = subprocess.run(
        cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL
    )
    assert p.returncode == 0, p.stderr[-2000:]
    rec_path = next((tmp_path / "r").rglob("record.json"))
    (part,) = rec_path.parent.glob("wandb/offline-run-*/*.wandb")
    models = [a for a in summary(part)["artifacts"] if a["type"] == "model"]
    saved = sorted(p.name for p in (rec_path.parent / "checkpoints").glob("*.ckpt"))
    assert models and all(a["files"] == ["model.ckpt"] for a in models)
    assert len(models) <= len(saved) and json.loads(rec_path.read_text())["status"] == "finished"


@pytest.mark.slow
def test_a_sweep_run_again_with_one_more_row_is_one_group_and_shows_what_trained(tmp_path):
    """`-m model=base,A1`, then `-m model=base,A1,A2`: one W&B group for all three runs (the experiment's,
    not the sweep folder's), each named row/seed, each config holding the model that trained beside the
    paper's row."""
    from ablate.paper import table3

    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env["HOME"] = str(tmp_path)  # no credentials anywhere
    env.update(WANDB_PROJECT="table3-test", WANDB_ENTITY="a-team")  # W&B's own variables are honoured

    def sweep(rows: str) -> None:
        cmd = [
            sys.executable, "-m", "ablate.run", "-m", f"model={rows}", "scale=tiny", "recipe=tiny",
            "trainer.threads=1", "logger=wandb", f"results_dir={tmp_path}/r", f"data.cache_dir={tmp_path}/c",
        ]  # fmt: skip
        p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stderr[-2000:]

    sweep("base,A1")
    sweep("base,A1,A2")
    runs = {}
    for rec_path in (tmp_path / "r").glob("*/*/record.json"):
        rec = json.loads(rec_path.read_text())
        (offline,) = rec_path.parent.glob("wandb/offline-run-*/*.wandb")
        runs[rec["row"]] = (rec, summary(offline))
    assert sorted(runs) == ["A1", "A2", "base"]
    groups = {s["run"]["group"] for _, s in runs.values()}
    assert groups == {"tiny"} == {rec["sweep"] for rec, _ in runs.values()}
    for row, (rec, s) in runs.items():
        assert s["run"]["name"] == f"{row}/s1"
        assert (s["run"]["project"], s["run"]["entity"]) == ("table3-test", "a-team")
        ran, m = s["config"]["ran"], rec["model_effective"]
        assert (ran["N"], ran["d_model"], ran["h"], ran["d_k"]) == (
            m["n_layers"],
            m["d_model"],
            m["n_heads"],
            m["d_k"],
        )
        assert ran["params"] == rec["params"] and ran["params"] < 100_000  # the tiny model, not the paper's
        paper = table3()[row]
        assert (s["config"]["paper"]["d_model"], s["config"]["paper"]["h"]) == (paper.d_model, paper.n_heads)


@pytest.mark.slow
def test_a_resumed_run_syncs_as_one_run_whose_steps_go_forward(tmp_path):
    """A run stopped by SIGTERM and resumed: two offline parts (one per process) with one run id, the
    second's W&B steps after the first's, and every dev evaluation of curves.jsonl in the history once."""
    import signal
    import time

    from wandb.proto import wandb_internal_pb2 as pb
    from wandb_offline import records

    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env["HOME"] = str(tmp_path)
    cmd = [
        sys.executable, "-m", "ablate.run", "scale=tiny", "recipe=tiny", "trainer.threads=1", "logger=wandb",
        "train.max_steps=400", "trainer.progress_bar=false", f"results_dir={tmp_path}/r",
        f"data.cache_dir={tmp_path}/c",
    ]  # fmt: skip
    first = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while time.time() < deadline:
        curves = list((tmp_path / "r").rglob("curves.jsonl"))
        if curves and sum(1 for _ in curves[0].open()) > 12:
            break
        time.sleep(0.2)
    first.send_signal(signal.SIGTERM)
    assert first.wait(60) == 143
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    folder = next((tmp_path / "r").rglob("record.json")).parent
    parts = sorted(folder.glob("wandb/offline-run-*/*.wandb"))
    assert len(parts) == 2
    steps, dev = [], []
    for part in parts:
        assert summary(part)["run"]["id"] == json.loads((folder / "record.json").read_text())["run_id"]
        mine = []
        for raw in records(part):
            rec = pb.Record()
            rec.ParseFromString(raw)
            if rec.WhichOneof("record_type") == "history":
                row = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in rec.history.item}
                mine.append(row["_step"])
                if "dev/ppl" in row:
                    dev.append(row["trainer/global_step"])
        steps.append(mine)
    assert steps[0] == sorted(steps[0]) and steps[1] == sorted(steps[1]) and max(steps[0]) < min(steps[1])
    curve_dev = [
        json.loads(x)["step"] for x in (folder / "curves.jsonl").read_text().splitlines() if "dev_ppl" in x
    ]
    assert len(dev) == len(set(dev)) == len(curve_dev)  # each dev evaluation once: none lost, none twice


def test_the_report_run_decides_like_training_and_keeps_the_report_as_an_artifact(tmp_path, monkeypatch):
    """`python -m ablate.report --wandb`: credentials in ~/.netrc count as a key does (the mode comes from
    tracking.wandb_mode), and the Markdown and plots go into an artifact of the report run."""
    from ablate.records import tracking
    from ablate.report.render import Table
    from ablate.report.wandb_io import log_report

    (tmp_path / ".netrc").write_text("machine api.wandb.ai\n  login user\n  password k" + "0" * 39 + "\n")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    assert tracking.has_credentials()
    asked = []
    monkeypatch.setattr(tracking, "wandb_mode", lambda cfg: asked.append(cfg.project) or ("offline", "test"))
    md = tmp_path / "table3.md"
    md.write_text("# Table 3\n")
    table = Table(columns=["row", "dev PPL"], rows=[["base", "4.92"]])
    log_report(table, {}, None, None, "tiny trainer=cpu", directory=str(tmp_path), files=[md])
    assert asked == ["ablate"]
    (part,) = (tmp_path / "wandb").glob("offline-run-*/*.wandb")
    s = written_summary(part)
    assert s["exited"] and s["run"]["job_type"] == "report" and s["run"]["group"] == "tiny trainer=cpu"
    assert [(a["name"], a["type"], a["files"]) for a in s["artifacts"] if a["type"] == "report"] == [
        ("table3-report-tiny-trainer-cpu", "report", ["table3.md"])
    ]


def test_a_study_of_its_own_model_trains_with_the_default_logger_and_w_and_b_holds_its_keys(tmp_path):
    """`ablate.new s --model`, then its README's first command with nothing added (the default logger, W&B
    offline without credentials): it trains, and the W&B run's `ran.*` are its own model's keys (its
    record's model_effective and parameter counts), not the Transformer's."""
    from ablate.new import write

    write(tmp_path / "s", "s", model=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "ABLATE_"))}
    env.update(HOME=str(tmp_path), ABLATE_CACHE=str(tmp_path / "cache"))
    cmd = [sys.executable, "-m", "ablate.run", "experiment=s", "recipe=tiny", "scale=tiny"]
    p = subprocess.run(cmd, cwd=tmp_path / "s", env=env, capture_output=True, text=True, timeout=600,
                       stdin=subprocess.DEVNULL)  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    rec_path = next((tmp_path / "s" / "results").rglob("record.json"))
    rec = json.loads(rec_path.read_text())
    s = summary(next(rec_path.parent.glob("wandb/offline-run-*/*.wandb")))
    ran = rec["model_effective"]
    assert s["config"]["ran"] == {
        **ran,
        "params": rec["params"],
        "params_paper_scale": rec["params_paper_scale"],
    }
    assert "layers" in ran and "n_layers" not in ran  # the GRU's own names
