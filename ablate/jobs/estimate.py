"""What a run will cost before it starts: its wall time, from the records of runs already made, each
estimate naming its basis (as a batch scheduler predicts a job from the same user's earlier jobs, Tsafrir
et al. 2007). A record's speed is its training seconds a step; its time outside training (setup, dev
passes, the final decode) is its wall time less its training time. Records count within one preset:

- measured: records of the same row and model (`model_key`) on this CPU and device: their seconds a step
  (the median over them) x the steps the run has left, plus their time outside training (the median);
- ratio: records of the same row and model made on other machines, each machine's times x its speed
  ratio to this one: the median over the rows both machines ran of (this machine's seconds a step / that
  machine's).
  One short calibration here (`calibration_row`: a row the other machines ran, a few dozen steps) gives
  the ratio to every machine that ran its row, and with it every row those machines ran;
- scaled: records of other rows on this machine, of any architecture: this machine's seconds a step per
  unit of cost (their median) x this row's cost a step, plus the same time outside training. A step's
  cost (`count`, on the meta device: nothing computed) is its multiply-accumulates, as torch's FLOP
  counter counts one forward, backward and Adam step of the model on a batch of the step's tokens, plus
  ELEMENT_MACS for each element its operations write, plus STEP_MACS for the training loop's own work: at
  the presets' widths a step's elementwise work (attention's softmax over h x length^2 scores, the loss
  over the vocabulary, Adam over every parameter) is a third to a half of its time, and it grows with
  other keys than the matrix products do (h, the vocabulary, a recurrence's steps);
- budget: a run with `train.budget_minutes` trains for its budget, however many steps that is;
- unknown: no record of the preset on this machine and none of the row elsewhere, or a model that cannot
  be counted: never a made-up number; the plan prints the one calibration command that gives one.
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ablate.nn.config import ADDED_DEFAULTS, GATED_FFN
from ablate.records.store import preset_key

MEASURE_STEPS = 50  # a calibration: enough steps for the seconds a step, past the first steps' warm-up
# What one element written costs beside one multiply-accumulate: fitted on one machine (an AMD EPYC, one
# thread) over the Table 3 rows and a GRU at the cpu preset, one forward, backward and Adam step each
# (docs/planner.md); a machine's own speed is the one figure its records give
ELEMENT_MACS = 80
# The training loop's own work a step (its hooks, the optimizer's bookkeeping, the batch's collation), in
# multiply-accumulates of this machine's speed: base's step at the cpu preset takes 0.38 s in training and
# 0.33 s as its count's step alone (AMD EPYC, one thread), 0.05 s more, about 3 x 10^9 of its units
STEP_MACS = 3e9
# The sentence length, source and target, at which a step's cost is counted: its tokens a step come in
# sentences this long (attention's cost a token grows with it; at the presets' lengths it is a few percent
# of a step, and the same length for every row keeps the rows' ratios)
SENTENCE = 32
BASES = ("measured", "ratio", "scaled", "budget", "unknown")


@dataclass(frozen=True)
class Estimate:
    seconds: float | None  # wall time; None: unknown
    basis: str  # one of BASES
    detail: str  # what it comes from
    train_s: float | None = field(default=None, compare=False)  # the part of it that trains

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
    # its model's cost a step (`count`), or what counts it where asked: most estimates never need it
    cost: float | Callable[[], float | None]
    model: str = ""  # its model's config as recorded (`model_key`); "": not recorded


def model_key(model: dict[str, Any] | None) -> str:
    """A model's config (a record's `model_effective`) as the estimates compare it: less its vocabulary,
    which a prepared corpus gives (a row's records are of its model only where its command line changed
    none of it)."""
    if not model:
        return ""
    # a key added to the Transformer's config since, at its default, is what an older record built
    older = {k for k, v in model.items() if k in ADDED_DEFAULTS and ADDED_DEFAULTS[k] == v}
    kept = {k: v for k, v in model.items() if k != "vocab_size" and k not in older}
    return json.dumps(kept, sort_keys=True)


def timing(rec: dict[str, Any], cost: float | Callable[[], float | None]) -> Timing | None:
    """A finished record's timing, its model's cost a step given (`count`), or None where it lacks one (a
    record of an older version, no steps)."""
    steps, train, wall = (rec.get(k) for k in ("steps", "train_time_s", "wall_time_s"))
    if rec.get("status") != "finished" or not steps or not train or wall is None:
        return None
    cfg = rec.get("config") or {}
    preset = preset_key(cfg.get("recipe"), str((cfg.get("scale") or {}).get("name")))
    machine = f"{(rec.get('machine') or {}).get('cpu', '?')}; {rec.get('device', '?')}"
    outside = max(0.0, wall - train)
    model = model_key(rec.get("model_effective"))
    return Timing(str(rec.get("row")), preset, machine, train / steps, outside, cost, model)


def transformer_macs(m: Any, tokens: int, length: int = SENTENCE) -> float:
    """The multiply-accumulates of one training step of the Transformer `m` (a TransformerConfig) on
    `tokens` source and `tokens` target tokens in sentences of `length`: the forward's matrix products,
    x 3 with the backward's (a product's gradient to its input and to its weight, each as many). A token,
    per layer: its projections (d_model x h (d_k + d_v), twice: Q K V and the output), its scores and
    weighted values (h (d_k + d_v) x length), the feed-forward (2 d_model d_ff); the decoder's
    cross-attention projects the target's queries and outputs and the source's keys and values; the
    output layer, d_model x vocabulary a target token."""
    d, hk = m.d_model, m.n_heads * (m.d_k + m.d_v)
    proj, attend = 2 * d * hk, hk * length
    ffn = (3 if m.ffn in GATED_FFN else 2) * d * m.d_ff  # a gated FFN: W, V and W2
    enc = m.n_layers * (proj + attend + ffn)
    dec = m.n_dec_layers * (proj + attend + ffn + d * hk + attend)
    source = enc + m.n_dec_layers * d * hk  # the cross-attention's keys and values of each source token
    target = dec + d * m.vocab_size
    return 3.0 * tokens * (source + target)


@dataclass(frozen=True)
class Count:
    macs: float  # multiply-accumulates (torch's FLOP counter: 2 FLOPs each)
    elements: float  # elements written by the operations (views write none)

    @property
    def cost(self) -> float:
        return self.macs + ELEMENT_MACS * self.elements + STEP_MACS


def count(build: Callable[[], Any], tokens: int, length: int = SENTENCE) -> Count:
    """One training step of the model `build()` returns, counted on the meta device (nothing computed,
    nothing allocated): its forward on `tokens` source and target tokens in sentences of `length`, the
    paper's label-smoothed loss over the vocabulary, the backward and an Adam step. The model
    keeps the model contract (`forward(src, tgt_in)` -> hidden, `logits(hidden)`; docs/models.md)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import FlopCounterMode

    class Written(TorchDispatchMode):
        elements = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if not func.is_view:
                each = out if isinstance(out, tuple | list) else (out,)
                self.elements += sum(o.numel() for o in each if isinstance(o, torch.Tensor))
            return out

    length = max(1, min(length, tokens))
    with torch.device("meta"):
        model = build()
        batch = torch.ones(max(1, tokens // length), length, dtype=torch.long)
        adam = torch.optim.Adam(model.parameters())
        with FlopCounterMode(display=False) as flops, Written() as written:
            logits = model.logits(model(batch, batch)).flatten(0, -2).float()
            torch.nn.functional.cross_entropy(logits, batch.flatten(), label_smoothing=0.1).backward()
            adam.step()
    return Count(flops.get_total_flops() / 2, float(written.elements))


def estimate(
    row: str,
    preset: str,
    machine: str,
    steps_left: int,
    cost: float | Callable[[], float],
    timings: Iterable[Timing],
    command: str = "",
    model: str = "",
) -> Estimate:
    """The wall time of `steps_left` steps of `row` (of `cost` a step, `count`; its model `model`,
    `model_key`) under `preset` on `machine`, from the timings of the preset's records (module docstring):
    a record of the row counts as its own where it is of the same model (or either does not say);
    `command`, where given, is what an unknown estimate names."""
    pool = [t for t in timings if t.preset == preset]
    here = [t for t in pool if t.machine == machine]
    same = [t for t in here if _own(t, row, model)]
    if same:
        return _from(same, {machine: 1.0}, steps_left, "measured", _records(same, row))
    ratios = speed_ratios(pool, machine)
    there = [t for t in pool if _own(t, row, model) and t.machine in ratios]
    if there:
        return _from(there, ratios, steps_left, "ratio", _ratio_detail(there, ratios, row, here))
    counted = [(t, c) for t in here if (c := _value(t.cost))]
    if counted and (mine := _value(cost)):
        per_cost = statistics.median(t.seconds_per_step / c for t, c in counted)
        outside = statistics.median(t.outside_s for t, _ in counted)
        rows = sorted({t.row for t, _ in counted})
        what = f"{len(counted)} record(s) of {', '.join(rows[:4])}{' ...' if len(rows) > 4 else ''}"
        train = per_cost * mine * steps_left
        return Estimate(train + outside, "scaled", f"{what}, by the cost of a step", train)
    return Estimate(None, "unknown", command)


def _own(t: Timing, row: str, model: str) -> bool:
    return t.row == row and (not model or not t.model or t.model == model)


def _value(cost: float | Callable[[], float | None]) -> float | None:
    return cost() if callable(cost) else cost


def _from(timings: list[Timing], ratio: dict[str, float], steps: int, basis: str, detail: str) -> Estimate:
    """Steps x the median seconds a step, plus the median time outside training, each record's times x
    its machine's ratio."""
    per_step = statistics.median(t.seconds_per_step * ratio[t.machine] for t in timings)
    outside = statistics.median(t.outside_s * ratio[t.machine] for t in timings)
    return Estimate(per_step * steps + outside, basis, detail, per_step * steps)


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
