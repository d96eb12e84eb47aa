"""The ablation planner: what a run will cost (ablate.jobs.estimate) and how many seeds decide a row
(ablate.report.decide), each figure against a hand computation or a simulation."""

from __future__ import annotations

import itertools
import math
import re
from pathlib import Path

import numpy as np
import pytest
from scipy import optimize
from scipy import stats as sps

from ablate.jobs.estimate import Estimate, Timing, estimate, makespan
from ablate.report.collect import Collection, RowConfigs, Run
from ablate.report.decide import (
    Design,
    Look,
    LooksError,
    decide,
    decide_command,
    decide_tables,
    decide_values,
    looks_made,
    pooled,
    power,
    read_looks,
    record_looks,
    seeds_needed,
    spent,
)
from ablate.tasks import PPL

ROOT = Path(__file__).resolve().parents[1]

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


def test_the_seeds_needed_are_statsmodels_power_over_a_grid():
    """seeds_needed's exact power (noncentral t, 2n - 2 df) against statsmodels' TTestIndPower, two- and
    one-sided (TOST's half), over effects, alphas and powers."""
    from statsmodels.stats.power import TTestIndPower

    sm = TTestIndPower()
    for effect, alpha, pw, alt in itertools.product(
        (0.5, 1.0, 1.5, 2.0), (0.05, 0.01, 0.001), (0.8, 0.9), ("two-sided", "larger")
    ):
        one = alt == "larger"
        n = seeds_needed(1.0, effect, alpha, pw, cap=200, one_sided=one)
        ref = sm.power(effect, n, alpha, alternative=alt)
        assert power(1.0, effect, alpha, n, 2 * n - 2, one) == pytest.approx(ref, abs=1e-6)
        assert ref >= pw and (n == 2 or sm.power(effect, n - 1, alpha, alternative=alt) < pw)
    assert seeds_needed(1.0, 1.0, 0.05, 0.8, cap=16) is None  # 17 a side: past the cap
    assert seeds_needed(1.0, 1.0, 0.05, 0.8, cap=100) == 17


def test_the_pooled_interval_and_tost_are_scipy_and_statsmodels_on_two_rows():
    """With base and one row alone the pooled t is Student's two-sample t: scipy's ttest_ind interval; its
    negligible state is statsmodels' ttost_ind (pooled variance) at the same alpha."""
    from statsmodels.stats.weightstats import ttost_ind

    rng = np.random.default_rng(1)
    for _ in range(20):
        base = dict(enumerate(rng.normal(5.0, 0.1, 4), 1))
        row = dict(enumerate(rng.normal(5.0 + rng.uniform(-0.1, 0.1), 0.1, 3), 1))
        (d,) = decide_values(
            {"base": base, "A1": row}, PPL, Design(looks=[Look("", "A1", "ppl", 3, 3, 0.05)])
        )
        ci = sps.ttest_ind(list(row.values()), list(base.values())).confidence_interval(0.95)
        assert (d.lo, d.hi) == pytest.approx((ci.low, ci.high)) and d.df == 5
        p = ttost_ind(list(row.values()), list(base.values()), -0.05, 0.05, usevar="pooled")[0]
        assert (d.state == "negligible") == (p < 0.05)
    assert pooled([[1.0, 3.0], [2.0, 2.0, 5.0], [7.0]]).sd == pytest.approx(math.sqrt((2.0 + 6.0) / 3))


def test_identical_differences_at_two_seeds_decide_nothing():
    """A researcher's table: every row's two seeds differ from base's by the same +0.81: the paired
    differences have no spread, the seeds do; the pooled variance keeps the interval open."""
    values = {"base": {1: 6.0, 2: 6.2}, "A1": {1: 6.04, 2: 6.24}, "A2": {1: 7.0, 2: 7.0}}
    a1, a2 = decide_values(values, PPL)
    assert a1.state == "undecided" and a1.df == 3 and a1.interval(0.05)[1] - a1.interval(0.05)[0] > 0.5
    assert "Δ of the means +0.04, 95% interval [-0.33, +0.41]; this look decides no |Δ| this table shows" in (
        a1.text()
    )
    assert a2.flag.startswith("A2's seeds spread sd 0.00")  # flagged: far below the pool's


