"""Test BLEU against training minutes for fairseq 0.12.2 on Multi30k En->De, on this machine: the peer of the
Multi30k comparison (`benchmarks/multi30k_curve.py` measures ours).

fairseq trains the reference configuration for a fixed wall-clock budget (`--stop-time-hours`, fairseq's
own training clock): post-LN `transformer`, 3+3 layers, d_model 256, d_ff 1024, 4 heads, dropout 0.2,
share-all-embeddings over one joint dictionary, label_smoothed_cross_entropy 0.1, Adam (0.9, 0.98),
inverse_sqrt lr 1e-3 with 500 warmup updates from 1e-7, max-tokens 4096, fp32 on the CPU. The subwords are
our own pipeline's 8K joint sentencepiece model (`--spm`, in ~/.cache/ablate/spm/<key>/spm.model), used
for every split and, piece for piece, as fairseq's dictionary, so fairseq sees exactly our segmentation.
A checkpoint is saved every `--save-interval-updates` updates (by default `--save-every-minutes` times
`--updates-per-minute`, an estimate for this machine); the minute of a checkpoint is fairseq's training
clock when it was saved (`extra_state.previous_training_time`: from the Trainer's start, checkpoint
writes included; imports and data loading before it not). For each `--eval-at` minute mark the last 5
checkpoints saved at or before it are averaged (fairseq's scripts/average_checkpoints.py), the test set
(test_2016_flickr) is decoded with fairseq-generate (beam 4, lenpen 0.6), the pieces are decoded with the
sentencepiece model and scored with sacreBLEU (cased, 13a) against the raw German references. Dev
validation is off unless `--validate` (fairseq would then validate at every checkpoint).

    /work/peers/venv/bin/python -m benchmarks.fairseq_multi30k --data ../shared/data/multi30k \\
        --spm ~/.cache/ablate/spm/0c22ea505e36e2ae/spm.model --minutes 30 --save-every-minutes 1 \\
        --eval-at 16 21 30 --workdir /tmp/fairseq_m30k --out /tmp/fairseq_m30k/curve.jsonl

Writes JSON lines {minutes, checkpoint_minutes, update, epoch, checkpoints_averaged, sacrebleu, signature,
tokens_per_s, ...} to --out and prints a Markdown table. `--skip-train` scores more marks of a finished run.
Run it with the Python of the venv fairseq is installed in (`/work/shared/peers/install_peers.sh`);
fairseq runs in child processes of that Python (fairseq_cli.<tool>.cli_main, see BOOT).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

SPLITS = {"train": "train", "valid": "val", "test": "test_2016_flickr"}  # fairseq name: Multi30k file name
SRC, TGT = "en", "de"
CHECKPOINT = re.compile(r"checkpoint_(\d+)_(\d+)\.pt$")


def fairseq_env(threads: int) -> dict:
    # torch >= 2.6 loads with weights_only=True by default; fairseq 0.12 checkpoints hold argparse/omegaconf
    # objects, and fairseq calls torch.load without the argument, so the environment restores the old default.
    env = dict(os.environ, TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD="1", PYTHONWARNINGS="ignore")
    env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    return env


# `python -c BOOT TOOL ARGS...` runs fairseq_cli.TOOL after one runtime patch: a fairseq 0.12 encoder layer
# loaded from a checkpoint takes a fused inference path (torch._transformer_encoder_layer_fwd) whose
# signature changed in later torch ("RuntimeError: Mask Type should be defined" on torch 2.13); the patch
# keeps such layers on the ordinary path that training uses (same math).
BOOT = """
import importlib, sys
from fairseq.modules import transformer_layer as tl
_load = tl.TransformerEncoderLayerBase._load_from_state_dict
def _load_unfused(self, *args, **kwargs):
    _load(self, *args, **kwargs)
    self.load_to_BT = False
