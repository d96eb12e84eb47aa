"""What a run will cost before it starts: its wall time, from the records of runs already made, each
estimate naming its basis (as a batch scheduler predicts a job from the same user's earlier jobs, Tsafrir
et al. 2007). A record's speed is its training seconds a step; its time outside training (setup, dev
passes, the final decode) is its wall time less its training time. Records count within one preset:

- measured: records of the same row on this CPU and device: their seconds a step (the median over them)
  x the steps the run has left, plus their time outside training (the median);
- ratio: records of the same row made on other machines, each machine's times x its speed ratio to this
  one: the median over the rows both machines ran of (this machine's seconds a step / that machine's).
  One short calibration here (`calibration_row`: a row the other machines ran, a few dozen steps) gives
  the ratio to every machine that ran its row, and with it every row those machines ran;
- scaled: records of other rows on this machine: this machine's seconds a step per parameter (their
  median) x this row's parameters; at a preset's fixed tokens a step the FLOPs of a step grow with the
  parameters (6 N tokens); plus the same time outside training;
- budget: a run with `train.budget_minutes` trains for its budget, however many steps that is;
- unknown: no record of the preset on this machine and none of the row elsewhere: never a made-up number;
  the plan prints the one calibration command that gives one.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ablate.records.store import preset_key

MEASURE_STEPS = 50  # a calibration: enough steps for the seconds a step, past the first steps' warm-up
BASES = ("measured", "ratio", "scaled", "budget", "unknown")


@dataclass(frozen=True)
class Estimate:
    seconds: float | None  # wall time; None: unknown
    basis: str  # one of BASES
    detail: str  # what it comes from

    def as_record(self) -> dict[str, Any]:
        """As a record keeps it (`estimate`): the report puts it beside the time the run took."""
        return {"seconds": self.seconds, "basis": self.basis, "detail": self.detail}

    def text(self) -> str:
        if self.seconds is None:
            return f"estimate unknown ({self.detail})" if self.detail else "estimate unknown"
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
    preset = preset_key(cfg.get("recipe"), str((cfg.get("scale") or {}).get("name")))
    machine = f"{(rec.get('machine') or {}).get('cpu', '?')}; {rec.get('device', '?')}"
    return Timing(str(rec.get("row")), preset, machine, train / steps, max(0.0, wall - train), int(params))


def estimate(
    row: str,
    preset: str,
    machine: str,
    steps_left: int,
    params: int,
    timings: Iterable[Timing],
    command: str = "",
) -> Estimate:
    """The wall time of `steps_left` steps of `row` (with `params` parameters) under `preset` on
    `machine`, from the timings of the preset's records (module docstring); `command`, where given, is
    what an unknown estimate names."""
    pool = [t for t in timings if t.preset == preset]
    here = [t for t in pool if t.machine == machine]
    same = [t for t in here if t.row == row]
    if same:
        return _from(same, {machine: 1.0}, steps_left, "measured", _records(same, row))
    ratios = speed_ratios(pool, machine)
    there = [t for t in pool if t.row == row and t.machine in ratios]
    if there:
        return _from(there, ratios, steps_left, "ratio", _ratio_detail(there, ratios, row, here))
    if here and params:
        per_param = statistics.median(t.seconds_per_step / t.params for t in here)
        outside = statistics.median(t.outside_s for t in here)
        rows = sorted({t.row for t in here})
        what = f"{len(here)} record(s) of {', '.join(rows[:4])}{' ...' if len(rows) > 4 else ''}"
        return Estimate(per_param * params * steps_left + outside, "scaled", f"{what}, by parameters")
    return Estimate(None, "unknown", command)


def _from(timings: list[Timing], ratio: dict[str, float], steps: int, basis: str, detail: str) -> Estimate:
    """Steps x the median seconds a step, plus the median time outside training, each record's times x
    its machine's ratio."""
    per_step = statistics.median(t.seconds_per_step * ratio[t.machine] for t in timings)
    outside = statistics.median(t.outside_s * ratio[t.machine] for t in timings)
    return Estimate(per_step * steps + outside, basis, detail)


def _records(timings: list[Timing], row: str) -> str:
    return f"{len(timings)} record{'s' * (len(timings) > 1)} of {row}"


def speed_ratios(pool: Iterable[Timing], machine: str) -> dict[str, float]:
    """{other machine: this machine's seconds a step / that machine's}, the median over the rows both
    ran (each row's seconds a step the median of its records there); machines with no row in common
    with this one are left out."""
    by: dict[tuple[str, str], list[float]] = {}
    for t in pool:
        by.setdefault((t.machine, t.row), []).append(t.seconds_per_step)
    rate = {key: statistics.median(v) for key, v in by.items()}
    here = {row: s for (m, row), s in rate.items() if m == machine}
    ratios: dict[str, list[float]] = {}
    for (m, row), s in rate.items():
        if m != machine and row in here:
            ratios.setdefault(m, []).append(here[row] / s)
    return {m: statistics.median(r) for m, r in ratios.items()}


def _ratio_detail(there: list[Timing], ratios: dict[str, float], row: str, here: list[Timing]) -> str:
    """'2 records of A1 on 2 other machines x their speed ratio to this one (0.83, 1.40), by base'."""
    machines = sorted({t.machine for t in there})
    each = ", ".join(f"{ratios[m]:.2f}" for m in machines)
    by = sorted({t.row for t in here})
    n = len(machines)
    return (
        f"{_records(there, row)} on {n} other machine{'s' * (n > 1)} x {'their' if n > 1 else 'its'} "
        f"speed ratio to this one ({each}), by {', '.join(by[:4])}{' ...' if len(by) > 4 else ''}"
    )


def calibration_row(rows: dict[str, tuple[int, int]], timings: Iterable[Timing], preset: str) -> str:
    """The row to calibrate this machine on, of `rows` ({row: (params, steps)}, the sweep's rows): one that
    the most other machines ran under `preset` (each such machine's ratio then counts for every row it
    ran), the cheapest of those by parameters x steps."""
    machines: dict[str, set[str]] = {}
    for t in timings:
        if t.preset == preset:
            machines.setdefault(t.row, set()).add(t.machine)
    return min(rows, key=lambda r: (-len(machines.get(r, ())), rows[r][0] * rows[r][1], r))


def machine_folder(machine: str) -> str:
    """A folder name for a machine ('intel-r-xeon-r-processor-family-6-model-207-cpu-1-threads'): each
    machine's calibration records lie apart, since a calibration's run id does not name its machine."""
    return re.sub(r"[^a-z0-9]+", "-", machine.lower()).strip("-")


def makespan(seconds: list[float], parallel: int) -> float:
    """The wall time of jobs run `parallel` at a time in the order given, each started as a slot frees, as
    the launchers start a sweep's jobs (the sweep's order: an experiment lists its longest row first).
    Another order can be shorter or longer: [3, 3, 2, 2, 2] on 2 slots take 7, in the order 3, 2, 2, 3, 2
    they take 6."""
    slots = [0.0] * max(1, parallel)
    for s in seconds:
        i = slots.index(min(slots))
        slots[i] += s
    return max(slots) if seconds else 0.0


def duration(seconds: float) -> str:
    """3 h 05 min, 12 min, 40 s."""
    s = int(round(seconds))
    if s >= 3600:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    return f"{s // 60} min" if s >= 60 else f"{s} s"