def test_obrien_fleming_spending_at_hand_values():
    """a(t) = 4 Phi(-z_{1-alpha/4} / sqrt(t)): all of alpha at t = 1, 4 Phi(-2.2414 / sqrt(1/2)) at 1/2."""
    assert spent(0.05, 1.0) == pytest.approx(0.05)
    assert sps.norm.isf(0.05 / 4) == pytest.approx(2.241403, abs=1e-6)
    assert spent(0.05, 0.5) == pytest.approx(4 * sps.norm.cdf(-2.241403 / math.sqrt(0.5)), abs=1e-8)


def _inside(c: list[float], t: np.ndarray) -> float:
    """P(|Z_j| < c_j for every look j) for the group-sequential Z statistics at information fractions t
    (Cov(Z_i, Z_j) = sqrt(t_i / t_j), i <= j), by scipy's multivariate normal."""
    cov = np.sqrt(np.minimum.outer(t, t) / np.maximum.outer(t, t))
    c = np.asarray(c)
    if c.size == 1:
        return 1 - 2 * sps.norm.sf(c[0])
    mvn = sps.multivariate_normal(np.zeros(c.size), cov, seed=0, maxpts=200_000, abseps=1e-6, releps=1e-6)
    return mvn.cdf(c, lower_limit=-c)


@pytest.mark.slow
@pytest.mark.parametrize(
    "looks, gsdesign, obf",
    [  # two-sided alpha 0.05, equally spaced looks
        (2, [2.963, 1.969], [2.797, 1.977]),
        (3, [3.710, 2.511, 1.993], [3.471, 2.454, 2.004]),
        (4, [4.333, 2.963, 2.359, 2.014], [4.049, 2.863, 2.337, 2.024]),
        (5, [4.877, 3.357, 2.680, 2.290, 2.031], [4.562, 3.226, 2.634, 2.281, 2.040]),
    ],
)
def test_the_spending_gives_the_published_boundaries(looks, gsdesign, obf):
    """The boundaries `spent` implies, by numerical integration, are the published Lan-DeMets O'Brien-
    Fleming values (gsDesign's sfLDOF, two-sided 0.05; DeMets & Lan 1994); the same integration gives
    O'Brien & Fleming's own boundaries, C_B sqrt(K/k) (Jennison & Turnbull, Table 2.3)."""
    t = np.arange(1, looks + 1) / looks
    c: list[float] = []
    for k in range(looks):
        target = 1 - spent(0.05, t[k])
        gap = lambda x, k=k, q=target: _inside([*c, x], t[: k + 1]) - q  # noqa: E731
        c.append(optimize.brentq(gap, 1.0, 8.0, xtol=1e-5))
    assert c == pytest.approx(gsdesign, abs=2e-3)
    shape = np.sqrt(looks / np.arange(1, looks + 1))
    cb = optimize.brentq(lambda x: _inside(list(x * shape), t) - 0.95, 1.5, 3.0, xtol=1e-5)
    assert list(cb * shape) == pytest.approx(obf, abs=2e-3)


def _collection(values: dict[str, dict[int, float]]) -> Collection:
    runs = {
        row: {
            s: Run({"run_id": f"{row}-s{s}", "status": "finished", "metrics": {"dev_ppl": v}})
            for s, v in by.items()
        }
        for row, by in values.items()
    }
    return Collection(runs, RowConfigs({}, {}), [], "sim", None, None, [], None)


@pytest.mark.slow
def test_the_design_as_it_runs_keeps_the_family_wise_error_at_alpha_in_its_worst_case():
    """The worst configuration of the simulated table in docs/planner.md (benchmarks/planner_simulation.py:
    each row's seeds re-planned at every look, the pooled variance, Holm over the table's rows; 5 rows, 3
    first seeds, 5 looks): tables with any false decision in at most 5% of them (3 Monte Carlo standard
    errors aside), effect rows decided at the power the table gives."""
    from benchmarks.planner_simulation import rates

    r = rates(rows=5, seeds=3, looks=5, sims=1000)
    assert r.fwer <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / r.tables), r.fwer
    assert r.power >= 0.65, r.power


