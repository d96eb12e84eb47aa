"""The GPU paths on a GPU, in one prepared run: every figure with the device's name in one results file.

  tests    tests/test_gpu.py whole (the compiled GPU loss included)
  train    `python -m ablate.run trainer=gpu_bf16` at the paper's width (scale=paper) on the built-in
           corpus, --steps steps: dev PPL, BLEU, target tokens/s, MFU (6 x params x tokens over the
           device's bf16 dense peak)
  sweep    a hydra/launcher=gpus sweep of four rows (A1..A4), two jobs sharing the GPU
  speed    the paper-batch step for base and big (benchmarks.gpu_speed, bf16)
  learn    the Multi30k base row of Table 3 (experiment=table3_multi30k model=base, its whole recipe) in
           float32 on the GPU: dev PPL and BLEU beside the committed CPU seeds of the same row (needs
           --multi30k)
  k        rows a minute for eight Multi30k Table 3 rows (experiment=table3_multi30k, --k-steps steps
           each) at hydra.launcher.jobs_per_device = 1, 4, 8 on one GPU, each row's training and wall
           seconds, and whether each row's figures equal its k = 1 run (needs --multi30k)

--budget S ends every part by S seconds after the start (a sweep cut off counts the rows it finished), so
that the results file is written inside the device call's limit.

    python -m benchmarks.gpu_check --out OUT [--parts tests train sweep speed] [--multi30k DIR]
    python -m benchmarks.gpu_check --dry-run --out /tmp/check     # on a CPU: the same plumbing, tiny

--dry-run runs every part on the CPU at recipe=tiny scale=tiny with made-up device ids, so that nothing but
the GPU is new when the check runs on one (speed needs CUDA and is left out there).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BF16_PEAK = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12}  # dense, SXM where two exist
K_ROWS = "A1,A2,A3,A4,B1,B2,C6,C7"
RUN_KEYS = ("row", "steps", "params", "train_time_s", "tokens_per_s", "precision", "device")


DEADLINE = [float("inf")]  # time.time() by which every command ends (--budget)


def run(cmd: list[str], timeout: float, env: dict | None = None) -> tuple[int, str, float]:
    """`cmd` in a session of its own, so that a timeout also ends a sweep's worker processes."""
    t0 = time.time()
    timeout = max(1.0, min(timeout, DEADLINE[0] - t0))
    p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                         start_new_session=True)  # fmt: skip
    try:
        out, _ = p.communicate(timeout=timeout)
        return p.returncode, out[-3000:], time.time() - t0
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        return 124, f"timed out after {timeout:.0f} s: {out[-2000:]}", time.time() - t0


def ablate(args, *overrides: str, multirun: bool = False, trainer: str = "gpu_bf16") -> list[str]:
    base = ["logger=none", "trainer.progress_bar=false", f"data.cache_dir={args.out}/cache"]
    hw = ["trainer=cpu", "trainer.threads=1"] if args.dry_run else [f"trainer={trainer}"]
    return [sys.executable, "-m", "ablate.run", *(["-m"] if multirun else []), *base, *hw, *overrides]


def records(folder: Path) -> list[dict]:
    """Every record under `folder`, with the figures of evaluations after training beside it."""
    from ablate.records.store import find_records

    return find_records(folder)[0]


def part_tests(args) -> dict:
    cmd = [sys.executable, "-m", "pytest", "-q", "-rfEs", "-m", "", "tests/test_gpu.py"]
    code, tail, wall = run(cmd, 600)
    summary = tail.strip().splitlines()[-1] if tail.strip() else ""
    return {"exit": code, "summary": summary, "wall_s": wall, **({"tail": tail} if code else {})}


def part_train(args) -> dict:
    size = (
        ["scale=tiny", "recipe=tiny"]
        if args.dry_run
        else ["scale=paper", "recipe=cpu", "train.val_every=500"]
    )
    out = args.out / "train"
    cmd = ablate(args, *size, f"train.max_steps={args.steps}", f"results_dir={out}")
    code, tail, wall = run(cmd, 600)
    if code:
        return {"exit": code, "tail": tail}
    (rec,) = records(out)
    peak = next((v for k, v in BF16_PEAK.items() if k in str(rec.get("device"))), None)
    flops_s = rec["flops_estimate"] / rec["train_time_s"]
    return {
        "exit": 0,
        "wall_s": wall,
        "steps": rec["steps"],
        "params": rec["params"],
        "dev_ppl": rec["metrics"]["dev_ppl"],
        "dev_bleu": rec["metrics"]["dev_bleu"],
        "tokens_per_s": rec["tokens_per_s"],
        "model_tflops_per_s": flops_s / 1e12,
        "mfu": flops_s / peak if peak else None,
        "precision": rec.get("precision"),
        "device": rec.get("device"),
    }


def part_learn(args) -> dict:
    if not args.multi30k and not args.dry_run:
        return {"skipped": "no --multi30k folder"}
    data = ["scale=tiny", "recipe=tiny"] if args.dry_run else [
        "experiment=table3_multi30k", "model=base", f"data.root={args.multi30k}",
    ]  # fmt: skip
    out = args.out / "learn"
    code, tail, wall = run(ablate(args, *data, f"results_dir={out}", trainer="gpu"), 600)
    if code:  # a run cut off: its dev curve so far
        curve = [x for f in out.rglob("curves.jsonl") for x in f.read_text().splitlines() if x.strip()]
        return {"exit": code, "wall_s": wall, "tail": tail, "curve": [json.loads(x) for x in curve]}
    (rec,) = records(out)
    keys = ("dev_ppl", "dev_bleu")  # the test split is an evaluation of its own, not in the record
    cpu = [
        r
        for r in records(ROOT / "reports/table3_multi30k/runs")
        if r["row"] == rec["row"] and r["status"] == "finished"
    ]
    return {
        "exit": 0,
        "wall_s": wall,
        **{k: rec[k] for k in RUN_KEYS},
        **{k: rec["metrics"].get(k) for k in keys},
        "cpu_seeds": {r["run_id"]: {"steps": r["steps"], **{k: r["metrics"][k] for k in keys}} for r in cpu},
    }


