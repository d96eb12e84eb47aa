"""The paper's test protocol (Table 2) on a trained run: average the last N checkpoints, decode, score
(ablate.training.evaluation).

    python -m ablate.evaluate RUN_DIR [--average 5] [--split test] [--src F --ref F] [--until-step S]
    python -m ablate.evaluate RUN_DIR --ensemble RUN_DIR2 RUN_DIR3 [...]   # the runs searched as one model
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from ablate.config.study import enter
from ablate.errors import first_line, os_error_line
from ablate.records.folder import step_checkpoints, step_of
from ablate.training.evaluation import evaluate_run, load_config


def main(argv: list[str] | None = None) -> int:
    enter()  # the study's task and model import by name (ablate.config.study)
    ap = argparse.ArgumentParser(prog="python -m ablate.evaluate", description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir")
    ap.add_argument(
        "--average", type=int, default=0, help="average the last N step checkpoints (0: last.ckpt)"
    )
    ap.add_argument("--split", default="test")
    ap.add_argument(
        "--until-step", type=int, help="only checkpoints up to this step (a curve point; record untouched)"
    )
    ap.add_argument("--src", help="a source file to translate instead of the split")
    ap.add_argument("--ref", help="its reference translations")
    ap.add_argument("--threads", type=int, help="torch threads (default: the run's trainer.threads)")
    ap.add_argument(
        "--ensemble",
        nargs="+",
        default=[],
        metavar="RUN_DIR",
        help="other runs searched with it as one model",
    )
    args = ap.parse_args(argv)
    try:
        _check_args(args)
        threads = args.threads or load_config(Path(args.run_dir)).trainer.threads or 1
        if args.threads is None:
            _note_busy_cores(threads)
        torch.set_num_threads(threads)
        m = evaluate_run(
            args.run_dir, args.average, args.split, args.src, args.ref, args.until_step, False, args.ensemble
        )
    except KeyboardInterrupt:  # evaluations.json is written whole at the end, or not at all
        print("[ablate] stopped: interrupted by Ctrl-C; the run's files are as they were", file=sys.stderr)
        return 130
    except (ValueError, OSError) as e:
        print(f"error: {os_error_line(e) if isinstance(e, OSError) else first_line(e)}", file=sys.stderr)
        return 2
    for k, v in m.items():
        print(f"{k:28s} {v:.2f}" if isinstance(v, float) else f"{k:28s} {v}")
    return 0


def _note_busy_cores(threads: int) -> None:
    """ablate.run's note on busy cores: beside a 2-thread training job, a beam-21 parse of section 23 took
    194 s on 2 threads, 71 s on 1, 33 s alone (docs/parsing.md)."""
    from ablate.cluster.cpu_load import busy_cores_note

    if note := busy_cores_note(threads, knob="--threads "):
        print(note, file=sys.stderr)


def _check_args(args) -> None:
    """Refuse, in one line, what evaluate_run would ignore or clip without a word."""
    if bool(args.src) != bool(args.ref):
        given, missing = ("--src", "--ref") if args.src else ("--ref", "--src")
        raise ValueError(f"{given} needs {missing}: a source file is scored against its references")
    if args.threads is not None and args.threads < 1:
        raise ValueError(f"--threads {args.threads}: at least 1")
    if args.average < 0:
        raise ValueError(f"--average {args.average}: a number of checkpoints, 0 (last.ckpt) or more")
    for run_dir in (Path(args.run_dir), *map(Path, args.ensemble)):
        _check_finished(run_dir, args.until_step)
        _check_average(run_dir, args)


def _check_average(run_dir: Path, args) -> None:
    if args.average:
        last = args.until_step if args.until_step is not None else float("inf")
        have = [p for p in step_checkpoints(run_dir / "checkpoints") if step_of(p) <= last]
        if args.average > len(have):
            raise ValueError(
                f"--average {args.average}: {run_dir / 'checkpoints'} holds {len(have)} step checkpoint(s)"
                + (f" up to step {args.until_step}" if args.until_step is not None else "")
            )


def _check_finished(run_dir: Path, until_step: int | None) -> None:
    """A run that has not finished has no final figures to evaluate: its last.ckpt is whatever step it
    reached (or is reaching). Only --until-step names a checkpoint, whose figures are kept apart."""
    from ablate.records.status import FINISHED
    from ablate.records.store import RECORD_NAME, read_record

    rec = read_record(run_dir / RECORD_NAME)
    if rec["status"] != FINISHED and until_step is None:
        steps = f" at step {rec['steps']}" if rec.get("steps") is not None else ""
        raise ValueError(
            f"{run_dir}: the run is {rec['status']}{steps}, not finished: evaluate it once it has finished, "
            "or name a checkpoint with --until-step S (its figures are printed, the record left as it is)"
        )


if __name__ == "__main__":
    sys.exit(main())