def test_the_decide_command_trains_exactly_the_seeds_asked_for(tmp_path):
    coll = _collection({"base": {1: 5.0, 2: 5.2, 3: 5.1}, "A1": {1: 5.3, 2: 5.1, 3: 5.6}})
    coll.results_dir = tmp_path
    (d,) = decide(coll, [PPL])
    assert d.state == "undecided" and d.needed and d.needed > 3
    cmd, looks, _ = decide_command(coll, [d], ["experiment=x"])
    seeds = ",".join(map(str, range(4, d.needed + 1)))  # the finished seeds are not named again
    assert cmd == f"python -m ablate.run -m model=base,A1 seed={seeds} experiment=x"
    made = {"state": "undecided", "diff": d.diff, "se": d.se, "df": d.df, "needed": d.needed}
    assert looks == [Look("sim", "A1", "ppl", 3, d.planned, d.alpha, **made)]


def _runs(cmds: str) -> list[tuple[str, int]]:
    """The (row, seed) cells the printed commands train: each a product of its rows and its seeds."""
    out = []
    for line in cmds.splitlines():
        words = dict(w.split("=", 1) for w in line.split() if "=" in w)
        out += [(r, int(x)) for r in words["model"].split(",") for x in words["seed"].split(",")]
    return out


def test_the_decide_commands_train_the_sum_of_the_rows_needs_and_print_their_plan(tmp_path, monkeypatch):
    """Rows that need different seeds get them, each its own: the printed commands' cells are the sum of
    what each row's decision asks (the reference to the most any asks), no cell twice, and the total is the
    plan's estimate of exactly those runs."""
    from ablate.jobs import plan
    from ablate.jobs.estimate import Estimate, duration

    rng = np.random.default_rng(3)
    shifts = {"base": 0.0, "A1": 0.22, "A2": 0.27, "A3": 0.35, "A4": 3.0}
    coll = _collection({r: {s: 5.0 + mu + rng.normal(0, 0.1) for s in (1, 2, 3)} for r, mu in shifts.items()})
    coll.results_dir = tmp_path
    ds = decide(coll, [PPL])
    asks = {d.row: d.needed for d in ds if d.state == "undecided" and d.needed}
    assert len(set(asks.values())) >= 2  # rows that need different seeds
    monkeypatch.setattr(plan, "run_estimate", lambda cfg: Estimate(600.0, "measured", "hand"))
    monkeypatch.setattr(
        "ablate.report.decide._config",
        lambda coll, row, seed, over: type("C", (), {"model": row, "seed": seed}),
    )
    cmds, _, why = decide_command(coll, ds, [])
    runs = _runs(cmds)
    want = sum(n - 3 for n in asks.values()) + max(asks.values()) - 3
    assert len(runs) == len(set(runs)) == want
    assert {r for r, _ in runs} == {"base", *asks}
    for row, n in asks.items():
        assert sorted(s for r, s in runs if r == row) == list(range(4, n + 1))
    assert f"{want} runs in" in why and f"~{duration(600.0 * want)} of wall time at 1 at a time" in why


def test_the_decide_commands_on_the_committed_table_train_what_its_decisions_ask(tmp_path, capsys):
    """On a copy of the committed Multi30k table: the cells the printed commands train are the sum of the
    Decisions' asks (each row to its own seeds a side), not the product of every row and the most seeds."""
    import shutil

    from ablate.report.__main__ import main
    from ablate.report.collect import collect

    runs = tmp_path / "runs"
    shutil.copytree(ROOT / "reports" / "table3_multi30k" / "runs", runs)
    coll = collect(runs, ROOT / "conf" / "model", preset="multi30k_table3+paper")
    from ablate.tasks import task_of

    ds = decide(coll, [*task_of("translation").metrics, PPL], read_looks(runs))
    asks: dict[str, int] = {}
    for d in ds:
        if d.state == "undecided" and d.needed:
            asks[d.row] = max(asks.get(d.row, 0), d.needed)
    asks["base"] = max(asks.values())
    want = sum(n - len(coll.finished(r)) for r, n in asks.items())
    args = ["--results", str(runs), "--preset", "multi30k_table3+paper", "--decide-command", "--n-boot", "10"]
    assert main(args) == 0
    out = capsys.readouterr()
    cells = _runs(out.out)
    assert len(cells) == len(set(cells)) == want and want < 87
    assert f"{want} runs in" in out.err and "plan of" in out.err
    pairs = {(lk.row, lk.against) for lk in read_looks(runs) if lk.against != "base"}
    assert pairs == {("A1", "A2"), ("A1", "A3"), ("A1", "A4"), ("A4", "A1"), ("A4", "A2"), ("A4", "A3")}