tl.TransformerEncoderLayerBase._load_from_state_dict = _load_unfused
tool = sys.argv.pop(1)
sys.argv[0] = "fairseq-" + tool
sys.exit(importlib.import_module("fairseq_cli." + tool).cli_main())
"""


def fairseq(tool: str, args: list, threads: int) -> None:
    cmd = [sys.executable, "-c", BOOT, tool, *map(str, args)]
    print(f"+ fairseq-{tool}", " ".join(cmd[4:]), flush=True)
    subprocess.run(cmd, check=True, env=fairseq_env(threads))


def read_lines(path: Path, limit: int | None = None) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f]
    return lines[:limit] if limit else lines


def sentencepiece(model: Path):
    import sentencepiece as spm

    return spm.SentencePieceProcessor(model_file=str(model))


def prepare(args) -> tuple[Path, Path]:
    """Encode every split with the sentencepiece model and binarize with fairseq-preprocess over one joint
    dictionary (the model's pieces). Returns the data-bin for training and the one for the test decode."""
    work = args.workdir
    stamp = {
        "data": str(args.data.resolve()),
        "spm": str(args.spm.resolve()),
        "spm_size": args.spm.stat().st_size,
    }
    bin_dir, stamp_file = work / "data-bin", work / "data-bin.json"
    sp = sentencepiece(args.spm)
    enc = work / "spm"
    if not (stamp_file.is_file() and json.loads(stamp_file.read_text()) == stamp):
        shutil.rmtree(bin_dir, ignore_errors=True)
        enc.mkdir(parents=True, exist_ok=True)
        specials = {i for i in range(sp.get_piece_size()) if sp.is_control(i) or sp.is_unknown(i)}
        pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if i not in specials]
        (work / "dict.txt").write_text("".join(f"{p} 1\n" for p in pieces), encoding="utf-8")
        for name, stem in SPLITS.items():
            for lang in (SRC, TGT):
                lines = read_lines(args.data / f"{stem}.{lang}.gz")
                with open(enc / f"{name}.{lang}", "w", encoding="utf-8") as f:
                    f.writelines(" ".join(p) + "\n" for p in sp.encode(lines, out_type=str))
        fairseq(
            "preprocess",
            [*langs(), "--trainpref", enc / "train", "--validpref", enc / "valid", "--testpref", enc / "test"]
            + ["--destdir", bin_dir, "--srcdict", work / "dict.txt", "--joined-dictionary"]
            + ["--workers", args.threads],
            args.threads,
        )
        stamp_file.write_text(json.dumps(stamp))
    if not args.limit_test:
        return bin_dir, bin_dir
    head = work / f"data-bin-test{args.limit_test}"  # the first N test pairs only (for quick checks)
    if not (head / f"test.{SRC}-{TGT}.{TGT}.bin").is_file():
        for lang in (SRC, TGT):
            lines = (enc / f"test.{lang}").read_text(encoding="utf-8").splitlines(keepends=True)
            (enc / f"test{args.limit_test}.{lang}").write_text(
                "".join(lines[: args.limit_test]), encoding="utf-8"
            )
        fairseq(
            "preprocess",
            [*langs(), "--testpref", enc / f"test{args.limit_test}", "--destdir", head]
            + ["--srcdict", work / "dict.txt", "--joined-dictionary", "--workers", 1],
            args.threads,
        )
    return bin_dir, head


def langs() -> list[str]:
    return ["--source-lang", SRC, "--target-lang", TGT]


def train(args, bin_dir: Path) -> None:
    save_dir = args.workdir / "checkpoints"
    shutil.rmtree(save_dir, ignore_errors=True)  # fairseq would otherwise resume from what it finds there
    every = args.save_interval_updates or max(1, round(args.save_every_minutes * args.updates_per_minute))
    # the reference configuration
    model = ["--arch", "transformer", "--share-all-embeddings", "--dropout", 0.2]
    model += [
        "--encoder-layers",
        3,
        "--decoder-layers",
        3,
        "--encoder-embed-dim",
        256,
        "--decoder-embed-dim",
        256,
    ]
    model += ["--encoder-ffn-embed-dim", 1024, "--decoder-ffn-embed-dim", 1024]
    model += ["--encoder-attention-heads", 4, "--decoder-attention-heads", 4]
    optim = ["--criterion", "label_smoothed_cross_entropy", "--label-smoothing", 0.1]
    optim += [
        "--optimizer",
        "adam",
        "--adam-betas",
        "(0.9, 0.98)",
        "--lr",
        1e-3,
        "--lr-scheduler",
        "inverse_sqrt",
    ]
    optim += ["--warmup-updates", 500, "--warmup-init-lr", 1e-7, "--max-tokens", args.max_tokens]
    # wall-clock budget, a checkpoint every `every` updates, all kept; no epoch/last/best checkpoints
    run = ["--stop-time-hours", args.minutes / 60, "--save-dir", save_dir, "--save-interval-updates", every]
    run += ["--keep-interval-updates", -1, "--no-epoch-checkpoints", "--no-last-checkpoints"]
    run += ["--cpu", "--seed", args.seed, "--log-format", "json", "--log-interval", args.log_interval]
    run += ["--log-file", args.workdir / "train.log"]
    if args.max_update:
        run += ["--max-update", args.max_update]
    if not args.validate:
        run += ["--disable-validation"]
    (args.workdir / "train.log").unlink(missing_ok=True)
    started = time.time()
    (args.workdir / "train.json").write_text(
        json.dumps({"launched": started, "save_interval_updates": every, "minutes": args.minutes})
    )
    fairseq("train", [bin_dir, *langs(), *model, *optim, *run], args.threads)
    print(f"fairseq-train: {(time.time() - started) / 60:.1f} min in all (launch to exit)", flush=True)


