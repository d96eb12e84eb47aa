"""The behavioural fingerprint behind an anchor of `.result-anchors`: tiny runs of a task's configurations
(every configuration its committed records ran, shortened, and the built-in one) at the anchor's revision
and at HEAD, in git worktrees, every number of both compared (the dev and training curves, the final
metrics, the parameter count, the dev hypotheses' text). A figure HEAD adds (a new metric) is no
difference: every figure the anchor's run wrote must be there, equal.

    python tests/result_anchors.py [<revision> [translation,parsing]] [--keep]  # every anchor, or one

An anchor's own runs are made once a machine: `--keep` writes their fingerprint under tests/anchors/ (a file
per revision, task, configurations and machine), and a check on that machine reads it instead of running
the revision again; HEAD's runs are made every time.

It runs each revision's own command line (`python -m ablate.run`), which every revision has, so a commit
that moves or renames every module is checked the same way as one that edits a comment. The corpora of
the committed records are read from ../shared (MULTI30K_DIR, PTB_SAMPLE_DIR override it).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
MULTI30K = Path(os.environ.get("MULTI30K_DIR", SHARED / "multi30k"))
PTB_SAMPLE = Path(os.environ.get("PTB_SAMPLE_DIR", SHARED / "ptb_sample"))
BASELINE = "ablate.baseline"  # a configuration that is a baseline's command line, not a training run's
COMMON = ["trainer=cpu", "trainer.threads=1", "logger=none", "seed=1"]
SHORT = ["train.val_every=2", "train.checkpoint_every=2", "decode.dev_limit=3"]
CONFIGS = {  # task -> name -> arguments; each long enough that beam search writes real sentences
    "translation": {
        "builtin": ["recipe=tiny", "scale=tiny", "train.max_steps=150", "train.average_last=1"],
        # the 20 rows of reports/table3_multi30k at its preset, 1/2000 of their steps (4 for base, 12 for
        # big: a row keeps its step column), the test set decoded in the run above
        "multi30k": ["-m", "experiment=table3_multi30k", f"data.root={MULTI30K}", "scale.steps=0.0005",
                     "train.average_last=0", *SHORT],
        # the 8 rows of studies/glu_variants at its recipe, 1/200 of their steps, run from the study's folder
        "glu_variants": ["-m", "experiment=glu_variants", f"data.root={MULTI30K}", "scale.steps=0.005",
                         "train.average_last=0", *SHORT],
    },
    "parsing": {
        "builtin": ["experiment=wsj_parsing_builtin", "recipe=tiny", "scale=tiny", "train.max_steps=60",
                    "task_cfg.well_formed=true"],
        # reports/table4_ptb_sample's baselines (python -m ablate.baseline): branching trees, treebank PCFG
        "right_branching": [BASELINE, "right", "--treebank", str(PTB_SAMPLE)],
        "pcfg": [BASELINE, "pcfg", "--treebank", str(PTB_SAMPLE)],
        # its recipe as its record holds it (the experiment file has changed since the anchors), the time
        # budget left out (the only figure a clock decides), dev F1 at the last step; with these keys set,
        # experiment=wsj_parsing_cpu_steps (21,000 steps, no budget) is the same configuration
        "ptb_sample": ["experiment=wsj_parsing_cpu", f"task_cfg.treebank_dir={PTB_SAMPLE}",
                       "train.max_steps=4", "schedule=cosine", "schedule.peak=0.001",
                       "train.budget_minutes=null",
                       "train.val_every=2", "train.checkpoint_every=2", "train.decode_every=4",
                       "decode.dev_limit=2", "decode.beam=4"],  # beam 21 of an untrained model: minutes
    },
}  # fmt: skip
# A configuration of a study's own experiment runs from the study's folder, at the revisions that have it.
STUDY_OF = {"glu_variants": "studies/glu_variants"}
TIMING = {"time_s", "tokens_per_s", "train/tokens_per_s", "parse_time_s", "test_parse_time_s"}


def tree(rev: str) -> str:
    """What a tiny run at `rev` depends on: the package, the plugins and the configs, as git tree ids."""
    return " ".join(_git("rev-parse", f"{rev}:{p}") for p in ("ablate", "hydra_plugins", "conf"))


def configs_at(rev: str | None, task: str) -> dict[str, list[str]]:
    """The configurations of `task` that revision `rev` (None: the working tree) can run: a study's only
    where the revision has the study's folder."""
    return {
        name: args
        for name, args in CONFIGS[task].items()
        if name not in STUDY_OF or rev is None or _has(rev, STUDY_OF[name])
    }


def _has(rev: str, path: str) -> bool:
    return (
        subprocess.run(
            ["git", "cat-file", "-e", f"{rev}:{path}"], cwd=ROOT, stderr=subprocess.DEVNULL
        ).returncode
        == 0
    )


