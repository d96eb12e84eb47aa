"""Step-matched stand-ins for timed CPU runs, several at once on one GPU: a hyperparameter search for the
Multi30k time budgets that costs minutes instead of an hour a run.

A CPU run with train.budget_minutes ends where its clock does; the same recipe with that number of steps
as train.max_steps (budget off, cosine to zero at the last step) is the same training up to the noise of
a seed (GPU attention and dropout draw different numbers, compute the same functions). So a configuration
is judged here by the steps it gets on the target machine, taken from measured CPU step rates; the
winner still needs the real timed run on that machine (docs/multi30k.md gives those).

Each run: NAME=OVERRIDES (space-separated Hydra overrides, `data=multi30k` and the GPU settings added);
--parallel of them run at a time. Writes <out>/summary.jsonl (record metrics, sacreBLEU recomputed from
the saved hypotheses, length ratios) and prints a table.

    python -m benchmarks.gpu_proxy_sweep --m30k DIR --out OUT --parallel 6 \\
        'preset30=experiment=multi30k_30min train.max_steps=6460' 'n3=... train.max_steps=8880'
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import sacrebleu

from ablate.records import evaluations

ROOT = Path(__file__).resolve().parents[1]


def launch(name: str, overrides: str, a) -> subprocess.Popen:
    cmd = [
        sys.executable, "-m", "ablate.run", "data=multi30k", f"data.root={a.m30k}", "logger=none",
        "trainer.accelerator=gpu", "trainer.progress_bar=false", "train.budget_minutes=null",
        f"results_dir={a.out}/runs/{name}", f"data.cache_dir={a.cache}", *overrides.split(),
    ]  # fmt: skip
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS=str(a.threads))
    log = open(Path(a.out) / f"{name}.log", "w")
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


def refs(m30k: str, split: str) -> list[str]:
    with gzip.open(f"{m30k}/{split}.de.gz", "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def summarize(name: str, overrides: str, a, wall: float) -> dict:
    recs = list((Path(a.out) / "runs" / name).rglob("record.json"))
    recs = [r for r in recs if "wandb" not in r.parts]
    if not recs:
        return {"trial": name, "overrides": overrides, "status": "no record"}
    run = recs[0].parent
    r = json.loads(recs[0].read_text())
    m = dict(r["metrics"])
    for e in evaluations.read(run, r["run_id"]):  # test figures: the run's evaluations, each a file
        m.update(e.metrics)
        r.setdefault("files", {}).update(e.files)
    out = dict(trial=name, overrides=overrides, status=r["status"], steps=r["steps"], params=r["params"])
    out.update(
        wall_min=round(wall / 60, 1), dev_ppl=round(m["dev_ppl"], 2), dev_bleu=round(m["dev_bleu"], 2),
        test_bleu=round(m.get("test_bleu", float("nan")), 2), device=r.get("device"),
    )  # fmt: skip
    for split, hyp in (("test_2016_flickr", r.get("files", {}).get("test_hyp")), ("val", "dev.hyp.txt")):
        if hyp and (run / hyp).is_file():
            hyps = (run / hyp).read_text(encoding="utf-8").split("\n")[:-1]
            b = sacrebleu.corpus_bleu(hyps, [refs(a.m30k, split)[: len(hyps)]])
            key = "test" if split != "val" else "dev"
            out[f"{key}_bleu_check"] = round(b.score, 2)
            out[f"{key}_len_ratio"] = round(b.sys_len / b.ref_len, 3)
    ppl = {}
    curves = run / "curves.jsonl"
    if curves.is_file():
        for line in curves.read_text().splitlines():
            c = json.loads(line)
            if "dev_ppl" in c:
                ppl[c["step"]] = round(c["dev_ppl"], 2)
    out["dev_ppl_by_step"] = ppl
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trials", nargs="+", help="NAME=OVERRIDES")
    ap.add_argument("--m30k", required=True, help="folder of the raw Multi30k files")
    ap.add_argument("--out", required=True)
    ap.add_argument("--cache", default=None, help="data.cache_dir (default OUT/cache)")
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2, help="CPU threads per run")
    a = ap.parse_args()
    a.cache = a.cache or f"{a.out}/cache"
    Path(a.out).mkdir(parents=True, exist_ok=True)
    todo = [t.split("=", 1) for t in a.trials]
    running: dict[str, tuple[subprocess.Popen, float, str]] = {}
    done = []
    while todo or running:
        while todo and len(running) < a.parallel:
            name, ov = todo.pop(0)
            running[name] = (launch(name, ov, a), time.time(), ov)
        time.sleep(2)
        for name, (p, t0, ov) in list(running.items()):
            if p.poll() is not None:
                del running[name]
                row = summarize(name, ov, a, time.time() - t0)
                row["returncode"] = p.returncode
                done.append(row)
                print(json.dumps(row), flush=True)
                with open(Path(a.out) / "summary.jsonl", "a") as f:
                    f.write(json.dumps(row) + "\n")
    print("| trial | steps | params | dev PPL | dev BLEU | test BLEU | test len ratio | minutes |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in done:
        print(
            f"| {r['trial']} | {r.get('steps')} | {r.get('params')} | {r.get('dev_ppl')} "
            f"| {r.get('dev_bleu')} | {r.get('test_bleu')} | {r.get('test_len_ratio')} "
            f"| {r.get('wall_min')} |"
        )


if __name__ == "__main__":
    main()
