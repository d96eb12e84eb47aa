"""Where base's dev perplexity has levelled off: the step rule of a step-matched Table 3 protocol.

    python -m ablate.report levelled <run folder | curves.jsonl> [--curve NAME] [--gain 0.01] [--more 0.1]

The rule: the first dev evaluation s (from --start, 1,000 steps, on: warmup and the first alignment do
not count) after which --more (10%) more steps improve base's dev PPL by less than --gain (1%). Dev PPL
evaluated every few hundred steps moves by more than 1% from one evaluation to the next in both
directions, so the 10% step is read over a longer horizon H (1.5 s) as its compound: the best dev PPL up
to s is within (1 + gain)^(ln H / ln(1 + more)) of the best up to H s (1.01 over 10% -> 4.3% over 1.5x).
Best-so-far rather than the value at s: a noisy high point never makes the curve look flat. Only base's
curve is read, and the rule is fixed before other rows run.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Rule:
    gain: float = 0.01  # relative improvement in dev PPL ...
    more: float = 0.1  # ... that this many more steps (a fraction of s) must stay under
    horizon: float = 1.5  # the improvement is read from s to horizon * s, as the compound of `more`
    start: int = 1000  # no earlier evaluation counts (warmup and the first alignment)

    @property
    def threshold(self) -> float:
        """Allowed ratio best(<= s) / best(<= horizon s)."""
        return (1 + self.gain) ** (math.log(self.horizon) / math.log(1 + self.more))


@dataclass(frozen=True)
class Check:
    step: int
    best: float  # best dev PPL up to step
    best_ahead: float  # best dev PPL up to horizon * step
    ratio: float
    levelled: bool


def checks(points: list[tuple[int, float]], rule: Rule) -> list[Check]:
    """One check per evaluation s >= rule.start whose horizon the curve reaches."""
    points = sorted(points)
    last = points[-1][0] if points else 0
    out = []
    for s, _ in points:
        if s < rule.start or rule.horizon * s > last:
            continue
        best = min(p for t, p in points if t <= s)
        ahead = min(p for t, p in points if t <= rule.horizon * s)
        ratio = best / ahead
        out.append(Check(s, best, ahead, ratio, ratio <= rule.threshold))
    return out


def levelled_step(points: list[tuple[int, float]], rule: Rule) -> int | None:
    """The step the rule chooses, or None while the curve has not levelled off (or is too short)."""
    return next((c.step for c in checks(points, rule) if c.levelled), None)


def read_curve(path: Path, curve: str | None = None) -> list[tuple[int, float]]:
    """(step, dev PPL) from a run folder's curves.jsonl (or the file itself); `curve`: only the lines with
    that "curve" value (a file that holds several, as docs/data's do). Raises ValueError naming the file
    (and line) for a line that is not a JSON object with a step, a dev PPL that is not finite (the run
    diverged: no step is levelled), several curves and none chosen, or no dev PPL at all."""
    path = path / "curves.jsonl" if path.is_dir() else path
    points, names = [], set()
    for n, line in enumerate(path.read_text().splitlines(), 1):
        try:
            row = json.loads(line)
            if row.get("dev_ppl") is None or (curve is not None and row.get("curve") != curve):
                continue
            step, ppl = int(row["step"]), float(row["dev_ppl"])
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{n}: not JSON ({e.msg})") from None
        except (AttributeError, KeyError, TypeError, ValueError):
            raise ValueError(f"{path}:{n}: not an object with an integer step and a dev_ppl") from None
        if not math.isfinite(ppl):
            raise ValueError(f"{path}:{n}: dev_ppl {ppl} at step {step}: the run diverged")
        names.add(row.get("curve"))
        points.append((step, ppl))
    if len(names) > 1:
        listed = ", ".join(sorted(map(str, names)))
        raise ValueError(f"{path}: several curves ({listed}): choose one with --curve")
    if not points:
        which = f' with "curve": "{curve}"' if curve is not None else ""
        raise ValueError(f"{path}: no dev_ppl lines{which}")
    return points


def _above(low: float):
    def parse(text: str) -> float:
        v = float(text)
        if not v > low:
            raise argparse.ArgumentTypeError(f"{text}: must be above {low:g}")
        return v

    return parse


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m ablate.report levelled", description=__doc__.split("\n\n")[0])
    p.add_argument("path", type=Path, help="a run folder (its curves.jsonl) or a curves.jsonl file")
    p.add_argument("--curve", default=None, help='read only the lines whose "curve" is this')
    d = Rule()
    p.add_argument("--gain", type=float, default=d.gain)
    p.add_argument("--more", type=_above(0.0), default=d.more, help="a fraction of s, > 0")
    p.add_argument("--horizon", type=_above(1.0), default=d.horizon, help="a multiple of s, > 1")
    p.add_argument("--start", type=int, default=d.start)
    args = p.parse_args(argv)
    rule = Rule(args.gain, args.more, args.horizon, args.start)
    try:
        points = read_curve(args.path, args.curve)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"| step | best dev PPL | best up to {rule.horizon:g}x | ratio | <= {rule.threshold:.4f} |")
    print("|---:|---:|---:|---:|---|")
    for c in checks(points, rule):
        mark = "yes" if c.levelled else ""
        print(f"| {c.step} | {c.best:.3f} | {c.best_ahead:.3f} | {c.ratio:.4f} | {mark} |")
    step = levelled_step(points, rule)
    last = max((t for t, _ in points), default=0)
    print(f"levelled at step {step}" if step is not None else f"not levelled by step {last}")
    return 0