def gpus_sweep(args, folder: Path, rows: str, k: int, *overrides: str) -> tuple[int, str, float]:
    pool = ["trainer.device_pool=[0]"] if args.dry_run else []
    cmd = ablate(
        args, f"model={rows}", "hydra/launcher=gpus", f"hydra.launcher.n_jobs={k}",
        f"hydra.launcher.jobs_per_device={k}", f"results_dir={folder}", *pool, *overrides, multirun=True,
    )  # fmt: skip
    return run(cmd, 600)


def part_sweep(args) -> dict:
    size = (
        ["scale=tiny", "recipe=tiny"] if args.dry_run else ["scale=cpu", "recipe=cpu", "train.max_steps=300"]
    )
    code, tail, wall = gpus_sweep(args, args.out / "sweep", "A1,A2,A3,A4", 2, *size)
    recs = records(args.out / "sweep")
    return {
        "exit": code,
        "wall_s": wall,
        "rows": {
            r["row"]: [r["status"], r["metrics"].get("dev_ppl"), r.get("devices_assigned")] for r in recs
        },
        **({"tail": tail} if code else {}),
    }


def part_speed(args) -> dict:
    if args.dry_run:
        return {"skipped": "dry run: benchmarks.gpu_speed needs CUDA"}
    out = args.out / "gpu_speed"
    cmd = [sys.executable, "-m", "benchmarks.gpu_speed", "--configs", "base", "big", "--precisions", "bf16"]
    code, tail, wall = run([*cmd, "--out", str(out)], 600)
    found = sorted(out.glob("*.jsonl"))
    rows = [json.loads(x) for f in found for x in f.read_text().splitlines() if x.strip()]
    return {"exit": code, "wall_s": wall, "results": rows, **({"tail": tail} if code else {})}


def part_k(args) -> dict:
    if not args.multi30k and not args.dry_run:
        return {"skipped": "no --multi30k folder"}
    data = ["scale=tiny", "recipe=tiny"] if args.dry_run else [
        "experiment=table3_multi30k", f"data.root={args.multi30k}", f"train.max_steps={args.k_steps}",
    ]  # fmt: skip
    out, by_k = {}, {}
    for k in args.k:
        folder = args.out / f"k{k}"
        code, tail, wall = gpus_sweep(args, folder, K_ROWS, k, *data)
        recs = [r for r in records(folder) if r["status"] == "finished"]
        by_k[k] = {r["row"]: r["metrics"].get("dev_nll_sum") for r in recs}
        out[f"k={k}"] = {
            "exit": code,
            "wall_s": wall,
            "rows_finished": len(recs),
            "rows_per_min": len(recs) / (wall / 60),
            "row_train_wall_s": {r["row"]: [r["train_time_s"], r["wall_time_s"]] for r in recs},
        }
        if code:
            out[f"k={k}"]["tail"] = tail
        save(args, "k", out)  # each k as it ends: the part is the check's longest
    if 1 in by_k:  # the rows both finished
        one = by_k[1]
        out["same_as_k1"] = {
            f"k={k}": {row: v == one[row] for row, v in by_k[k].items() if row in one} for k in by_k if k != 1
        }
    return out


def save(args, name: str, value: dict) -> None:
    args.result[name] = value
    (args.out / "gpu_check.json").write_text(json.dumps(args.result, indent=1) + "\n")


PARTS = {
    "tests": part_tests, "train": part_train, "learn": part_learn, "sweep": part_sweep, "speed": part_speed,
    "k": part_k,
}  # fmt: skip


def device() -> str:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA device"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--parts", nargs="+", default=["tests", "train", "sweep", "speed"], choices=list(PARTS))
    ap.add_argument("--steps", type=int, default=1000, help="train: optimizer steps at the paper's width")
    ap.add_argument("--multi30k", type=Path, help="k: folder of Multi30k's train/val/test .gz files")
    ap.add_argument("--k", type=int, nargs="+", default=[1, 4, 8])
    ap.add_argument("--k-steps", type=int, default=300)
    ap.add_argument("--budget", type=float, help="seconds from the start by which every part ends")
    ap.add_argument("--dry-run", action="store_true", help="on the CPU, tiny: the plumbing only")
    args = ap.parse_args()
    if args.dry_run:
        args.steps = min(args.steps, 20)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.budget:
        DEADLINE[0] = time.time() + args.budget
    args.result = {"device": device(), "dry_run": args.dry_run, "started": time.strftime("%Y-%m-%dT%H:%M:%S")}
    for name in args.parts:
        print(f"[gpu_check] {name} ...", flush=True)
        save(args, name, PARTS[name](args))  # after each part: a cut-off run keeps the rest
        print(json.dumps({name: args.result[name]}, indent=1)[:2000], flush=True)


if __name__ == "__main__":
    os.environ.setdefault("WANDB_MODE", "offline")
    main()
