"""Does `ablate.prepare` fit a WMT14-size corpus (4.5M pairs) in 2 GB and 15 minutes on 2 cores, and how fast
does the training loader produce batches from the result?

    nice -n 10 python -m benchmarks.prepare_scale --multi30k DIR [--pairs 4500000] [--work /tmp/prepare_scale]

1. A synthetic corpus: each line joins two random Multi30k training pairs (about WMT's 25 words a line) and
   changes one random character on each side, so lines differ and rare word types appear the way they do in
   web text. A few bad lines are planted at fixed rates (empty, whitespace, invalid UTF-8, over-long,
   extreme length ratio) and must come back as counts in meta.json.
2. `python -m ablate.prepare data=wmt14_en_de data.train_src=... (local files, no download)` in a child
   process under /usr/bin/time -v: wall time and peak RSS.
3. The loader: StepSampler + StepStream (the datamodule's train stream) over the prepared train arrays at
   max_tokens 4096, arrays loaded fully (what Seq2SeqData.setup does today) and memory-mapped
   (binarize.load_npz_mmap): load time, sampler set-up, batches/s, tokens/s, RSS.

Results go to <work>/result.json and stdout.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def rss_mb() -> tuple[float, float]:
    """(current, peak) resident set size of this process in MB."""
    vals = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(("VmRSS", "VmHWM")):
            k, v = line.split(":")
            vals[k] = int(v.split()[0]) / 1024
    return vals.get("VmRSS", 0.0), vals.get("VmHWM", 0.0)


def generate(multi30k: Path, out: Path, pairs: int, seed: int = 0) -> dict:
    rng = random.Random(seed)
    en = gzip.open(multi30k / "train.en.gz", "rt", encoding="utf-8").read().split("\n")[:-1]
    de = gzip.open(multi30k / "train.de.gz", "rt", encoding="utf-8").read().split("\n")[:-1]
    letters = "abcdefghijklmnopqrstuvwxyzäöüß"
    planted = {"empty": 0, "invalid_utf8": 0, "too_long": 0, "length_ratio": 0}
    n = len(en)

    def mutate(s: str) -> str:
        p = rng.randrange(len(s))
        return s[:p] + rng.choice(letters) + s[p + 1 :] if s[p].isalpha() else s

    with open(out / "train.en", "wb") as fe, open(out / "train.de", "wb") as fd:
        for i in range(pairs):
            a, b = rng.randrange(n), rng.randrange(n)
            s = mutate(en[a] + " " + en[b]).encode()
            t = mutate(de[a] + " " + de[b]).encode()
            if i % 100_003 == 7:
                s, planted["empty"] = b"   ", planted["empty"] + 1
            elif i % 250_007 == 11:
                t, planted["invalid_utf8"] = t + b" \xff\xfe", planted["invalid_utf8"] + 1
            elif i % 300_007 == 13:
                s, planted["too_long"] = s * 40, planted["too_long"] + 1
            elif i % 200_003 == 17:
                s, planted["length_ratio"] = b"Yes", planted["length_ratio"] + 1
            fe.write(s + b"\n")
            fd.write(t + b"\n")
    for split, stem in (("dev", "val"), ("test", "test_2016_flickr")):
        for lang in ("en", "de"):
            with gzip.open(multi30k / f"{stem}.{lang}.gz", "rb") as f:
                (out / f"{split}.{lang}").write_bytes(f.read())
    return planted


def run_prepare(work: Path, spm_sentences: int, vocab: int) -> dict:
    cmd = [
        "/usr/bin/time",
        "-v",
        sys.executable,
        "-m",
        "ablate.prepare",
        "data=wmt14_en_de",
        f"data.spm_sentences={spm_sentences}",
        f"data.vocab_size={vocab}",
        f"--cache={work / 'cache'}",
    ] + [
        f"data.{s}_{side}={work / f'{s}.{lang}'}"
        for s in ("train", "dev", "test")
        for side, lang in (("src", "en"), ("tgt", "de"))
    ]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    print(p.stdout)
    if p.returncode != 0:
        print(p.stderr, file=sys.stderr)
        raise SystemExit(f"prepare failed ({p.returncode})")
    peak_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr).group(1))
    user = float(re.search(r"User time \(seconds\): ([\d.]+)", p.stderr).group(1))
    sys_t = float(re.search(r"System time \(seconds\): ([\d.]+)", p.stderr).group(1))
    out = Path(p.stdout.strip().splitlines()[-1])
    return {
        "folder": str(out),
        "wall_s": round(wall, 1),
        "cpu_s": round(user + sys_t, 1),
        "peak_rss_mb": round(peak_kb / 1024),
        "meta": json.loads((out / "meta.json").read_text()),
    }


def bench_loader(folder: Path, mmap: bool, batches: int, max_tokens: int = 4096) -> dict:
    from ablate.data.batching import StepSampler
    from ablate.data.datamodule import StepStream
    from ablate.data.dataset import Encoded

    r0, _ = rss_mb()
    t0 = time.perf_counter()
    data = Encoded.load(folder / "train.npz", mmap=mmap)
    t_load = time.perf_counter() - t0
    t0 = time.perf_counter()
    sampler = StepSampler(data.src_lens + 1, data.tgt_lens + 1, max_tokens, 1, 1, 0, seed=1)
    t_init = time.perf_counter() - t0
    it = iter(StepStream(data, sampler))
    t0 = time.perf_counter()
    next(it)  # builds the epoch plan
    t_plan = time.perf_counter() - t0
    real = padded = 0
    t0 = time.perf_counter()
    for _ in range(batches):
        mb, b = next(it)
        real += int((b.tgt_out != 0).sum()) + int((b.src != 0).sum())
        padded += b.src.numel() + b.tgt_out.numel()
    dt = time.perf_counter() - t0
    r1, peak = rss_mb()
    return {
        "mmap": mmap,
        "load_s": round(t_load, 2),
        "sampler_init_s": round(t_init, 2),
        "first_batch_s (epoch plan)": round(t_plan, 2),
        "batches_per_s": round(batches / dt, 1),
        "tokens_per_s (src+tgt, no padding)": round(real / dt),
        "padded_tokens_per_s": round(padded / dt),
        "rss_increase_mb": round(r1 - r0),
        "peak_rss_mb": round(peak),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--multi30k", type=Path, required=True)
    ap.add_argument("--pairs", type=int, default=4_500_000)
    ap.add_argument("--spm-sentences", type=int, default=1_000_000)
    ap.add_argument("--vocab", type=int, default=37_000)
    ap.add_argument("--work", type=Path, default=Path("/tmp/prepare_scale"))
    ap.add_argument("--batches", type=int, default=2000)
    ap.add_argument("--loader-only", action="store_true")
    a = ap.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    result_path = a.work / "result.json"
    result = json.loads(result_path.read_text()) if result_path.is_file() else {}
    if not a.loader_only:
        t0 = time.perf_counter()
        result["planted"] = generate(a.multi30k, a.work, a.pairs)
        result["generate_s"] = round(time.perf_counter() - t0, 1)
        result["pairs"] = a.pairs
        result["spm_sentences"] = a.spm_sentences
        result["vocab_size"] = a.vocab
        result["cpus"] = os.cpu_count()
        result["loadavg_before"] = os.getloadavg()
        result["prepare"] = run_prepare(a.work, a.spm_sentences, a.vocab)
        result["loadavg_after"] = os.getloadavg()
        result_path.write_text(json.dumps(result, indent=2))
    folder = Path(result["prepare"]["folder"])
    result["loader"] = [bench_loader(folder, True, a.batches), bench_loader(folder, False, a.batches)]
    result_path.write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if k != "prepare"}, indent=2))
    print(json.dumps({k: v for k, v in result["prepare"].items() if k != "meta"}, indent=2))
    print(json.dumps(result["prepare"]["meta"]["splits"], indent=2))
    print(json.dumps(result["prepare"]["meta"]["seconds"], indent=2))


if __name__ == "__main__":
    main()
