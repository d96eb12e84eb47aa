"""The behavioural fingerprint that proves a commit result-neutral: a tiny training run of each task at the
commit and at its parent, in git worktrees, every number of both compared (the dev and training curves,
the final metrics, the parameter count, the dev hypotheses' text). A figure the commit adds (a new metric)
is no difference: every figure the parent's run wrote must be there, equal.

    python tests/neutral_revs.py <commit> [translation,parsing]    # before listing it in .result-neutral-revs

It runs each revision's own command line (`python -m ablate.run`), which every revision has, so a commit
that moves or renames every module is checked the same way as one that edits a comment.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMON = ["trainer=cpu", "trainer.threads=1", "logger=none", "seed=1"]
RUNS = {  # long enough that beam search writes real sentences, short enough for CI (about 15 s each)
    "translation": ["recipe=tiny", "scale=tiny", "train.max_steps=150"],
    "parsing": ["experiment=wsj_parsing_builtin", "recipe=tiny", "scale=tiny", "train.max_steps=60",
                "decode.well_formed=true"],
}  # fmt: skip
TIMING = {"time_s", "tokens_per_s", "train/tokens_per_s"}


def tree(rev: str) -> str:
    """What a tiny run at `rev` depends on: the package, the plugins and the configs, as git tree ids."""
    return " ".join(_git("rev-parse", f"{rev}:{p}") for p in ("ablate", "hydra_plugins", "conf"))


def fingerprint(rev: str, task: str, scratch: Path) -> dict:
    """Every number of a tiny run of `task` at `rev` (timings left out)."""
    wt = scratch / f"{task}-{rev[:12]}"
    if not wt.exists():
        _git("worktree", "add", "--detach", "-f", str(wt), rev)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONPATH", "ABLATE_", "WANDB_"))}
    check = subprocess.run([sys.executable, "-c", "import ablate; print(ablate.__file__)"], cwd=wt, env=env,
                           capture_output=True, text=True)  # fmt: skip
    assert check.stdout.startswith(str(wt)), f"{rev}: the run would import {check.stdout.strip()}"
    args = [*RUNS[task], *COMMON, f"results_dir={wt}/results", f"data.cache_dir={wt}/cache"]
    p = subprocess.run([sys.executable, "-m", "ablate.run", *args], cwd=wt, env=env, capture_output=True,
                       text=True, timeout=900)  # fmt: skip
    if p.returncode != 0:
        raise RuntimeError(f"{rev} {task}: the tiny run failed: {p.stderr.strip()[-1500:]}")
    (rec_path,) = (wt / "results").rglob("record.json")
    rec, run = json.loads(rec_path.read_text()), rec_path.parent
    if (run / "evaluations.json").is_file():  # figures of an evaluation after training, beside the record
        rec["metrics"].update(json.loads((run / "evaluations.json").read_text())["metrics"])
    curves = [
        {k: v for k, v in json.loads(line).items() if k not in TIMING}
        for line in (run / "curves.jsonl").read_text().splitlines()
        if line.strip()
    ]
    return {
        "metrics": {k: v for k, v in rec["metrics"].items() if not k.endswith("_signature")},
        "params": rec.get("params"),
        "steps": rec.get("steps"),
        "curves": curves,
        "dev_hyp": hashlib.sha256((run / "dev.hyp.txt").read_bytes()).hexdigest(),
    }


def differences(a: dict, b: dict) -> list[str]:
    """What the parent's run `a` wrote that the commit's run `b` changed or left out."""
    out = [f"{k}: {a.get(k)} != {b.get(k)}" for k in ("params", "steps", "dev_hyp") if a.get(k) != b.get(k)]
    ma, mb = a["metrics"], b["metrics"]
    out += [
        f"metrics.{k}: {ma[k]} != {mb.get(k, 'missing')}" for k in sorted(ma) if ma[k] != mb.get(k, object())
    ]
    curves_b = [{k: y.get(k) for k in x} for x, y in zip(a["curves"], b["curves"])]
    if len(a["curves"]) != len(b["curves"]) or a["curves"] != curves_b:
        at = next((i for i, (x, y) in enumerate(zip(a["curves"], curves_b)) if x != y), None)
        out.append(f"curves differ (line {at}, {len(a['curves'])} vs {len(b['curves'])} lines)")
    return out


def check(rev: str, tasks: list[str], scratch: Path, cache: dict) -> list[str]:
    """What differs between `rev`^ and `rev` for each task (empty: result-neutral)."""
    problems = []
    for task in tasks:
        prints = []
        for r in (f"{rev}^", rev):
            key = (tree(r), task)
            if key not in cache:
                cache[key] = fingerprint(_git("rev-parse", r), task, scratch)
            prints.append(cache[key])
        problems += [f"{rev[:10]} {task}: {d}" for d in differences(*prints)]
    return problems


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()


if __name__ == "__main__":
    import tempfile

    tasks = sys.argv[2].split(",") if len(sys.argv) > 2 else list(RUNS)
    with tempfile.TemporaryDirectory() as d:
        try:
            found = check(_git("rev-parse", sys.argv[1]), tasks, Path(d), {})
        finally:
            _git("worktree", "prune")
    print("\n".join(found) or f"{sys.argv[1]}: result-neutral for {', '.join(tasks)}")
    sys.exit(1 if found else 0)
