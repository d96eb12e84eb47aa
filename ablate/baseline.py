"""Baselines of Table 4 on the same trees, scored the same way as the Transformer (docs/parsing.md):

    python -m ablate.baseline right --treebank DIR     # right-branching trees, the gold tags
    python -m ablate.baseline left --treebank DIR      # left-branching trees, the gold tags
    python -m ablate.baseline pcfg --treebank DIR      # the treebank PCFG of sections 02-21, exact CKY

Each reads sections 02-21 of DIR, parses 22 (dev) and 23 (test), and writes a record (group `baseline`,
task parsing) under --results/<row>/<run id>/ with both splits' figures, their bootstrap intervals, the
time and the peak memory; `python -m ablate.report table4` shows it beside the Transformer's rows.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import resource
import shlex
import sys
import time
from pathlib import Path

from ablate.config import default_results
from ablate.data.treebank.tree import to_string
from ablate.data.treebank.wsj import load_split
from ablate.errors import doing, first_line, os_error_line
from ablate.records import status
from ablate.records.folder import atomic_write_text, run_lock
from ablate.records.store import RECORD_NAME, baseline_record
from ablate.tasks.parsing import ParsingTask
from ablate.tasks.parsing.baselines import KINDS, make_parser
from ablate.tasks.parsing.pcfg import Markov
from ablate.tasks.parsing.score import figures as score_figures
from ablate.tasks.parsing.score import parsed_result, sentence_counts

ROWS = {"right": "right_branching", "left": "left_branching", "pcfg": "pcfg"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ablate.baseline", description=__doc__.split("\n\n")[0])
    ap.add_argument("kind", choices=KINDS)
    ap.add_argument("--treebank", required=True, help="<dir>/<section>/*.mrg, as task_cfg.treebank_dir")
    ap.add_argument("--results", default=default_results(), help="where records go")
    ap.add_argument("--vertical", type=int, default=Markov.vertical, help="pcfg: 2 = parent annotation")
    ap.add_argument("--horizontal", type=int, default=Markov.horizontal, help="pcfg: siblings remembered")
    args = ap.parse_args(argv)
    config = {"baseline": {"kind": args.kind}, "data": {"name": "wsj", "treebank_dir": args.treebank}}
    if args.kind == "pcfg":
        config["baseline"] |= {"vertical": args.vertical, "horizontal": args.horizontal}
    row = ROWS[args.kind]
    run_id = f"{row}-{hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:12]}"
    folder = Path(args.results) / row / run_id
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with run_lock(folder) as mine:
            if not mine:
                raise ValueError(f"{folder}: another process is running this baseline")
            with doing(f"running the baseline in {folder}"):
                return _run(folder, run_id, row, config, args)
    except (OSError, ValueError) as e:
        print(f"error: {os_error_line(e) if isinstance(e, OSError) else first_line(e)}", file=sys.stderr)
        return 2


def _run(folder: Path, run_id: str, row: str, config: dict, args: argparse.Namespace) -> int:
    path = folder / RECORD_NAME
    if status.on_disk(path) == status.FINISHED:
        print(f"{run_id}: already finished ({path})")
        return 0
    train, dev, test = (load_split(args.treebank, s) for s in ("train", "dev", "test"))
    command = shlex.join(["python", "-m", "ablate.baseline", *sys.argv[1:]])
    started = baseline_record(run_id, row, ParsingTask.name, config, command=command)
    rec = status.transition(path, "start", started)
    try:
        t0 = time.perf_counter()
        parse = make_parser(args.kind, train, Markov(args.vertical, args.horizontal))
        fields = {"train_time_s": time.perf_counter() - t0, "metrics": {}, "files": {}}
        for split, gold in (("dev", dev), ("test", test)):
            _parse_split(folder, split, gold, parse, fields)
        fields["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    except KeyboardInterrupt:
        status.transition(path, "interrupt", rec, "interrupted by Ctrl-C; the same command runs it again")
        return 130
    except Exception as e:
        status.transition(path, "fail", rec, first_line(e))
        raise
    rec = status.transition(path, "finish", rec, **fields)
    m = rec["metrics"]
    dev = f"{m['f1']:.2f} [{m['f1_lo']:.2f}, {m['f1_hi']:.2f}]"
    test = f"{m['test_f1']:.2f} [{m['test_f1_lo']:.2f}, {m['test_f1_hi']:.2f}]"
    print(f"{run_id}: dev 22 F1 {dev}, test 23 F1 {test} ({path})")
    return 0


def _parse_split(folder: Path, split: str, gold: list, parse, fields: dict) -> None:
    """Parse one split's sentences, score them, write the trees; the figures go into `fields` (test's
    with the prefix test_, as ablate.evaluate writes them)."""
    t0 = time.perf_counter()
    parsed = [parse(g) for g in gold]
    prefix = "" if split == "dev" else f"{split}_"
    result = parsed_result(gold, [t for t, _ in parsed])
    figures = score_figures(result, [[] for _ in parsed])
    figures |= {"n_fallback": sum(f for _, f in parsed), "parse_time_s": time.perf_counter() - t0}
    fields["metrics"] |= {prefix + k: v for k, v in figures.items()}
    name = f"{split}.trees.txt"
    atomic_write_text(folder / name, "".join(to_string(t) + "\n" for t, _ in parsed))
    fields["files"][f"{split}_trees"] = name
    atomic_write_text(folder / f"{split}.evalb.json", sentence_counts(result))  # Table 4's paired test
    fields["files"][f"{split}_evalb"] = f"{split}.evalb.json"


if __name__ == "__main__":
    sys.exit(main())
