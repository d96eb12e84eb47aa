"""Training and beam-4 decoding speed of ablate on one CUDA GPU at the paper's batch size (section 5.1-5.2).

The paper's base and big models (tied 37K vocabulary, post-LN, dropout 0.1 as in training), one optimizer step
on ~25,000 target tokens (B sentences x L tokens on both sides, no padding), the same step as
lit.training_step: forward, projection of the real tokens, label-smoothed loss, backward, fused Adam. For
each precision (fp32 with TF32 off, tf32, bf16 autocast = trainer.precision=bf16-mixed; optionally
torch.compile): median step time over timed repetitions (CUDA events) after warm-up, target tokens/s,
MFU (model FLOPs, forward x 3, over the bf16 or fp32/tf32 matmul rate measured in this run) and the peak
GPU memory. Decoding: beam 4, alpha 0.6, EOS held back until L + 1 steps, sentences/s. The projection:
hours for the paper's step counts (100K base, 300K big) on this one GPU; the paper: 8 P100s, 12 hours
(base) and 3.5 days (big).

    python -m benchmarks.gpu_speed --configs base big --out benchmarks/results/gpu
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch

import ablate.nn.loss
from ablate.nn.decode import CachedStepper, beam_search
from ablate.nn.loss import label_smoothed_loss
from ablate.nn.model import Transformer, TransformerConfig, count_parameters
from ablate.nn.optim import make_adam
from benchmarks.speed import BOS, EOS, PAD, SHAPES, ForcedLength, Shape, train_flops

ROOT = Path(__file__).resolve().parents[1]

PAPER_STEPS = {"base": 100_000, "big": 300_000}


def cuda_time(fn, reps: int) -> list[float]:
    """Seconds per call of fn, one CUDA-event pair per repetition."""
    out = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) / 1000)
    return out


def matmul_rate(dtype: torch.dtype, tf32: bool, n: int = 8192) -> float:
    torch.backends.cuda.matmul.allow_tf32 = tf32
    a, b = (torch.randn(n, n, device="cuda", dtype=dtype) for _ in range(2))
    for _ in range(3):
        a @ b
    t = statistics.median(cuda_time(lambda: a @ b, 10))
    torch.backends.cuda.matmul.allow_tf32 = False
    return 2 * n**3 / t


def model_config(s: Shape, dropout: float = 0.1) -> TransformerConfig:
    return TransformerConfig(
        vocab_size=s.vocab, n_layers=s.layers, d_model=s.d, d_ff=s.ff, n_heads=s.heads,
        d_k=s.d // s.heads, d_v=s.d // s.heads, dropout=dropout, pad_id=PAD,
    )  # fmt: skip


def build(s: Shape, dropout: float = 0.1) -> Transformer:
    return Transformer(model_config(s, dropout)).cuda()


def time_training(s: Shape, precision: str, compile: bool, steps: int, warmup: int, loss: str) -> dict:
    ablate.nn.loss.FUSED_ON_CUDA = loss == "fused"  # reference: SmoothedCrossEntropy on a float32 copy
    torch.manual_seed(0)
    model = build(s)
    opt = make_adam(model.parameters())
    for g in opt.param_groups:
        g["lr"] = 1e-4
    fwd = torch.compile(model) if compile else model
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    src = torch.randint(3, s.vocab, (s.batch, s.length), device="cuda")
    tgt = torch.randint(3, s.vocab, (s.batch, s.length + 1), device="cuda")
    tgt[:, 0] = BOS
    bf16 = precision == "bf16"

    def step():
        model.train()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            hidden = fwd(src, tgt[:, :-1])  # (B, L, d)
            real = tgt[:, 1:] != PAD
            logits = model.logits(hidden[real])  # (N, V)
        sums = label_smoothed_loss(logits, tgt[:, 1:][real], 0.1, PAD, consume_logits=True)
        (sums.smoothed / sums.tokens).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    t = statistics.median(cuda_time(step, steps))
    torch.backends.cuda.matmul.allow_tf32 = False
    mem = torch.cuda.max_memory_allocated() / 2**30
    fused = ablate.nn.loss._forward_compiled.compiled  # None (not used), the compiled or the eager function
    compiled = loss == "fused" and fused not in (None, ablate.nn.loss._smoothed_ce_forward)
    return {"step_s": t, "tok_s": s.batch * s.length / t, "peak_gib": mem, "loss_compiled": compiled}


def time_decoding(s: Shape, precision: str, sentences: int, reps: int) -> dict:
    torch.manual_seed(0)
    model = build(s, dropout=0.0).eval()
    src = torch.randint(3, s.vocab, (sentences, s.length), device="cuda")
    lengths = torch.full((sentences,), s.length, device="cuda")
    bf16 = precision == "bf16"

    def run():
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            beam_search(
                ForcedLength(CachedStepper(model), s.length + 1), src, lengths, BOS, EOS, beam=4,
                alpha=0.6, max_len_a=0.0, max_len_b=s.length + 1,
            )  # fmt: skip

    run()
    t = statistics.median(cuda_time(run, reps))
    return {"decode_s": t, "sent_s": sentences / t}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--configs", nargs="+", default=["base", "big"], choices=["base", "big"])
    ap.add_argument("--batch-tokens", type=int, default=25_000, help="target tokens per step (5.1)")
    ap.add_argument("--length", type=int, default=32, help="tokens per sentence, both sides")
    ap.add_argument("--precisions", nargs="+", default=["fp32", "tf32", "bf16"])
    ap.add_argument("--compile", action="store_true", help="also time bf16 with torch.compile")
    ap.add_argument(
        "--loss-paths", nargs="+", default=["fused"], choices=["fused", "reference"],
        help="the training loss: compiled FusedSmoothedCrossEntropy (what training uses) or the CPU path",
    )  # fmt: skip
    ap.add_argument("--no-decode", action="store_true")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--decode-sentences", type=int, default=512)
    ap.add_argument("--out", default="benchmarks/results/gpu")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    peak = {"bf16": matmul_rate(torch.bfloat16, False), "tf32": matmul_rate(torch.float32, True)}
    peak["fp32"] = matmul_rate(torch.float32, False)
    name = torch.cuda.get_device_name(0)
    print(f"{name}; matmul TFLOP/s: " + ", ".join(f"{k} {v / 1e12:.0f}" for k, v in peak.items()))
    rows = []
    for c in a.configs:
        base = SHAPES[c]
        B = a.batch_tokens // a.length
        s = Shape(c, base.layers, base.d, base.ff, base.heads, base.vocab, B, a.length)
        with torch.device("meta"):  # counted without allocating
            params = count_parameters(Transformer(model_config(s)))
        runs = [(p, False, lp) for p in a.precisions for lp in a.loss_paths]
        runs += [("bf16", True, lp) for lp in a.loss_paths] if a.compile else []
        for precision, comp, loss in runs:
            r = time_training(s, precision, comp, a.steps, a.warmup, loss)
            torch.cuda.empty_cache()  # the last configuration's model and optimizer are gone
            if not (comp or a.no_decode or loss != a.loss_paths[0]):
                r.update(time_decoding(s, precision, a.decode_sentences, 3))
            mfu = train_flops(s) / r["step_s"] / peak[precision]
            hours = PAPER_STEPS[c] * r["step_s"] / 3600
            prec = precision + (" compiled" if comp else "")
            row = dict(config=c, precision=prec, loss=loss, device=name, **r)
            row.update(mfu=mfu, paper_steps_hours=hours, params=params, batch=s.batch)
            rows.append(row)
            print(json.dumps(row), flush=True)
    with open(out / "gpu_speed.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    lines = [
        f"{name}; matmul peaks measured: bf16 {peak['bf16'] / 1e12:.0f}, tf32 {peak['tf32'] / 1e12:.0f}, "
        f"fp32 {peak['fp32'] / 1e12:.0f} TFLOP/s. Batches of {a.batch_tokens:,} target tokens "
        f"({a.length}-token sentences, both sides).",
        "",
        "| model | precision | loss | step (ms) | target tok/s | MFU | peak GiB "
        "| paper's steps on this GPU (h) | beam-4 decode (sent/s) |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        dec = f"{r['sent_s']:,.0f}" if "sent_s" in r else ""
        lines.append(
            f"| {r['config']} | {r['precision']} | {r['loss']} | {r['step_s'] * 1e3:.0f} "
            f"| {r['tok_s']:,.0f} | {r['mfu']:.0%} | {r['peak_gib']:.1f} | {r['paper_steps_hours']:.1f} "
            f"| {dec} |"
        )
    (out / "gpu_speed.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
