"""The ablation planner: what a run will cost (ablate.jobs.estimate) and how many seeds decide a row
(ablate.report.decide), each figure against a hand computation or a simulation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from ablate.jobs.estimate import Estimate, Timing, estimate, makespan
from ablate.report.collect import Collection, RowConfigs, Run
from ablate.report.decide import (
    CAP,
    Look,
    decide,
    decide_command,
    pooled_sd,
    read_looks,
    record_looks,
    seeds_needed,
    spent,
    tost,
)
from ablate.tasks import PPL

MACHINE = "AMD EPYC (family 26, model 2); cpu (1 threads)"


def test_an_estimate_from_hand_made_records_is_the_hand_computation():
    timings = [
        Timing("A1", "cpu", MACHINE, 0.50, 30.0, 1000),  # seconds a step, outside training, parameters
        Timing("A1", "cpu", MACHINE, 0.70, 50.0, 1000),
        Timing("base", "cpu", MACHINE, 0.20, 20.0, 500),
        Timing("base", "cpu", "another CPU; cpu (1 threads)", 9.0, 9.0, 500),  # not this machine
        Timing("base", "tiny", MACHINE, 9.0, 9.0, 500),  # not this preset
    ]
    # measured: the median of A1's 0.5 and 0.7 s a step x 100 steps + the median of 30 and 50 s outside
    assert estimate("A1", "cpu", MACHINE, 100, 1000, timings, "cmd") == Estimate(
        0.6 * 100 + 40.0, "measured", "2 records of A1"
    )
    # scaled: the median over the preset's records of s a step per parameter (0.5e-3, 0.7e-3, 0.4e-3) is
    # 0.5e-3, x 2,000 parameters x 10 steps; outside: the median of 30, 50 and 20 s
    scaled = estimate("C3", "cpu", MACHINE, 10, 2000, timings, "cmd")
    assert scaled.basis == "scaled" and scaled.seconds == pytest.approx(0.5e-3 * 2000 * 10 + 30.0)
    unknown = estimate("A1", "multi30k", MACHINE, 100, 1000, timings, "python -m ablate.run ...")
    assert unknown == Estimate(None, "unknown", "python -m ablate.run ...")
    assert unknown.text() == "estimate unknown (python -m ablate.run ...)"


def test_the_total_runs_the_longest_jobs_first_on_the_free_slots():
    assert makespan([5, 4, 3, 3], 2) == 8  # 5+3 | 4+3
    assert makespan([5, 4, 3, 3], 1) == 15 and makespan([5, 4, 3, 3], 8) == 5 and makespan([], 3) == 0


def test_the_seeds_needed_for_a_hand_worked_case():
    """sd 1, a difference of 1, alpha 0.05, power 0.8. The normal quantiles give 2 (1.960 + 0.842)^2 = 15.7,
    16 seeds; on t quantiles n = 16 needs 2 (t_.975,30 + t_.8,30)^2 = 2 (2.042 + 0.854)^2 = 16.77 > 16, and
    n = 17 needs 2 (2.037 + 0.853)^2 = 16.70 <= 17: 17 seeds a side."""
    assert 2 * (2.0423 + 0.8538) ** 2 == pytest.approx(16.77, abs=0.01)
    assert seeds_needed(1.0, 1.0, 0.05, 0.8, cap=100) == 17
    assert seeds_needed(1.0, 1.0, 0.05, 0.8, cap=16) is None  # past the cap
    assert seeds_needed(0.5, 1.0, 0.05, 0.8, cap=100) == 6  # n = 5 needs 5.10, n = 6 needs 4.83
    # paired seeds: n - 1 degrees of freedom; n = 17 needs 2 (2.120 + 0.865)^2 = 17.8, n = 18 needs 17.7
    assert seeds_needed(1.0, 1.0, 0.05, 0.8, cap=100, paired=True) == 18


def test_tost_on_a_hand_made_pair():
    """Paired differences 0.1, 0.0, 0.2: mean 0.1, sd 0.1, standard error 0.1/sqrt(3) = 0.0577; the 90%
    interval is 0.1 -+ t_.95,2 (2.920) x 0.0577 = [-0.0686, 0.2686]: inside +-0.3, not inside +-0.2."""
    base, row = {1: 10.0, 2: 11.0, 3: 12.0}, {1: 10.1, 2: 11.0, 3: 12.2}
    lo, hi, inside = tost(base, row, 0.3, 0.05)
    assert lo == pytest.approx(-0.0686, abs=1e-4) and hi == pytest.approx(0.2686, abs=1e-4) and inside
    assert not tost(base, row, 0.2, 0.05)[2]
    assert pooled_sd([[1.0, 3.0], [2.0, 2.0, 5.0], [7.0]]) == pytest.approx(math.sqrt((2.0 + 6.0) / 3))


def test_obrien_fleming_spending_at_hand_values():
    """a(t) = 2 - 2 Phi(1.96 / sqrt(t)): all of alpha at t = 1, 2 - 2 Phi(2.772) = 0.0056 at t = 1/2."""
    assert spent(0.05, 1.0) == pytest.approx(0.05)
    assert spent(0.05, 0.5) == pytest.approx(2 - 2 * sps.norm.cdf(1.959964 / math.sqrt(0.5)), abs=1e-9)
    assert spent(0.05, 0.5) == pytest.approx(0.0056, abs=1e-4)


def _collection(values: dict[str, dict[int, float]]) -> Collection:
    runs = {
        row: {
            s: Run({"run_id": f"{row}-s{s}", "status": "finished", "metrics": {"dev_ppl": v}})
            for s, v in by.items()
        }
        for row, by in values.items()
    }
    return Collection(runs, RowConfigs({}, {}), [], "sim", None, None, [], None)


def _two_looks(rng: np.random.Generator, effect: float, sd: float = 1.0) -> str:
    """One simulated row through the planner, in a table of 10 rows of 3 seeds (the seed variance pooled
    over them, as over a preset's rows): a first look at 3 seeds, then, where undecided, the seeds it asks
    for and a second look under the alpha the first left."""
    others = {f"x{i}": {s: rng.normal(0.0, sd) for s in (1, 2, 3)} for i in range(8)}
    base = {s: rng.normal(0.0, sd) for s in (1, 2, 3)}
    row = {s: rng.normal(effect, sd) for s in (1, 2, 3)}

    def row_decision(looks: list[Look]):
        return next(
            d
            for d in decide(_collection({"base": base, "row": row, **others}), [PPL], looks)
            if d.row == "row"
        )

    d = row_decision([])
    if d.state != "undecided" or not d.needed:
        return d.state
    look = Look("sim", "row", "ppl", d.seeds, d.needed, d.alpha)
    for s in range(4, d.needed + 1):
        base[s], row[s] = rng.normal(0.0, sd), rng.normal(effect, sd)
    return row_decision([look]).state


@pytest.mark.slow
def test_two_looks_keep_the_false_positives_at_alpha_and_reach_the_power_promised():
    """Null rows taken through two looks: decided better or worse in at most 5% of them (Monte Carlo
    error, 3 standard errors, aside); rows 2 seed-sd worse (PPL: higher) decided worse in 80% at least.
    The 8 other rows of the table give the pooled seed variance its degrees of freedom."""
    rng = np.random.default_rng(0)
    n = 2000
    null = [_two_looks(rng, 0.0) for _ in range(n)]
    false = sum(s in ("better", "worse") for s in null) / n
    assert false <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / n), false
    power = sum(_two_looks(rng, 2.0) == "worse" for _ in range(n // 4)) / (n // 4)
    assert power >= 0.8 - 3 * math.sqrt(0.8 * 0.2 / (n // 4)), power


def test_the_decide_command_trains_exactly_the_seeds_asked_for(tmp_path):
    coll = _collection({"base": {1: 5.0, 2: 5.2, 3: 5.1}, "A1": {1: 5.3, 2: 5.1, 3: 5.6}})
    coll.results_dir = tmp_path
    (d,) = decide(coll, [PPL])
    assert d.state == "undecided" and d.needed and d.needed > 3
    cmd, looks = decide_command(coll, [d], ["experiment=x"])
    seeds = ",".join(map(str, range(1, d.needed + 1)))
    assert cmd == f"python -m ablate.run -m model=base,A1 seed={seeds} experiment=x"
    assert looks == [Look("sim", "A1", "ppl", 3, d.needed, d.alpha)]


def test_the_decide_command_of_one_claim_trains_its_rows_and_records_the_look_at_every_row(tmp_path):
    """--rows E: the command trains E and base alone, at E's seeds; the look is at every undecided row
    (C3's too, past the cap), since the report that showed E showed them all."""
    coll = _collection(
        {
            "base": {1: 5.0, 2: 5.2, 3: 5.1},
            "A1": {1: 5.3, 2: 5.1, 3: 5.6},
            "E": {1: 5.35, 2: 5.3, 3: 5.5},
            "C3": {1: 5.05, 2: 5.3, 3: 5.13},
        }
    )
    coll.results_dir = tmp_path
    ds = decide(coll, [PPL])
    assert [(d.state, d.needed) for d in ds] == [("undecided", 10), ("undecided", 8), ("undecided", None)]
    cmd, looks = decide_command(coll, ds, [], only=["E"])
    assert cmd == "python -m ablate.run -m model=base,E seed=1,2,3,4,5,6,7,8"
    assert [(lk.row, lk.planned) for lk in looks] == [("A1", 10), ("E", 8), ("C3", CAP)]
    assert decide_command(coll, ds, [], only=["C3"]) is None  # no seeds would decide it


def test_a_look_read_again_at_its_own_seeds_is_the_same_look(tmp_path):
    """The report after a decide command, on the same records, shows the decisions the command saw (its
    alpha is not spent twice), and a second command at those seeds writes no second look."""
    coll = _collection({"base": {1: 5.0, 2: 5.2, 3: 5.1}, "A1": {1: 5.3, 2: 5.1, 3: 5.6}})
    coll.results_dir = tmp_path
    (first,) = decide(coll, [PPL])
    _, looks = decide_command(coll, [first], [])
    record_looks(tmp_path, looks)
    (again,) = decide(coll, [PPL], read_looks(tmp_path))
    assert (again.state, again.alpha, again.lo, again.hi, again.needed) == (
        first.state, first.alpha, first.lo, first.hi, first.needed,
    )  # fmt: skip
    record_looks(tmp_path, decide_command(coll, [again], [])[1])
    assert read_looks(tmp_path) == looks
    coll.runs["base"][4] = Run({"run_id": "base-s4", "status": "finished", "metrics": {"dev_ppl": 5.1}})
    coll.runs["A1"][4] = Run({"run_id": "A1-s4", "status": "finished", "metrics": {"dev_ppl": 5.4}})
    (later,) = decide(coll, [PPL], read_looks(tmp_path))  # a second look spends what the first left
    assert later.seeds == 4 and later.alpha == pytest.approx(spent(0.05, 4 / first.needed) - first.alpha)


def test_a_later_look_spends_against_the_largest_plan_any_look_made():
    """Looks at 3, 6 and 8 seeds that planned 13, 15 and 12: the look at 12 seeds is at t = 12/15 (not
    12/12, which would spend all that is left), and spends a(0.8) less the three looks' alpha, by hand."""
    looks = [
        Look("sim", "A1", "ppl", n, planned, a)
        for n, planned, a in ((3, 13, 1e-4), (6, 15, 4e-3), (8, 12, 3e-3))
    ]
    seeds = range(1, 13)
    coll = _collection(
        {"base": {s: 5.0 + 0.01 * s for s in seeds}, "A1": {s: 5.1 + 0.02 * (s % 3) for s in seeds}}
    )
    (d,) = decide(coll, [PPL], looks)
    assert (d.seeds, d.planned) == (12, 15)
    by_hand = 2 - 2 * sps.norm.cdf(1.959964 / math.sqrt(12 / 15)) - (1e-4 + 4e-3 + 3e-3)
    assert d.alpha == pytest.approx(by_hand, abs=1e-6) and d.alpha == pytest.approx(0.02137, abs=1e-4)


def test_a_decided_row_keeps_its_look_when_other_rows_change_the_pooled_variance(tmp_path):
    """A row decided at its first look has that look recorded; read again at its seeds it keeps the alpha it
    spent, although seeds added to another row change the pooled variance (and so a first look's plan)."""
    coll = _collection(
        {"base": {1: 5.0, 2: 5.2, 3: 5.1}, "A1": {1: 6.0, 2: 6.3, 3: 6.1}, "E": {1: 5.35, 2: 5.3, 3: 5.5}}
    )
    coll.results_dir = tmp_path
    ds = decide(coll, [PPL])
    assert [d.state for d in ds] == ["worse", "undecided"]
    _, looks = decide_command(coll, ds, [], only=["E"])
    assert [(lk.row, lk.seeds, lk.alpha) for lk in looks] == [(d.row, 3, d.alpha) for d in ds]
    record_looks(tmp_path, looks)
    for s, (b, e) in enumerate([(5.9, 4.6), (4.4, 6.2), (6.1, 4.5)], start=4):
        coll.runs["base"][s] = Run({"run_id": f"base-s{s}", "status": "finished", "metrics": {"dev_ppl": b}})
        coll.runs["E"][s] = Run({"run_id": f"E-s{s}", "status": "finished", "metrics": {"dev_ppl": e}})
    assert decide(coll, [PPL])[0].alpha != ds[0].alpha  # unrecorded, the first look's alpha would move
    again = decide(coll, [PPL], read_looks(tmp_path))[0]
    assert (again.state, again.alpha, again.lo, again.hi) == ("worse", ds[0].alpha, ds[0].lo, ds[0].hi)


def test_a_looks_file_that_cannot_be_read_stops_the_report_in_one_line(tmp_path, capsys):
    """The alpha spent so far is in looks.jsonl: a line that is not a look stops the report, naming it,
    instead of deciding as if no look had been made."""
    import json

    from ablate.report.__main__ import main

    run = tmp_path / "base" / "base-x-s1"
    run.mkdir(parents=True)
    rec = {"schema_version": 1, "run_id": "base-x-s1", "row": "base", "seed": 1, "status": "finished",
           "task": "translation", "config": {}, "metrics": {"dev_ppl": 5.0}}  # fmt: skip
    (run / "record.json").write_text(json.dumps(rec))
    (tmp_path / "looks.jsonl").write_text('{"preset": "cpu", "row": "A1"\n')
    assert main(["metrics", "--results", str(tmp_path), "--out", "-", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"error: {tmp_path / 'looks.jsonl'} line 1: not a look (JSONDecodeError)")
