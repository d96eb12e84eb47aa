"""Test BLEU against training minutes for one finished (or running) run: beside fairseq's.

For checkpoints every `--every` steps, decodes the test split (test_2016_flickr for data=multi30k) with the
run's own decoding settings (beam 4, alpha 0.6, input + 50), from the mean of the last `--average`
checkpoints up to that step (the run's own recipe) and, with --single, from that checkpoint alone. The
minute of a step comes from the run's curves.jsonl (wall clock since training started, dev-loss passes
included, decoding for this curve not); `--at-minutes 30 55` adds the last checkpoint saved within each
of those minutes. `--fairseq-here` adds fairseq's curve measured on the same machine
(benchmarks/fairseq_multi30k.py) to the table and the plot. Writes curve.jsonl, curve.md and curve.png into
the run folder.

    python -m ablate.run experiment=multi30k_30min train.keep_checkpoints=100
    python -m benchmarks.multi30k_curve RESULTS/base/RUN --every 300 --average 5
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ablate.records.folder import step_checkpoints, step_of
from ablate.training.evaluation import evaluate_run

ROOT = Path(__file__).resolve().parents[1]

# fairseq 0.12.2 in the reference configuration, on a 2-core CPU machine with ~2.7x the Zen 3's matmul peak.
FAIRSEQ = [(16, 30.0), (21, 33.8), (32, 36.2), (55, 37.9)]


def step_minutes(run_dir: Path) -> dict[int, float]:
    out = {}
    for line in (run_dir / "curves.jsonl").read_text().splitlines():
        row = json.loads(line)
        if "time_s" in row:
            out[row["step"]] = row["time_s"] / 60
    return out


def minute_of(step: int, minutes: dict[int, float]) -> float:
    known = [s for s in minutes if s <= step]
    return minutes[max(known)] if known else float("nan")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run_dir")
    ap.add_argument("--every", type=int, default=300)
    ap.add_argument("--average", type=int, default=5)
    ap.add_argument("--single", action="store_true", help="also score each checkpoint alone")
    ap.add_argument("--at-minutes", type=float, nargs="*", default=[], help="last checkpoint by then")
    ap.add_argument("--fairseq-here", type=Path, help="curve.jsonl of benchmarks/fairseq_multi30k.py")
    args = ap.parse_args(argv)
    run = Path(args.run_dir)
    minutes = step_minutes(run)
    steps = [step_of(p) for p in step_checkpoints(run / "checkpoints")]
    points = [s for s in steps if s % args.every == 0]
    if steps and steps[-1] not in points:
        points.append(steps[-1])
    for mark in args.at_minutes:
        within = [s for s in steps if minute_of(s, minutes) <= mark]
        if within and within[-1] not in points:
            points.append(within[-1])
    points.sort()
    rows = []
    with open(run / "curve.jsonl", "a") as log:
        for step in points:
            for avg in [args.average] + ([1] if args.single else []):
                m = evaluate_run(run, average=avg, until_step=step)
                row = {
                    "step": step,
                    "minutes": round(minute_of(step, minutes), 2),
                    "averaged": m["test_averaged_checkpoints"],
                    "bleu": round(m["test_bleu"], 2),
                    "bleu_tok": round(m["test_bleu_tok"], 2),
                    "signature": m["test_bleu_signature"],
                }
                print(json.dumps(row), flush=True)
                log.write(json.dumps(row) + "\n")
                rows.append(row)
    here = fairseq_here(args.fairseq_here) if args.fairseq_here else []
    write_table(run, rows, here)
    return 0


def fairseq_here(path: Path) -> list[tuple[float, float]]:
    """(minutes of the last averaged checkpoint, test sacreBLEU) from fairseq_multi30k.py's output."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return sorted({(r["checkpoint_minutes"], r["sacrebleu"]) for r in rows if "sacrebleu" in r})


def write_table(run: Path, rows: list[dict], here: list[tuple[float, float]]) -> None:
    lines = [
        "| step | minutes | checkpoints averaged | test sacreBLEU | tokenized BLEU |",
        "|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['step']} | {r['minutes']:.1f} | {r['averaged']} | {r['bleu']:.1f} | {r['bleu_tok']:.1f} |"
        )
    lines.append("")
    lines.append("fairseq 0.12.2 (reference machine): " + ", ".join(f"{b} at {m} min" for m, b in FAIRSEQ))
    if here:
        lines.append("")
        lines.append(
            "fairseq 0.12.2, same configuration, on this machine (benchmarks/fairseq_multi30k.py): "
            + ", ".join(f"{b:.1f} at {m:.1f} min" for m, b in here)
        )
    (run / "curve.md").write_text("\n".join(lines) + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    for avg in sorted({r["averaged"] for r in rows}, reverse=True):
        rs = [r for r in rows if r["averaged"] == avg]
        label = f"ablate, mean of last {avg} checkpoints" if avg > 1 else "ablate, single checkpoint"
        ax.plot([r["minutes"] for r in rs], [r["bleu"] for r in rs], "o-", label=label)
    ax.plot(*zip(*FAIRSEQ), "s--", color="grey", label="fairseq 0.12.2 (reference figures, on its machine)")
    if here:
        ax.plot(*zip(*here), "^-", color="black", label="fairseq 0.12.2, same configuration, this machine")
    ax.axhline(38, color="tab:red", lw=0.5)
    ax.axhline(39.5, color="tab:red", lw=0.5)
    ax.set(
        xlabel="training minutes (2 CPU cores)", ylabel="test_2016_flickr sacreBLEU", title="Multi30k En-De"
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(run / "curve.png", dpi=120)


if __name__ == "__main__":
    sys.exit(main())