def test_the_decide_command_of_one_claim_trains_its_rows_and_records_the_look_at_every_row(tmp_path):
    """--rows E: the command trains E and base alone, E to its seeds; the look is at every undecided row
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
    assert [d.state for d in ds] == ["undecided"] * 3 and ds[2].needed is None
    e = ds[1].needed
    cmd, looks, _ = decide_command(coll, ds, [], only=["E"])
    assert cmd == f"python -m ablate.run -m model=base,E seed={','.join(map(str, range(4, e + 1)))}"
    assert [(lk.row, lk.needed) for lk in looks] == [("A1", ds[0].needed), ("E", e), ("C3", None)]
    assert decide_command(coll, ds, [], only=["C3"]) is None  # no seeds would decide it


def test_a_look_read_again_at_its_own_seeds_is_the_same_look(tmp_path):
    """The report after a decide command, on the same records, shows the decisions the command saw (its
    alpha is not spent twice), and a second command at those seeds writes no second look."""
    coll = _collection({"base": {1: 5.0, 2: 5.2, 3: 5.1}, "A1": {1: 5.3, 2: 5.1, 3: 5.6}})
    coll.results_dir = tmp_path
    (first,) = decide(coll, [PPL])
    _, looks, _ = decide_command(coll, [first], [])
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


def test_a_decided_row_stays_as_its_look_decided_it_when_other_rows_move_the_pool(tmp_path):
    """A row decided at a look keeps that look's difference, interval and alpha at every later read: a row
    whose seeds double the pooled variance afterwards reopens nothing. A look written without its verdict
    (a line of an older file) is read again on today's pool, as before."""
    coll = _collection(
        {
            "base": {1: 5.0, 2: 5.1, 3: 5.05, 4: 5.08},
            "E": {1: 6.0, 2: 6.1, 3: 6.02, 4: 6.05},
            "A1": {1: 5.3, 2: 5.35, 3: 5.32, 4: 5.3},
        }
    )
    coll.results_dir = tmp_path
    first = {d.row: d for d in decide(coll, [PPL])}
    assert first["E"].state == "worse"
    assert first["A1"].state == "worse" and decide_command(coll, list(first.values()), []) is None
    record_looks(tmp_path, looks_made(list(first.values()), "sim"))  # what the command records then
    coll.runs["A1"] = {  # A1 spreads far wider now: the pool's sd grows several times
        s: Run({"run_id": f"A1-s{s}", "status": "finished", "metrics": {"dev_ppl": v}})
        for s, v in {1: 4.0, 2: 7.0, 3: 5.0, 4: 6.5}.items()
    }
    moved = {d.row: d for d in decide(coll, [PPL])}
    assert moved["E"].hi - moved["E"].lo > 3 * (first["E"].hi - first["E"].lo)  # today's pool, unrecorded
    (e,) = [d for d in decide(coll, [PPL], read_looks(tmp_path)) if d.row == "E"]
    assert (e.state, e.diff, e.lo, e.hi, e.alpha, e.seeds) == (
        "worse", first["E"].diff, first["E"].lo, first["E"].hi, first["E"].alpha, 4,
    )  # fmt: skip
    assert e.recorded and "as looks.jsonl recorded it" in e.text()
    old = [Look(lk.preset, lk.row, lk.metric, lk.seeds, lk.planned, lk.alpha) for lk in read_looks(tmp_path)]
    (e_old,) = [d for d in decide(coll, [PPL], old) if d.row == "E"]
    assert not e_old.recorded and e_old.se == moved["E"].se


