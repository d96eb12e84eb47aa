"""hydra/launcher=gpus: jobs of a sweep side by side, each holding its own device ids while it runs.
On the CPU with made-up ids (trainer.device_pool): the ids each job received are in its record, no two
jobs that ran at the same time held one, a failing job frees its ids, and every job ends."""

import json
import os
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest

from ablate.cluster import gpu_pool

ROOT = Path(__file__).resolve().parents[1]


def test_ids_are_held_exclusively_and_given_back(tmp_path):
    with gpu_pool.acquire([3, 5], 1, tmp_path) as a, gpu_pool.acquire([3, 5], 1, tmp_path) as b:
        assert sorted(a + b) == [3, 5]  # two jobs at once: one id each, never the same
        assert gpu_pool.child_env(a)["CUDA_VISIBLE_DEVICES"] == str(a[0])
    with gpu_pool.acquire([3, 5], 2, tmp_path) as both:  # both free again once the jobs ended
        assert both == [3, 5]
    with pytest.raises(ValueError, match="trainer.devices=3"):
        with gpu_pool.acquire([3, 5], 3, tmp_path):
            pass


def test_a_job_waits_for_a_free_id(tmp_path):
    order = []

    def second():
        with gpu_pool.acquire([0], 1, tmp_path, poll_s=0.02):
            order.append(("second", time.monotonic()))

    with gpu_pool.acquire([0], 1, tmp_path):
        t = threading.Thread(target=second)
        t.start()
        time.sleep(0.3)
        order.append(("first ends", time.monotonic()))
    t.join(5)
    assert [o[0] for o in order] == ["first ends", "second"]


def test_k_jobs_share_one_id_and_the_next_waits(tmp_path):
    """hydra.launcher.jobs_per_device=2: two jobs hold id 3 at once, a third waits for a slot."""
    got = []

    def third():
        with gpu_pool.acquire([3], 1, tmp_path, poll_s=0.02, per_device=2) as c:
            got.append(("third", c, time.monotonic()))

    with (
        gpu_pool.acquire([3], 1, tmp_path, per_device=2) as a,
        gpu_pool.acquire([3], 1, tmp_path, per_device=2) as b,
    ):
        assert a == b == [3]
        t = threading.Thread(target=third)
        t.start()
        time.sleep(0.3)
        assert not got  # both slots held
        released = time.monotonic()
    t.join(5)
    assert got and got[0][1] == [3] and got[0][2] >= released
    with pytest.raises(ValueError, match="jobs_per_device=0"):
        with gpu_pool.acquire([3], 1, tmp_path, per_device=0):
            pass


def test_each_process_of_a_shared_device_is_held_to_its_share(monkeypatch):
    assert gpu_pool.MEMORY_ENV not in gpu_pool.child_env([2], 1)
    env = gpu_pool.child_env([2, 6], 4)
    assert env["CUDA_VISIBLE_DEVICES"] == "2,6" and float(env[gpu_pool.MEMORY_ENV]) == 0.25
    import torch

    calls = []
    monkeypatch.setenv(gpu_pool.MEMORY_ENV, env[gpu_pool.MEMORY_ENV])
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction", lambda f, d: calls.append((f, d)))
    gpu_pool.bound_memory()
    assert calls == [(0.25, 0), (0.25, 1)]


def _sweep_records(tmp, *extra):
    env = dict(os.environ, WANDB_MODE="offline")
    cmd = [
        sys.executable, "-m", "ablate.run", "-m", "model=base,A1", "scale=tiny", "recipe=tiny",
        "logger=none", "trainer.accelerator=cpu", "trainer.threads=1", "hydra/launcher=gpus",
        "hydra.launcher.n_jobs=2", "trainer.device_pool=[5]", "train.max_steps=300", *extra,
        f"results_dir={tmp}/results", f"data.cache_dir={tmp}/cache",
    ]  # fmt: skip
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    return {
        json.loads(r.read_text())["row"]: json.loads(r.read_text())
        for r in (tmp / "results").rglob("record.json")
    }


@pytest.mark.slow
def test_two_jobs_share_one_device_with_the_results_of_one_job_each(tmp_path):
    """jobs_per_device=2 on one (made-up) id: both rows hold it at the same time; each row's metrics equal
    its run with the id to itself (jobs_per_device=1), the same work."""
    shared = _sweep_records(tmp_path / "k2", "hydra.launcher.jobs_per_device=2")
    alone = _sweep_records(tmp_path / "k1")
    spans = []
    for row in ("base", "A1"):
        r = shared[row]
        assert r["devices_assigned"] == [5] and alone[row]["devices_assigned"] == [5]
        assert r["metrics"]["dev_nll_sum"] == alone[row]["metrics"]["dev_nll_sum"]
        assert r["metrics"]["dev_bleu"] == alone[row]["metrics"]["dev_bleu"]
        spans.append([datetime.strptime(r[k], "%Y-%m-%dT%H:%M:%S%z") for k in ("started", "finished")])
    (a0, a1), (b0, b1) = spans
    assert a0 < b1 and b0 < a1, "the two jobs did not hold the device at the same time"
    (c0, c1), (d0, d1) = (
        [datetime.strptime(alone[r][k], "%Y-%m-%dT%H:%M:%S%z") for k in ("started", "finished")]
        for r in ("base", "A1")
    )
    assert c1 <= d0 or d1 <= c0  # one slot: one job at a time


@pytest.mark.slow
def test_gpu_launcher_pins_jobs_to_their_own_ids_on_the_cpu(tmp_path):
    env = dict(os.environ, WANDB_MODE="offline", ABLATE_FAULT_ROW="A2")
    cmd = [
        sys.executable, "-m", "ablate.run", "-m", "model=A1,A2,A3,A4,base", "scale=tiny", "recipe=tiny",
        "logger=none", "trainer.accelerator=cpu", "trainer.threads=1", "hydra/launcher=gpus",
        "hydra.launcher.n_jobs=2", "trainer.device_pool=[5,7]",
        f"results_dir={tmp_path}/results", f"data.cache_dir={tmp_path}/cache",
    ]  # fmt: skip
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    recs = [json.loads(r.read_text()) for r in (tmp_path / "results").rglob("record.json")]
    by_row = {r["row"]: r for r in recs}
    assert sorted(by_row) == ["A1", "A2", "A3", "A4", "base"], p.stderr[-3000:]
    assert by_row["A2"]["status"] == "failed" and "exited with code 1" in by_row["A2"]["reason"]
    assert p.returncode == 1 and f"4 finished, 1 failed ({by_row['A2']['run_id']})" in p.stderr
    finished = [r for r in recs if r["row"] != "A2"]
    assert all(r["status"] == "finished" for r in finished), p.stderr[-3000:]
    spans = []
    for r in recs:
        assert len(r["devices_assigned"]) == 1 and r["devices_assigned"][0] in (5, 7)
        t0, t1 = (datetime.strptime(r[k], "%Y-%m-%dT%H:%M:%S%z") for k in ("started", "finished"))
        spans.append((r["devices_assigned"][0], t0, t1, r["row"]))
    for i, (d, a0, a1, ra) in enumerate(spans):
        for d2, b0, b1, rb in spans[i + 1 :]:
            if d == d2:
                assert a1 <= b0 or b1 <= a0, f"{ra} and {rb} held device {d} at the same time"
    assert {s[0] for s in spans} == {5, 7}  # both ids were used: two jobs at a time