def fingerprint(rev: str | None, task: str, scratch: Path) -> dict:
    """Every number of the tiny runs of `task` at `rev` (None: the working tree), timings left out, by
    configuration and row; and the code hashes their records name."""
    wt = ROOT if rev is None else scratch / f"{task}-{rev[:12]}"
    if not wt.exists():
        _git("worktree", "add", "--detach", "-f", str(wt), rev)
    out_dir = scratch / f"{task}-{rev or 'now'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONPATH", "ABLATE_", "WANDB_"))}
    check = subprocess.run([sys.executable, "-c", "import ablate; print(ablate.__file__)"], cwd=wt, env=env,
                           capture_output=True, text=True)  # fmt: skip
    assert check.stdout.startswith(str(wt)), f"{rev}: the run would import {check.stdout.strip()}"
    out: dict = {"runs": {}, "code_hash": set()}
    for name, config in configs_at(rev, task).items():
        results = out_dir / "results" / name
        cwd, run_env = wt, env
        if name in STUDY_OF:  # the study's folder finds its configs; the package is the worktree's
            cwd, run_env = wt / STUDY_OF[name], {**env, "PYTHONPATH": str(wt)}
        if config[0] == BASELINE:
            args = [BASELINE, *config[1:], "--results", str(results)]
        else:
            paths = [
                f"results_dir={results}",
                f"data.cache_dir={out_dir}/cache",
                f"hydra.sweep.dir={out_dir}/multirun/{name}",
                f"hydra.run.dir={out_dir}/outputs/{name}",
            ]
            args = ["ablate.run", *in_layout_of(rev, config), *COMMON, *paths]
        p = subprocess.run([sys.executable, "-m", *args], cwd=cwd, env=run_env, capture_output=True,
                           text=True, timeout=1800)  # fmt: skip
        if p.returncode != 0:
            raise RuntimeError(f"{rev} {task} {name}: the tiny run failed: {p.stderr.strip()[-1500:]}")
        for rec_path in sorted(results.rglob("record.json")):
            rec = json.loads(rec_path.read_text())
            out["runs"][f"{name} {rec.get('row')}"] = _numbers(rec, rec_path.parent)
            out["code_hash"].add(rec.get("code_hash"))
    return out


def in_layout_of(rev: str | None, args: list[str]) -> list[str]:
    """Command-line keys under the names revision `rev` has: a key that moved since (config.RENAMED) under
    its old name where `rev` predates the move."""
    if rev is None:
        return args
    if not _has(rev, "conf/schedule"):
        args = before_schedule_group(args)
    if subprocess.run(["git", "grep", "-q", "decode_every", rev, "--", "ablate"], cwd=ROOT).returncode == 0:
        return args
    from ablate.config import RENAMED

    old_name = {new: old for old, (new, _) in RENAMED.items()}
    out = []
    for arg in args:
        key, eq, value = arg.partition("=")
        out.append(f"{old_name.get(key, key)}{eq}{value}")
    return out


# The schedule's command-line keys as `train` held them before the `schedule` group (config.LEGACY_TRAIN).
_SCHEDULE_KEYS = {
    "schedule": "train.lr_schedule",
    "schedule.peak": "train.lr_peak",
    "schedule.warmup_steps": "train.warmup_steps",
    "schedule.scale": "train.lr_scale",
}


def before_schedule_group(args: list[str]) -> list[str]:
    """Command-line keys of the schedule under their names before its group; the rest as they are."""
    out = []
    for arg in args:
        key, eq, value = arg.partition("=")
        out.append(f"{_SCHEDULE_KEYS.get(key, key)}{eq}{value}")
    return out


def _numbers(rec: dict, run: Path) -> dict:
    # figures of evaluations after training, beside the record: one merged evaluations.json (older
    # revisions), or one file per protocol under evaluations/
    done = [run / "evaluations.json"] + sorted((run / "evaluations").glob("*.json"))
    for path in (p for p in done if p.is_file()):
        rec["metrics"].update(json.loads(path.read_text())["metrics"])
    lines = (run / "curves.jsonl").read_text().splitlines() if (run / "curves.jsonl").is_file() else []
    rows = [json.loads(line) for line in lines if line.strip()]
    curves = [{k: v for k, v in row.items() if k not in TIMING} for row in rows]
    hyp, metrics = run / "dev.hyp.txt", rec.get("metrics", {})
    return {
        "status": rec.get("status"),
        "metrics": {k: v for k, v in metrics.items() if not k.endswith("_signature") and k not in TIMING},
        "params": rec.get("params"),
        "steps": rec.get("steps"),
        "curves": curves,
        "dev_hyp": hashlib.sha256(hyp.read_bytes()).hexdigest() if hyp.is_file() else None,
    }


def differences(a: dict, b: dict) -> list[str]:
    """What the anchor's run `a` wrote that today's run `b` changed or left out."""
    keys = ("status", "params", "steps", "dev_hyp")
    out = [f"{k}: {a.get(k)} != {b.get(k)}" for k in keys if a.get(k) != b.get(k)]
    ma, mb = a["metrics"], b["metrics"]
    out += [
        f"metrics.{k}: {ma[k]} != {mb.get(k, 'missing')}" for k in sorted(ma) if ma[k] != mb.get(k, object())
    ]
    curves_b = [{k: y.get(k) for k in x} for x, y in zip(a["curves"], b["curves"])]
    if len(a["curves"]) != len(b["curves"]) or a["curves"] != curves_b:
        at = next((i for i, (x, y) in enumerate(zip(a["curves"], curves_b)) if x != y), None)
        out.append(f"curves differ (line {at}, {len(a['curves'])} vs {len(b['curves'])} lines)")
    return out