def test_a_later_look_spends_against_the_largest_plan_any_look_made():
    """Looks at 3, 6 and 8 seeds that planned 13, 15 and 12: each spends at the largest plan up to it (t =
    3/13, 6/15, 8/15); the look at 12 seeds is at t = 12/15 (not 12/12, which would spend all that is
    left) and tests at a(0.8) less a(8/15), by hand: one rule, whatever alpha the lines recorded."""
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
    a = lambda t: 4 * sps.norm.cdf(-2.241403 / math.sqrt(t))  # noqa: E731
    assert d.alpha == pytest.approx(a(12 / 15) - a(8 / 15), abs=1e-6)


def test_a_decided_row_keeps_its_look_when_other_rows_change_the_pooled_variance(tmp_path):
    """A row decided at its first look has that look recorded; read again at its seeds it keeps the alpha it
    spent, although seeds added to another row change the pooled variance (and so a first look's plan);
    its interval is the pooled variance's now."""
    coll = _collection(
        {"base": {1: 5.0, 2: 5.2, 3: 5.1}, "A1": {1: 6.0, 2: 6.3, 3: 6.1}, "E": {1: 5.35, 2: 5.3, 3: 5.5}}
    )
    coll.results_dir = tmp_path
    ds = decide(coll, [PPL])
    assert [d.state for d in ds] == ["worse", "undecided"]
    _, looks, _ = decide_command(coll, ds, [], only=["E"])
    assert [(lk.row, lk.seeds, lk.alpha) for lk in looks] == [(d.row, 3, d.alpha) for d in ds]
    record_looks(tmp_path, looks)
    for s, (b, e) in enumerate([(5.3, 5.2), (4.9, 5.5), (5.1, 5.3)], start=4):
        coll.runs["base"][s] = Run({"run_id": f"base-s{s}", "status": "finished", "metrics": {"dev_ppl": b}})
        coll.runs["E"][s] = Run({"run_id": f"E-s{s}", "status": "finished", "metrics": {"dev_ppl": e}})
    assert decide(coll, [PPL])[0].alpha != ds[0].alpha  # unrecorded, the first look's alpha would move
    again = decide(coll, [PPL], read_looks(tmp_path))[0]
    assert (again.state, again.alpha, again.look_seeds) == ("worse", ds[0].alpha, 3)
    assert (again.lo, again.hi) == pytest.approx(again.look_interval(ds[0].alpha))


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


def _report_folder(tmp_path, rows: dict[str, list[int]]):
    """A results folder of finished translation records: {row: seeds}, dev PPL by row and seed."""
    import json

    for row, seeds in rows.items():
        for s in seeds:
            run = tmp_path / row / f"{row}-x-s{s}"
            run.mkdir(parents=True)
            rec = {"schema_version": 1, "run_id": f"{row}-x-s{s}", "row": row, "seed": s,
                   "status": "finished", "task": "translation", "config": {},
                   "metrics": {"dev_ppl": 5.0 + 0.1 * s + 0.3 * (row != "base")}}  # fmt: skip
            (run / "record.json").write_text(json.dumps(rec))


def _decide(tmp_path, capsys) -> tuple[int, str, str]:
    from ablate.report.__main__ import main

    code = main(["--results", str(tmp_path), "--decide-command", "--n-boot", "10"])
    out = capsys.readouterr()
    return code, out.out.strip(), out.err.strip()


