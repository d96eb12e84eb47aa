"""How long `--plan` takes: the committed Multi30k table grown by a seed (80 jobs, 18 to train) and the
same table at 50 seeds (1,000 jobs), each as one process, its wall time and CPU time (the machine's other
work shows in the difference).

    python benchmarks/plan_speed.py /work/shared/data/multi30k

Prints one line a plan: wall seconds, CPU seconds, the plan's closing line (its jobs counted).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SWEEP = ["experiment=table3_multi30k", "hydra/launcher=joblib_cpu", "trainer.threads=1"]


def plan(data_root: str, seeds: str) -> None:
    cmd = [
        sys.executable,
        "-m",
        "ablate.run",
        "-m",
        *SWEEP,
        f"seed={seeds}",
        f"data.root={data_root}",
        "--plan",
    ]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    p = subprocess.run(
        cmd, cwd=ROOT, capture_output=True, text=True, env=dict(os.environ, WANDB_MODE="offline")
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    closing = next((ln for ln in p.stdout.splitlines() if ln.startswith("[plan] plan of")), p.stderr[-300:])
    print(f"wall {wall:6.1f} s  CPU {cpu:6.1f} s  {closing}")


if __name__ == "__main__":
    root = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("MULTI30K_DIR", "")
    plan(root, "1,2,3,4")
    plan(root, "range(1,51)")