def checkpoints(args) -> list[dict]:
    """The kept checkpoints, oldest first, with fairseq's training clock at each save (cached)."""
    import torch

    cache_file = args.workdir / "checkpoints.json"
    cache = json.loads(cache_file.read_text()) if cache_file.is_file() else {}
    launched = json.loads((args.workdir / "train.json").read_text())["launched"]
    out = []
    for path in (args.workdir / "checkpoints").glob("checkpoint_*_*.pt"):
        epoch, update = map(int, CHECKPOINT.search(path.name).groups())
        key = f"{path.name}:{path.stat().st_mtime_ns}"
        if key not in cache:
            extra = torch.load(path, map_location="cpu", weights_only=False)["extra_state"]
            cache[key] = {
                "update": update,
                "epoch": epoch,
                "train_s": extra["previous_training_time"],
                "wall_s": path.stat().st_mtime - launched,
            }
        out.append({**cache[key], "path": str(path)})
    cache_file.write_text(json.dumps(cache, indent=1))
    return sorted(out, key=lambda c: c["update"])


def average(paths: list[str], out: Path) -> None:
    """As fairseq's scripts/average_checkpoints.py: the mean of the model parameters (no optimizer state)."""
    import torch

    total, state = None, None
    for path in paths:
        state = torch.load(path, map_location="cpu", weights_only=False)
        params = {k: v.float() for k, v in state["model"].items()}
        total = params if total is None else {k: total[k] + v for k, v in params.items()}
    state["model"] = {k: v / len(paths) for k, v in total.items()}
    state["last_optimizer_state"] = None
    torch.save(state, out)


def tokens_per_s(log: Path, update: int) -> float | None:
    """Target tokens per second of training clock up to the last log line at or before `update` (fairseq's
    train_inner lines: wpb averaged over the interval, wall = its clock)."""
    if not log.is_file():
        return None
    tokens, prev, rate = 0.0, 0, None
    for line in log.read_text().splitlines():
        i = line.find("{")
        try:
            row = json.loads(line[i:]) if i >= 0 else {}
        except json.JSONDecodeError:
            continue
        if "wpb" not in row or "num_updates" not in row:
            continue
        n = int(row["num_updates"])
        if n > update:
            break
        tokens += float(row["wpb"]) * (n - prev)
        prev = n
        rate = tokens / float(row["wall"]) if float(row["wall"]) > 0 else None
    return round(rate) if rate else None


