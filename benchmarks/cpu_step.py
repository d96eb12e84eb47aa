"""Where the time of one CPU training step goes, at the shape of the Multi30k budget presets.

The 55-minute preset (N 2, d_model 256, d_ff 512, 4 heads, 6K shared BPE, 1,024-token batches) is limited by
the updates it gets in its budget. This asks whether a step could be made faster here:

- the step's model FLOPs per second against the measured fp32 matmul peak, and the share of the step's
  CPU time that is matmuls (torch profiler: aten::mm, addmm, bmm) -- what is left to win outside them;
- 1 thread against 2 (does a second process with DDP have anything to gain over 2 intra-op threads?);
- smaller batches (more updates a minute, at what cost in tokens/s), and the vocabulary size;
- torch.compile (inductor's CPU backend) against eager, with --compile (one more minute).

Random tokens, no padding, dropout 0.1, the loss and optimizer of a real step (benchmarks/speed.py's
batches and ablate step), glibc told to keep freed memory as train.py does; medians of --reps interleaved
repetitions of --steps steps. Writes JSON lines and a Markdown table:

    python -m benchmarks.cpu_step [--compile] --out benchmarks/results
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from ablate.training.hardware import keep_freed_memory
from benchmarks.speed import Ablate, Shape, batch, matmul_peak, time_it, train_flops

LENGTH = 15  # tokens a sentence: Multi30k's mean target length in 6K pieces is ~15.4
MATMULS = {"aten::mm", "aten::addmm", "aten::bmm"}


def preset(batch_tokens: int = 1024, vocab: int = 6000) -> Shape:
    return Shape(f"{batch_tokens}tok/{vocab // 1000}K", 2, 256, 512, 4, vocab, batch_tokens // LENGTH, LENGTH)


def matmul_share(impl: Ablate, src: torch.Tensor, tgt: torch.Tensor, steps: int = 5) -> float:
    """Share of the step's self CPU time spent in matmul kernels."""
    with profile(activities=[ProfilerActivity.CPU]) as p:
        for _ in range(steps):
            impl.train_step(src, tgt)
    ops = p.key_averages()
    total = sum(e.self_cpu_time_total for e in ops)
    return sum(e.self_cpu_time_total for e in ops if e.key in MATMULS) / total


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--compile", action="store_true", help="also time torch.compile (inductor, CPU)")
    ap.add_argument("--out", default="benchmarks/results")
    args = ap.parse_args(argv)
    torch.set_num_threads(2)
    keep_freed_memory()  # as a training run does on CPU
    peak = matmul_peak(2)
    rows = []

    cases = [
        ("preset", preset(), 2, False),
        ("1 thread", preset(), 1, False),
        ("1 thread, half batch (a DDP rank's share)", preset(512), 1, False),
        ("768-token batches", preset(768), 2, False),
        ("512-token batches", preset(512), 2, False),
        ("4K vocabulary", preset(vocab=4000), 2, False),
        ("8K vocabulary", preset(vocab=8000), 2, False),
    ] + ([("torch.compile", preset(), 2, True)] if args.compile else [])
    impls, batches = [], []
    for _, s, threads, compile in cases:  # built and warmed up first, then timed interleaved
        torch.manual_seed(0)
        impls.append(Ablate(s, compile=compile))
        batches.append(batch(s, torch.Generator().manual_seed(0)))
        torch.set_num_threads(threads)
        time_it(lambda: impls[-1].train_step(*batches[-1]), 3)
    times = [[] for _ in cases]
    for _ in range(args.reps):  # interleaved: a slow spell of the machine hits every case alike
        for case, impl, b, ts in zip(cases, impls, batches, times):
            torch.set_num_threads(case[2])
            ts.append(time_it(lambda impl=impl, b=b: impl.train_step(*b), args.steps))
    torch.set_num_threads(2)
    for (label, s, threads, compile), ts, impl, b in zip(cases, times, impls, batches):
        sec = statistics.median(ts)
        gflop_s = train_flops(s) / sec / 1e9
        row = {
            "case": label, "shape": s.name, "threads": threads, "compiled": compile,
            "ms_per_step": round(1000 * sec, 1), "target_tok_s": round(s.batch * s.length / sec),
            "gflop_s": round(gflop_s, 1), "mfu": round(gflop_s / peak, 3),
        }  # fmt: skip
        if label == "preset":
            row["matmul_share"] = round(matmul_share(impl, *b), 3)
        print(json.dumps(row), flush=True)
        rows.append(row)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    (out / f"cpu_step-{stamp}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    lines = [
        f"Measured {time.strftime('%Y-%m-%d')}, torch {torch.__version__}, fp32 matmul peak {peak:.0f} "
        "GFLOP/s (2 threads, measured in the same run); N 2, d_model 256, d_ff 512, 4 heads; sentences of "
        f"{LENGTH} tokens on both sides, no padding; medians of {args.reps} interleaved repetitions of "
        f"{args.steps} steps. MFU is against the 2-thread peak (a 1-thread row's ceiling is ~50%).",
        "",
        "| case | shape | threads | ms/step | target tok/s | GFLOP/s | MFU | matmul share |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        share = f"{100 * r['matmul_share']:.0f}%" if "matmul_share" in r else ""
        lines.append(
            f"| {r['case']} | {r['shape']} | {r['threads']} | {r['ms_per_step']} | {r['target_tok_s']:,} | "
            f"{r['gflop_s']} | {100 * r['mfu']:.0f}% | {share} |"
        )
    (out / "cpu_step.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