def test_a_looks_folder_in_place_of_the_file_stops_report_and_command_in_one_line(tmp_path, capsys):
    from ablate.report.__main__ import main

    _report_folder(tmp_path, {"base": [1, 2], "A1": [1, 2]})
    (tmp_path / "looks.jsonl").mkdir()
    code, out, err = _decide(tmp_path, capsys)
    assert (code, out) == (2, "") and err.splitlines()[
        -1
    ] == f"error: {tmp_path / 'looks.jsonl'}: not a file; " + (
        "the alpha spent so far is unknown: put the looks file back in its place"
    )
    assert main(["metrics", "--results", str(tmp_path), "--out", "-", "--quiet"]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_a_table_of_one_seed_a_row_says_what_is_missing_and_the_command_that_trains_it(tmp_path, capsys):
    _report_folder(tmp_path, {"base": [1], "A1": [1], "B1": [1]})
    code, out, err = _decide(tmp_path, capsys)
    assert code == 0 and out.startswith("python -m ablate.run -m model=base,A1,B1 seed=2 ")
    assert (
        "not compared: A1, B1 (no row has two seeds, so the seed variance is unknown); "
        "this brings to two seeds: base, A1, B1; 3 runs in 1 command(s)"
    ) in err
    assert not (tmp_path / "looks.jsonl").exists()  # nothing was compared: no alpha spent


def test_a_row_whose_seeds_share_none_with_base_is_compared_on_the_pooled_variance(tmp_path, capsys):
    """base seed 1, A1 seeds 2 and 3: no pair, but A1's two seeds give the pooled variance a degree of
    freedom; the commands bring base and A1 to the seeds that decide it, each the seeds it lacks (base 2
    and 3 first, A1 1 first: pairs)."""
    _report_folder(tmp_path, {"base": [1], "A1": [2, 3]})
    code, out, err = _decide(tmp_path, capsys)
    base, a1 = out.splitlines()
    assert code == 0 and base.startswith("python -m ablate.run -m model=base seed=2,3,4")
    assert a1.startswith("python -m ablate.run -m model=A1 seed=1,4")
    n = len(_runs(base)) + 1
    assert len(_runs(a1)) + 2 == n and f"A1 {n}" in err and (tmp_path / "looks.jsonl").is_file()


def test_a_looks_alpha_its_plan_and_the_seeds_it_asks_for_follow_one_rule():
    """A first look at 2 seeds (a researcher's WER, its effect 1.2 sd): its alpha is the spending at 2 of
    the P seeds it plans, P the fewest whose final look (with what this one leaves) reaches the power; the
    N seeds the line asks for are the fewest whose next look, at the alpha the same rule gives it,
    reaches the power, by the noncentral t (N - 1 does not), and the line says both."""
    from ablate.tasks import Metric

    wer = Metric("wer", "WER", False, "errors over words", "dev_wer", "wer", negligible=0.1)
    values = {"base": {1: 20.0, 2: 21.0}, "narrow": {1: 22.0, 2: 22.6}, "wide": {1: 19.9, 2: 21.2}}
    d = decide_values(values, wer)[0]
    assert d.state == "undecided" and d.needed and d.needed <= d.planned
    share, n, other = d.share, d.seeds, d.df - 2
    assert d.alpha == pytest.approx(spent(share, n / d.planned))
    left = lambda k: (share if k >= d.planned else spent(share, k / d.planned)) - d.alpha  # noqa: E731
    assert d.next_alpha == pytest.approx(left(d.needed))
    sd, eff = d.se / math.sqrt(1 / n + 1 / n), abs(d.diff)
    assert power(sd, eff, left(d.needed), d.needed, 2 * d.needed - 2 + other) >= 0.8
    if d.needed > n + 1:
        assert power(sd, eff, left(d.needed - 1), d.needed - 1, 2 * d.needed - 4 + other) < 0.8
    final = lambda p: share - spent(share, n / p)  # noqa: E731
    assert power(sd, eff, final(d.planned), d.planned, 2 * d.planned - 2 + other) >= 0.8
    assert (
        d.planned == n + 1
        or power(sd, eff, final(d.planned - 1), d.planned - 1, 2 * d.planned - 4 + other) < 0.8
    )
    text = d.text()
    assert f"alpha {d.alpha:.3g} at 2 of {d.planned} planned seeds a side" in text
    assert f"{d.needed} seeds a side would decide it (at alpha {d.next_alpha:.3g})" in text


def test_the_difference_shown_is_the_means_now_beside_the_recorded_verdict(tmp_path):
    """A row decided at a look keeps that look's verdict; the Δ beside it is the difference of the means
    the table shows now, both labelled (the metrics table's Δ column included)."""
    from ablate.report.metrics import metrics_table
    from ablate.tasks import task_of

    coll = _collection({"base": {1: 5.0, 2: 5.1, 3: 5.05}, "A1": {1: 6.0, 2: 6.1, 3: 6.02}})
    coll.results_dir = tmp_path
    (first,) = decide(coll, [PPL])
    assert first.state == "worse"
    record_looks(tmp_path, looks_made([first], "sim"))
    coll.runs["A1"][4] = Run({"run_id": "A1-s4", "status": "finished", "metrics": {"dev_ppl": 7.5}})
    coll.runs["base"][4] = Run({"run_id": "base-s4", "status": "finished", "metrics": {"dev_ppl": 5.0}})
    (d,) = decide(coll, [PPL], read_looks(tmp_path))
    now = np.mean([6.0, 6.1, 6.02, 7.5]) - np.mean([5.0, 5.1, 5.05, 5.0])
    assert d.state == "worse" and d.recorded and d.diff == pytest.approx(now)
    assert d.look_diff == pytest.approx(first.diff) and d.look_diff != pytest.approx(now)
    assert f"Δ of the means {now:+.2f}" in d.text() and f"(Δ then {first.diff:+.2f})" in d.text()
    table, _ = metrics_table(coll, task_of("translation"))
    row = next(r for r in table.rows if r[0] == "A1")
    i = table.columns.index("Δ base", table.columns.index("PPL dev"))
    assert row[i] == f"{now:+.2f}"


def test_holm_over_the_table_passes_a_decided_rows_share_to_the_others():
    """Four rows, one look each at its plan (t = 1: the look spends its whole share): Holm's step-down on
    the pooled t's p values, by statsmodels' multipletests. The family of the table (two metrics) holds
    alpha / 8 at first, that of one metric alpha / 4; each row alone, alpha."""
    from ablate.tasks import Metric

    bleu = Metric("bleu", "BLEU", True, "corpus", "dev_bleu", "bleu")
    rng = np.random.default_rng(7)
    shift = {"base": 0.0, "A1": 0.4, "A2": 0.25, "A3": 0.05, "A4": 1.5}
    ppl = {r: {s: 5 + mu + rng.normal(0, 0.1) for s in range(1, 5)} for r, mu in shift.items()}
    bl = {r: {s: 25 - 3 * mu + rng.normal(0, 0.3) for s in range(1, 5)} for r, mu in shift.items()}
    looks = [Look("", r, m, 4, 4, 0.05) for r in shift if r != "base" for m in ("ppl", "bleu")]
    tables = {"ppl": ppl, "bleu": bl}

    def by_hand(names: list[str], alpha: float) -> dict[tuple[str, str], bool]:
        p = {}
        for name in names:
            vals = tables[name]
            pool = pooled([list(v.values()) for v in vals.values()])
            for r in shift:
                if r != "base":
                    d = np.mean(list(vals[r].values())) - np.mean(list(vals["base"].values()))
                    t = d / (pool.sd * math.sqrt(2 / 4))
                    p[(r, name)] = 2 * sps.t.sf(abs(t), pool.df)
        from statsmodels.stats.multitest import multipletests

        keys = list(p)
        rejected = multipletests([p[k] for k in keys], alpha, method="holm")[0]
        return dict(zip(keys, map(bool, rejected), strict=True))

    for family, groups in (("table", [["ppl", "bleu"]]), ("metric", [["ppl"], ["bleu"]])):
        ds = decide_tables(tables, [PPL, bleu], Design(looks=looks, family=family))
        got = {(d.row, d.metric.name): d.state in ("better", "worse") for d in ds}
        want = {k: v for g in groups for k, v in by_hand(g, 0.05).items()}
        assert got == want, family
        assert {d.family for d in ds} == {8 if family == "table" else 4}
    alone = decide_tables(tables, [PPL, bleu], Design(looks=looks, family="row"))
    assert {d.share for d in alone} == {0.05} and {d.family for d in alone} == {1}


def test_a_comparison_with_another_row_reads_its_own_looks_not_the_references(tmp_path):
    """looks.jsonl keys a look by what it compares: A1's decided look against base is not read as a look
    of A1 against A2 (a claim's comparison), and a line without `against` is against base."""
    values = {
        "base": {1: 5.0, 2: 5.1, 3: 5.05},
        "A1": {1: 6.0, 2: 6.1, 3: 6.02},
        "A2": {1: 6.0, 2: 6.05, 3: 6.1},
    }
    first = decide_values(values, PPL, Design("sim"))
    record_looks(tmp_path, looks_made(first, "sim"))
    looks = read_looks(tmp_path)
    assert {lk.against for lk in looks} == {"base"} and all(lk.state == "worse" for lk in looks)
    (pair,) = decide_tables({"ppl": values}, [PPL], Design("sim", looks), [("A1", "A2", "ppl")])
    assert pair.against == "A2" and not pair.recorded and pair.state != "worse"
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "looks.jsonl").write_text(
        '{"preset": "sim", "row": "A1", "metric": "ppl", "seeds": 3, "planned": 4, "alpha": 0.01}\n'
    )
    assert read_looks(tmp_path / "old")[0].against == "base"