def evaluate(args, test_bin: Path, ckpts: list[dict], mark: float) -> dict:
    import sacrebleu

    window = [c for c in ckpts if c["train_s"] <= mark * 60][-args.average :]
    if not window:
        return {"minutes": mark, "error": "no checkpoint at or before this mark"}
    last = window[-1]
    avg_dir, gen_dir = args.workdir / "averaged", args.workdir / "generate"
    avg_dir.mkdir(exist_ok=True)
    avg = avg_dir / f"avg{len(window)}_{last['update']}.pt"
    if not avg.is_file():
        average([c["path"] for c in window], avg)
    results = gen_dir / f"{avg.stem}_test{args.limit_test or ''}"
    fairseq(
        "generate",
        [test_bin, *langs(), "--gen-subset", "test", "--path", avg, "--beam", 4, "--lenpen", 0.6]
        + ["--batch-size", 64, "--cpu", "--results-path", results],
        args.threads,
    )
    sp = sentencepiece(args.spm)
    hyps = {}
    for line in (results / "generate-test.txt").read_text(encoding="utf-8").splitlines():
        if line.startswith("H-"):
            head, _score, text = (line.split("\t") + [""])[:3]
            hyps[int(head[2:])] = sp.decode([sp.piece_to_id(p) for p in text.split()])
    refs = read_lines(args.data / f"{SPLITS['test']}.{TGT}.gz", args.limit_test)
    assert sorted(hyps) == list(range(len(refs))), "fairseq-generate did not give one hypothesis per sentence"
    hyp_list = [hyps[i] for i in range(len(refs))]
    (results / "hyp.detok.de").write_text("".join(h + "\n" for h in hyp_list), encoding="utf-8")
    bleu = sacrebleu.metrics.BLEU()  # cased, 13a
    score = bleu.corpus_score(hyp_list, [refs])
    return {
        "minutes": mark,
        "checkpoint_minutes": round(last["train_s"] / 60, 2),
        "wall_minutes": round(last["wall_s"] / 60, 2),
        "update": last["update"],
        "epoch": last["epoch"],
        "checkpoints_averaged": len(window),
        "averaged_updates": [c["update"] for c in window],
        "sacrebleu": round(score.score, 2),
        "signature": str(bleu.get_signature()),
        "tokens_per_s": tokens_per_s(args.workdir / "train.log", last["update"]),
        "test_sentences": len(refs),
    }


def table(rows: list[dict]) -> str:
    lines = [
        "| mark (min) | checkpoint (min) | update | epoch | averaged | test sacreBLEU | tgt tok/s |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['minutes']:g} | {r['error']} | | | | | |")
            continue
        tps = f"{r['tokens_per_s']:,}" if r["tokens_per_s"] else "n/a"
        lines.append(
            f"| {r['minutes']:g} | {r['checkpoint_minutes']:.1f} | {r['update']} | {r['epoch']} "
            f"| {r['checkpoints_averaged']} | {r['sacrebleu']:.1f} | {tps} |"
        )
    return "\n".join(lines)


def parse(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument(
        "--data", type=Path, required=True, help="folder of {train,val,test_2016_flickr}.{en,de}.gz"
    )
    ap.add_argument("--spm", type=Path, required=True, help="our 8K joint sentencepiece model for Multi30k")
    ap.add_argument("--minutes", type=float, default=30, help="training budget (fairseq --stop-time-hours)")
    ap.add_argument("--eval-at", type=float, nargs="+", default=[16, 21, 30], help="minute marks to score")
    ap.add_argument("--save-every-minutes", type=float, default=1.0)
    ap.add_argument(
        "--updates-per-minute",
        type=float,
        default=25,
        help="estimate of fairseq's speed here, to turn --save-every-minutes into updates",
    )
    ap.add_argument("--save-interval-updates", type=int, help="overrides the two above")
    ap.add_argument("--average", type=int, default=5, help="checkpoints averaged per mark")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/fairseq_m30k"))
    ap.add_argument("--out", type=Path, help="JSON lines (appended); default WORKDIR/curve.jsonl")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--validate", action="store_true", help="keep fairseq's dev validation (at each save)")
    ap.add_argument("--skip-train", action="store_true", help="only score the checkpoints in WORKDIR")
    ap.add_argument("--log-interval", type=int, default=20)
    # for quick checks only
    ap.add_argument(
        "--max-tokens",
        type=int,
        default=4096,
        help="the reference configuration: 4096 (change for tests only)",
    )
    ap.add_argument("--max-update", type=int, help="stop after this many updates as well (tests)")
    ap.add_argument("--limit-test", type=int, help="decode only the first N test sentences (tests)")
    args = ap.parse_args(argv)
    args.out = args.out or args.workdir / "curve.jsonl"
    return args


def main(argv=None) -> int:
    args = parse(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    bin_dir, test_bin = prepare(args)
    if not args.skip_train:
        train(args, bin_dir)
    ckpts = checkpoints(args)
    print(f"{len(ckpts)} checkpoints, minutes: " + " ".join(f"{c['train_s'] / 60:.2f}" for c in ckpts))
    rows = []
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for mark in args.eval_at:
        row = evaluate(args, test_bin, ckpts, mark)
        print(json.dumps(row), flush=True)
        with open(args.out, "a") as f:
            f.write(json.dumps(row) + "\n")
        rows.append(row)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