# An anchor's revision never changes, so its fingerprint is made once a machine and kept here: a file per
# (task, the revision's trees, the configurations, the machine). A machine is its processor and torch's
# version (float sums depend on both; one thread each); on another machine the fingerprint is made anew.
KEPT = ROOT / "tests" / "anchors"


def machine() -> str:
    import platform

    import torch

    cpu = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else platform.processor()
    keys = ("vendor_id", "cpu family", "model", "model name", "stepping", "flags")
    lines = (ln.partition(":") for ln in cpu.split("\n\n")[0].splitlines())  # the first processor's
    first = {k.strip(): v.strip() for k, _, v in lines}
    facts = [platform.machine(), torch.__version__, *(first.get(k, "") for k in keys)]
    return hashlib.sha256("\n".join(facts).encode()).hexdigest()[:12]


def kept_path(rev: str, task: str) -> Path:
    """Where the fingerprint of `rev`'s tiny runs of `task` on this machine is kept."""
    # the configurations as written before the schedule group, so that a kept fingerprint outlives its move
    written = {name: before_schedule_group(args) for name, args in configs_at(rev, task).items()}
    configs = json.dumps(written).replace(str(MULTI30K), "<multi30k>").replace(str(PTB_SAMPLE), "<ptb>")
    what = "\n".join([tree(rev), task, configs, json.dumps([COMMON, SHORT])])
    return KEPT / f"{task}-{hashlib.sha256(what.encode()).hexdigest()[:12]}-{machine()}.json"


def anchor_fingerprint(rev: str, task: str, scratch: Path, keep: bool) -> dict:
    """The fingerprint of the anchor `rev`: the kept one of this machine, else made (and kept if asked)."""
    path = kept_path(rev, task)
    if path.is_file():
        kept = json.loads(path.read_text())
        return {**kept, "code_hash": set(kept["code_hash"])}
    made = fingerprint(rev, task, scratch)
    if keep:
        KEPT.mkdir(exist_ok=True)
        path.write_text(json.dumps({**made, "code_hash": sorted(made["code_hash"])}, indent=1) + "\n")
    return made


def check(rev: str, task: str, code_hash: str, scratch: Path, cache: dict, keep: bool = False) -> list[str]:
    """What differs between the anchor `rev` of `task` and the working tree (empty: the anchor holds)."""
    key = (tree(rev), task)
    if key not in cache:
        cache[key] = anchor_fingerprint(rev, task, scratch, keep)
    if (task, None) not in cache:
        cache[(task, None)] = fingerprint(None, task, scratch)
    then, now = cache[key], cache[(task, None)]
    problems = [f"its runs name code {sorted(then['code_hash'])}"] if then["code_hash"] != {code_hash} else []
    for run, numbers in then["runs"].items():
        found = now["runs"].get(run)
        problems += (
            [f"{run}: not run now"] if found is None else [f"{run}: {d}" for d in differences(numbers, found)]
        )
    return [f"{rev[:10]} {task}: {p}" for p in problems]


def check_all(only: str | None, tasks: list[str], scratch: Path, keep: bool = False) -> list[str]:
    """What differs for every anchor of `tasks` (only those whose revision starts with `only`, if given)."""
    from ablate.records.staleness import anchors

    cache: dict = {}
    return [
        problem
        for task, by_hash in sorted(anchors(ROOT / ".result-anchors").items())
        if task in tasks
        for code_hash, rev in sorted(by_hash.items())
        if only is None or rev.startswith(only)
        for problem in check(rev, task, code_hash, scratch, cache, keep)
    ]


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()


if __name__ == "__main__":
    import argparse
    import tempfile

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("revision", nargs="?", help="only the anchors whose revision starts so")
    ap.add_argument("tasks", nargs="?", default=",".join(CONFIGS), help="tasks, comma-separated")
    ap.add_argument("--configs", help="only these configurations (comma-separated names of CONFIGS)")
    ap.add_argument("--keep", action="store_true", help=f"keep the anchors' fingerprints in {KEPT.name}/")
    args = ap.parse_args()
    if args.configs:
        keep = set(args.configs.split(","))
        CONFIGS = {t: {n: c for n, c in by.items() if n in keep} for t, by in CONFIGS.items()}
    tasks = args.tasks.split(",")
    with tempfile.TemporaryDirectory() as d:
        try:
            found = check_all(args.revision, tasks, Path(d), args.keep)
        finally:
            _git("worktree", "prune")
    print("\n".join(found) or f"every anchor of {', '.join(tasks)} holds")
    sys.exit(1 if found else 0)