@pytest.mark.parametrize(
    "line, says",
    [
        ('"alpha": NaN', "alpha nan is not a level in [0, 1]"),
        ('"alpha": 0.01, "state": "better", "diff": NaN, "se": 0.1, "df": 10', "diff nan is not a finite"),
        (
            '"alpha": 0.01, "state": "equivalent", "diff": 0.1, "se": 0.1, "df": 10',
            "state 'equivalent' is not",
        ),
        ('"alpha": 0.01, "seeds": 0', "seeds 0 is not a count of seeds"),
    ],
)
def test_a_look_that_cannot_be_one_stops_the_reading_naming_its_line(tmp_path, line, says):
    head = '{"preset": "cpu", "row": "A1", "metric": "ppl", "planned": 4, '
    text = head + ('"seeds": 3, ' if '"seeds"' not in line else "") + line + "}\n"
    (tmp_path / "looks.jsonl").write_text(
        '{"preset": "cpu", "row": "A2", "metric": "ppl", "seeds": 3, "planned": 4, "alpha": 0.01}\n' + text
    )
    with pytest.raises(LooksError, match=f"line 2: {re.escape(says)}"):
        read_looks(tmp_path)


def test_a_table_without_seed_variance_says_so_and_trains_nothing(tmp_path, capsys):
    """Every run's metric 0.0: both rows have two seeds, so the decide command names the missing variance,
    not missing seeds, and prints no command that would train nothing."""
    coll = _collection({"base": {1: 0.0, 2: 0.0}, "A1": {1: 0.0, 2: 0.0}})
    coll.results_dir = tmp_path
    (d,) = decide(coll, [PPL])
    assert d.state == "not compared" and d.why.startswith("no seed variance")
    cmd, _, why = decide_command(coll, [d], [])
    assert cmd == "" and why.startswith("nothing to train: no seed variance")


