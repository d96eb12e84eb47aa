"""Inputs that used to leave misleading state: each is now refused in one line before anything is
written, or recorded as failed with its reason."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ablate.config import ConfigError, RunConfig, TrainConfig, TrainerConfig, step_tokens, validate
from ablate.report.__main__ import main as report_main
from ablate.run import results_dir_problem

ROOT = Path(__file__).resolve().parents[1]


def ablate_run(tmp, *args):
    env = dict(os.environ, WANDB_MODE="offline")
    cmd = [sys.executable, "-m", "ablate.run", "scale=tiny", "recipe=tiny", "logger=none",
           "trainer.threads=1", f"data.cache_dir={tmp}/cache", *args]  # fmt: skip
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def test_more_tokens_a_step_than_the_config_says_is_refused():
    """Accumulation cannot go below 1: 8 devices x 1,024 tokens would be 8x train.batch_tokens."""
    cfg = RunConfig(train=TrainConfig(max_tokens=1024, batch_tokens=1024), trainer=TrainerConfig(devices=8))
    with pytest.raises(
        ConfigError, match=r"trainer.devices=8 x train.max_tokens=1024 .* 8.0x .*max_tokens=128"
    ):
        validate(cfg)
    cfg.train.max_tokens = 128  # what the message says: the total holds
    validate(cfg)
    assert step_tokens(cfg) == 1024
    paper = RunConfig(
        train=TrainConfig(max_tokens=3584, batch_tokens=25000), trainer=TrainerConfig(devices=8)
    )
    validate(paper)  # the paper's recipe on 8 GPUs: 28,672 tokens a step, within the 1.5x allowed


def test_vocab_size_names_the_minimum():
    cfg = RunConfig()
    cfg.data.vocab_size = 1
    with pytest.raises(ConfigError, match=r"data.vocab_size=1 is too small: at least 8"):
        validate(cfg)


@pytest.mark.parametrize("value", ["/etc/hostname/x", "/etc/hostname"])
def test_results_dir_under_a_file_is_one_line(value, tmp_path):
    assert (
        results_dir_problem([f"results_dir={value}"])
        == f"results_dir={value}: /etc/hostname is a file, not a folder"
    )
    p = ablate_run(tmp_path, f"results_dir={value}")
    assert p.returncode == 2 and p.stderr.strip().splitlines() == [
        f"error: results_dir={value}: /etc/hostname is a file, not a folder"
    ]


def test_results_dir_not_writable(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        if os.access(ro, os.W_OK):
            pytest.skip("running as root: every folder is writable")
        assert "is not writable" in results_dir_problem([f"results_dir={ro}/r"])
    finally:
        ro.chmod(0o700)


def test_report_of_a_missing_folder_writes_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    old = tmp_path / "reports" / "table3.md"
    old.parent.mkdir()
    old.write_text("the table as it was\n")
    assert report_main(["--results", str(tmp_path / "nowhere"), "--quiet"]) == 2
    assert capsys.readouterr().err.strip() == f"error: --results {tmp_path / 'nowhere'}: no such folder"
    assert old.read_text() == "the table as it was\n"


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine with a GPU runs it")
def test_gpu_run_on_a_machine_without_one_is_one_line_and_writes_nothing(tmp_path):
    p = ablate_run(
        tmp_path, f"results_dir={tmp_path}/results", "trainer.accelerator=gpu", "trainer.devices=8"
    )
    assert p.returncode == 2, p.stderr[-2000:]
    assert p.stderr.strip().splitlines()[-1] == (
        "error: trainer.accelerator=gpu: this machine has no CUDA GPU (use trainer=cpu or trainer=default)"
    )
    assert not list((tmp_path / "results").rglob("record.json"))


@pytest.mark.slow
def test_a_failure_after_the_record_is_written_leaves_it_failed(tmp_path):
    """Trainer construction fails (an unknown strategy) after the record exists: the record says failed,
    with the reason, instead of `running` for ever."""
    p = ablate_run(tmp_path, f"results_dir={tmp_path}/results", "trainer.strategy=nonsense")
    assert p.returncode != 0 and p.stderr.strip().splitlines()[-1].startswith("error: ")
    (path,) = (tmp_path / "results").rglob("record.json")
    rec = json.loads(path.read_text())
    assert rec["status"] == "failed" and "nonsense" in rec["reason"]


def test_written_files_get_the_usual_mode_not_a_private_one(tmp_path):
    """Files written atomically (records, reports) are readable by others as any file the user writes."""
    from ablate.records.folder import atomic_write_text

    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "table3.md", "x\n")
    finally:
        os.umask(old)
    assert (tmp_path / "table3.md").stat().st_mode & 0o777 == 0o644
