"""What a run will cost before it starts: its wall time, from the records of runs already made on the same
machine, each estimate naming its basis (as a batch scheduler predicts a job from the same user's earlier
jobs, Tsafrir et al. 2007):

- measured: records of the same row and preset on this CPU and device: their training seconds a step (the
  median over them) x the steps the run has left, plus their time outside training (setup, dev passes, the
  final decode: wall time less training time);
- scaled: records of other rows of the same preset on this CPU and device: this machine's training
  seconds a step per parameter (their median) x this row's parameters; at a preset's fixed tokens a step
  the FLOPs of a step grow with the parameters (6 N tokens), plus the same time outside training;
- unknown: no record of the preset on this machine: never a made-up number, but the one short command
  that measures it.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

MEASURE_STEPS = 50  # the short run that gives a machine's seconds a step (unknown's command)


@dataclass(frozen=True)
class Estimate:
    seconds: float | None  # wall time; None: unknown
    basis: str  # measured | scaled | unknown
    detail: str  # what it comes from, or the command that would measure it

    def as_record(self) -> dict[str, Any]:
        """As a record keeps it (`estimate`): the report puts it beside the time the run took."""
        return {"seconds": self.seconds, "basis": self.basis, "detail": self.detail}

    def text(self) -> str:
        if self.seconds is None:
            return f"estimate unknown (measure: {self.detail})"
        return f"~{duration(self.seconds)} ({self.basis}: {self.detail})"


@dataclass(frozen=True)
class Timing:
    """What one finished record says about its machine's speed."""

    row: str
    preset: str
    machine: str  # the CPU as the record names it, and the device
    seconds_per_step: float
    outside_s: float  # wall time less training time
    params: int


def timing(rec: dict[str, Any]) -> Timing | None:
    """A finished record's timing, or None where it lacks one (a record of an older version, no steps)."""
    steps, train, wall, params = (rec.get(k) for k in ("steps", "train_time_s", "wall_time_s", "params"))
    if rec.get("status") != "finished" or not steps or not train or wall is None or not params:
        return None
    cfg = rec.get("config") or {}
    recipe, scale = cfg.get("recipe"), (cfg.get("scale") or {}).get("name")
    preset = str(scale) if recipe in (None, scale) else f"{recipe}+{scale}"
    machine = f"{(rec.get('machine') or {}).get('cpu', '?')}; {rec.get('device', '?')}"
    return Timing(str(rec.get("row")), preset, machine, train / steps, max(0.0, wall - train), int(params))


def estimate(
    row: str, preset: str, machine: str, steps_left: int, params: int, timings: Iterable[Timing], command: str
) -> Estimate:
    """The wall time of `steps_left` steps of `row` (with `params` parameters) under `preset` on
    `machine`, from the timings of records made there; `command` measures it where none was."""
    here = [t for t in timings if t.preset == preset and t.machine == machine]
    same = [t for t in here if t.row == row]
    if same:
        per_step = statistics.median(t.seconds_per_step for t in same)
        outside = statistics.median(t.outside_s for t in same)
        n = len(same)
        return Estimate(per_step * steps_left + outside, "measured", f"{n} record{'s' * (n > 1)} of {row}")
    if here and params:
        per_param = statistics.median(t.seconds_per_step / t.params for t in here)
        outside = statistics.median(t.outside_s for t in here)
        rows = sorted({t.row for t in here})
        what = f"{len(here)} record(s) of {', '.join(rows[:4])}{' ...' if len(rows) > 4 else ''}"
        return Estimate(per_param * params * steps_left + outside, "scaled", f"{what}, by parameters")
    return Estimate(None, "unknown", command)


def makespan(seconds: list[float], parallel: int) -> float:
    """The wall time of jobs run `parallel` at a time, each started as a slot frees (longest first, as a
    launcher's queue of known jobs would be best ordered; a lower bound for another order)."""
    slots = [0.0] * max(1, parallel)
    for s in sorted(seconds, reverse=True):
        i = slots.index(min(slots))
        slots[i] += s
    return max(slots) if seconds else 0.0


def duration(seconds: float) -> str:
    """3 h 05 min, 12 min, 40 s."""
    s = int(round(seconds))
    if s >= 3600:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    return f"{s // 60} min" if s >= 60 else f"{s} s"