def _append_looks(folder: str, tag: str, rounds: int) -> None:
    for k in range(rounds):  # its own looks, and looks the other process makes too (the same comparisons)
        own = [Look("cpu", f"{tag}{k}-{i}", "ppl", 3, 4, 0.01) for i in range(400)]
        record_looks(Path(folder), own + [Look("cpu", f"both{k}-{i}", "ppl", 3, 4, 0.01) for i in range(50)])


def test_two_decide_commands_at_once_keep_every_look(tmp_path):
    """Two processes append their looks at once, some of them the same comparison at the same seeds: under
    the file's lock every look of both is read back, each once (without it both read the file before
    either writes, and a look is written twice)."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_append_looks, args=(str(tmp_path), tag, 5)) for tag in ("x", "y")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    rows = [lk.row for lk in read_looks(tmp_path)]
    assert len(rows) == len(set(rows)) == 2 * 5 * 400 + 5 * 50


def test_the_decide_command_on_a_table_without_seed_variance_prints_no_command(tmp_path, capsys):
    import json

    for row in ("base", "A1"):
        for s in (1, 2):
            run = tmp_path / row / f"{row}-x-s{s}"
            run.mkdir(parents=True)
            rec = {"schema_version": 1, "run_id": f"{row}-x-s{s}", "row": row, "seed": s,
                   "status": "finished", "task": "translation", "config": {},
                   "metrics": {"dev_ppl": 5.0, "dev_bleu": 0.0}}  # fmt: skip
            (run / "record.json").write_text(json.dumps(rec))
    code, out, err = _decide(tmp_path, capsys)
    assert (code, out) == (0, "") and "no seed variance: every seed of every row gives the same" in err
    assert "this brings to two seeds" not in err
