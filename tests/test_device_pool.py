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

from ablate import devices

ROOT = Path(__file__).resolve().parents[1]


def test_ids_are_held_exclusively_and_given_back(tmp_path):
    with devices.acquire([3, 5], 1, tmp_path) as a, devices.acquire([3, 5], 1, tmp_path) as b:
        assert sorted(a + b) == [3, 5]  # two jobs at once: one id each, never the same
        assert devices.child_env(a)["CUDA_VISIBLE_DEVICES"] == str(a[0])
    with devices.acquire([3, 5], 2, tmp_path) as both:  # both free again once the jobs ended
        assert both == [3, 5]
    with pytest.raises(ValueError, match="trainer.devices=3"):
        with devices.acquire([3, 5], 3, tmp_path):
            pass


def test_a_job_waits_for_a_free_id(tmp_path):
    order = []

    def second():
        with devices.acquire([0], 1, tmp_path, poll_s=0.02):
            order.append(("second", time.monotonic()))

    with devices.acquire([0], 1, tmp_path):
        t = threading.Thread(target=second)
        t.start()
        time.sleep(0.3)
        order.append(("first ends", time.monotonic()))
    t.join(5)
    assert [o[0] for o in order] == ["first ends", "second"]


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
