"""hydra/launcher=slurm on the SLURM cluster at hand (tests/slurm/cluster.sh up starts one on this machine):
what a sweep's parts cost in wall time, and that interruptions cost no accuracy.

1. a 2-row sweep (recipe=tiny scale=tiny, one thread a job): seconds from the command to both records;
2. one run of 4,000 steps (about 90 s of training on one thread) under SLURM, uninterrupted, then the same
   run with one `scontrol requeue` at step ~1,500: the extra wall time is the cost of one requeue (the
   steps since the checkpoint are not lost: the stop waits for the step boundary);
3. the same run under a 1-minute time limit (`hydra.launcher.timeout_min=1 signal_delay_s=20`): the
   allocations, the step each ended at, the wall time, and the final figures beside the uninterrupted run's.

    python -m benchmarks.slurm [--steps 4000] [--out benchmarks/results/slurm.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TINY = ["recipe=tiny", "scale=tiny", "trainer=cpu", "trainer.threads=1", "logger=none"]


def sweep(tmp: Path, *args: str) -> subprocess.Popen:
    cmd = [
        sys.executable, "-m", "ablate.run", "-m", "hydra/launcher=slurm", *TINY, *args,
        f"results_dir={tmp}/results", f"data.cache_dir={tmp.parent}/cache",
    ]  # fmt: skip
    env = dict(os.environ, WANDB_MODE="offline")
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(p: subprocess.Popen) -> None:
    out, err = p.communicate()
    if p.returncode:
        raise SystemExit(f"sweep failed ({p.returncode}): {err[-2000:]}")


def timed(tmp: Path, *args: str) -> float:
    t0 = time.time()
    finish(sweep(tmp, *args))
    return time.time() - t0


def record(tmp: Path) -> dict:
    (path,) = (tmp / "results").rglob("record.json")
    rec = json.loads(path.read_text())
    alloc = path.parent / "allocations.jsonl"
    rec["_allocations"] = [json.loads(x) for x in alloc.read_text().splitlines()] if alloc.is_file() else []
    return rec


def requeued_once(tmp: Path, steps: int, at: int) -> float:
    t0 = time.time()
    p = sweep(tmp, f"train.max_steps={steps}", "trainer.progress_bar=false")
    while True:
        curves = list((tmp / "results").rglob("curves.jsonl"))
        rows = curves[0].read_text().splitlines() if curves else []
        if rows and json.loads(rows[-1])["step"] >= at:
            break
        time.sleep(0.2)
    jid = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True).stdout.split()[0]
    subprocess.run(["scontrol", "requeue", jid], check=True)
    finish(p)
    return time.time() - t0


def figures(rec: dict) -> str:
    m = rec["metrics"]
    return f"dev PPL {m['dev_ppl']:.4f}, dev BLEU {m['dev_bleu']:.2f}, dev NLL sum {m['dev_nll_sum']:.4f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((x.split(":", 1)[1].strip() for x in cpu.splitlines() if x.startswith("Model name")), "?")
    nodes = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %c"], capture_output=True, text=True).stdout
    out: dict = {"cpu": model, "cores": os.cpu_count(), "python": platform.python_version(), "nodes": nodes}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        timed(tmp / "warm", "model=base", "train.max_steps=2")  # the prepared corpus, once for all
        out["sweep_2_rows_s"] = timed(tmp / "two", "model=base,A1")
        long = [f"train.max_steps={args.steps}", "trainer.progress_bar=false"]
        out["uninterrupted_s"] = timed(tmp / "plain", *long)
        out["requeued_s"] = requeued_once(tmp / "requeued", args.steps, args.steps * 3 // 8)
        limit = ["hydra.launcher.timeout_min=1", "hydra.launcher.signal_delay_s=20"]
        out["time_limit_s"] = timed(tmp / "limit", *long, *limit)
        plain, req, lim = (record(tmp / x) for x in ("plain", "requeued", "limit"))
    out["requeue_cost_s"] = out["requeued_s"] - out["uninterrupted_s"]
    out["uninterrupted"], out["requeued"], out["time_limited"] = figures(plain), figures(req), figures(lim)
    keys = ("started", "ended", "step", "status")
    out["allocations"] = [{k: a[k] for k in keys} for a in lim["_allocations"]]
    out["identical"] = all(
        r["metrics"][k] == plain["metrics"][k] for r in (req, lim) for k in ("dev_nll_sum", "dev_bleu")
    )
    print(json.dumps(out, indent=1))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
