"""`--plan`: each job of a command, what it would train and what state it is in, with the identity training
uses; and the row files a user writes: one that does not compose fails alone, one that varies nothing is
refused."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ablate.config.rows import row_file_problem

ROOT = Path(__file__).resolve().parents[1]
ROW_HEAD = "defaults:\n  - base\n  - _self_\n\n"
USER_ROWS = {
    "typo": ROW_HEAD + "name: typo\ngroup: extra\ndropuot: 0.3\n",  # line 7: a misspelt key
    "broken": ROW_HEAD + "name: broken\ngroup: extra\ndropout: [0.3\n",  # line 7: an unclosed list
    "copy": ROW_HEAD + "name: copy\ngroup: extra\n",  # varies nothing
}
TINY = ["recipe=tiny", "scale=tiny", "trainer=cpu", "trainer.threads=1", "trainer.progress_bar=false"]


def _run(tmp_path: Path, *args: str, module: str = "ablate.run") -> subprocess.CompletedProcess:
    conf = tmp_path / "user_conf" / "model"
    conf.mkdir(parents=True, exist_ok=True)
    for name, text in USER_ROWS.items():
        (conf / f"{name}.yaml").write_text(text)
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env = dict(os.environ, WANDB_MODE="offline", PYTHONUNBUFFERED="1", TMPDIR=str(tmp_path / "tmp"))
    cmd = [
        sys.executable, "-m", module, *args, *TINY, "logger=none", f"results_dir={tmp_path}/results",
        f"data.cache_dir={tmp_path}/cache", "--config-dir", str(tmp_path / "user_conf"),
    ]  # fmt: skip
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def _files(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")}


def _plan_lines(out: str) -> dict[tuple[str, int], str]:
    lines = {}
    for ln in out.splitlines():
        if m := re.match(r"\[plan\] (\S+) s(\d+)  ", ln):
            lines[(m.group(1), int(m.group(2)))] = ln
    return lines


def _run_id(line: str) -> str:
    """The run id of a plan line: `<row>-<12 hex>-s<seed>`, wherever the line puts it."""
    return next(w for w in line.split("  ") if re.fullmatch(r"\S+-[0-9a-f]{12}-s\d+", w))


def test_row_file_problems_name_the_file_and_line(tmp_path):
    for name, text in USER_ROWS.items():
        (tmp_path / f"{name}.yaml").write_text(text)
    assert (
        row_file_problem(tmp_path / "typo.yaml")
        == f"{tmp_path}/typo.yaml: unknown key 'dropuot' (did you mean dropout?)"
    )
    broken = row_file_problem(tmp_path / "broken.yaml")
    assert broken.startswith(f"{tmp_path}/broken.yaml: line 7: not YAML (while parsing a flow sequence")
    assert row_file_problem(tmp_path / "copy.yaml") is None  # it composes: the run refuses it
    assert row_file_problem(ROOT / "conf" / "model" / "A1.yaml") is None


@pytest.mark.slow
def test_a_sweep_trains_its_good_rows_and_refuses_each_bad_row_file_alone_and_the_plan_agrees(tmp_path):
    """A sweep over base and three user rows: base trains, typo and broken fail to compose, copy varies
    nothing; each bad one in one line. The plan of the sweep that follows lists base s1 finished under the
    very run id training gave it, a run with checkpoints to resume, a failed one to retry, and writes
    nothing; training the plan's `to train` job gives the run id the plan listed."""
    p = _run(tmp_path, "-m", "model=base,typo,broken,copy")
    assert p.returncode == 1, p.stderr[-3000:]
    assert "Traceback" not in p.stderr
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
    conf = tmp_path / "user_conf" / "model"
    assert errors[:2] == [
        f"error: model=typo: {conf}/typo.yaml: unknown key 'dropuot' (did you mean dropout?)",
        f"error: model=broken: {conf}/broken.yaml: line 7: not YAML (while parsing a flow sequence; expected "
        "',' or ']', but got '<stream end>')",
    ]
    assert errors[2] == (
        "error: model=copy: its row file varies nothing from base (a row states the keys it changes; base "
        "itself is model=base)"
    )
    assert len(errors) == 3
    (base_rec,) = (tmp_path / "results" / "base").rglob("record.json")
    trained = json.loads(base_rec.read_text())
    assert trained["status"] == "finished"
    summary = p.stderr.strip().splitlines()[-1]
    assert summary.startswith("[ablate] sweep of 4 runs: 1 finished, 3 failed (copy-")
    assert summary.endswith("-s1, model=typo, model=broken)")

    # the plan: base s1 finished, A1 s1 to resume, A1 s2 to retry, base s2 to train
    p = _run(tmp_path, "-m", "model=base,A1", "seed=1,2", "hydra/launcher=joblib_cpu", "--plan")
    assert p.returncode == 0, p.stderr[-3000:]
    first = _plan_lines(p.stdout)
    ids = {key: _run_id(ln) for key, ln in first.items()}
    assert ids[("base", 1)] == trained["run_id"] and first[("base", 1)].endswith("  finished")
    a1 = tmp_path / "results" / "A1"
    (a1 / ids[("A1", 1)] / "checkpoints").mkdir(parents=True)
    (a1 / ids[("A1", 1)] / "checkpoints" / "step0000010.ckpt").write_bytes(b"")
    (a1 / ids[("A1", 1)] / "record.json").write_text(
        json.dumps({"run_id": ids[("A1", 1)], "status": "running"})
    )
    (a1 / ids[("A1", 2)]).mkdir()
    failed = {"run_id": ids[("A1", 2)], "status": "failed", "reason": "CUDA out of memory\nTraceback"}
    (a1 / ids[("A1", 2)] / "record.json").write_text(json.dumps(failed))
    before = _files(tmp_path / "results") | _files(tmp_path / "cache")
    p = _run(tmp_path, "-m", "model=base,A1", "seed=1,2", "--plan", module="ablate.jobs.plan")
    assert p.returncode == 0, p.stderr[-3000:]
    assert _files(tmp_path / "results") | _files(tmp_path / "cache") == before  # nothing written
    lines = _plan_lines(p.stdout)
    assert lines[("base", 1)].endswith(f"  {trained['run_id']}  finished")
    # each job that would train gets its time: base's from base's record, A1's scaled from it
    assert f"  {ids[('A1', 1)]}  to resume from step 10  ~" in lines[("A1", 1)]
    assert f"  {ids[('A1', 2)]}  to retry (failed: CUDA out of memory)  ~" in lines[("A1", 2)]
    assert "(scaled: 1 record(s) of base, by the cost of a step)" in lines[("A1", 2)]
    assert f"  {ids[('base', 2)]}  to train  ~" in lines[("base", 2)]
    assert "(measured: 1 record of base)" in lines[("base", 2)]
    assert "recipe=tiny scale=tiny  varies trainer=cpu  " in lines[("A1", 1)]  # the command's own group
    assert "  N 1, d_model 32, d_ff 128, h 1, d_k 32, d_v 32, P_drop 0.1" in lines[("A1", 1)]
    last = p.stdout.strip().splitlines()[-1]
    assert last.startswith("[plan] plan of 4 runs: 1 finished, 1 to resume, 1 to retry, 1 to train; ~")
    assert last.endswith(" of wall time at 1 at a time, the basic launcher")
    p = _run(tmp_path, "model=base", "seed=2")
    assert p.returncode == 0, p.stderr[-3000:]
    (rec,) = (tmp_path / "results" / "base").glob("*-s2/record.json")
    assert json.loads(rec.read_text())["run_id"] == ids[("base", 2)]


def test_the_plan_refuses_what_training_would_refuse_and_exits_2(tmp_path):
    p = _run(tmp_path, "-m", "model=base,C1,typo,copy", "--plan")
    assert p.returncode == 2, p.stderr[-3000:]
    lines = _plan_lines(p.stdout)
    assert lines[("C1", 1)].endswith(
        "refused: row C1 under recipe=tiny scale=tiny: model.n_layers=2 gives 1, the same as base's, so the "
        "row would not differ from base in n_layers (choose another recipe or scale, or set the key on the "
        "command line)"
    )
    assert lines[("copy", 1)].endswith(
        "refused: model=copy: its row file varies nothing from base (a row states the keys it changes; base "
        "itself is model=base)"
    )
    conf = tmp_path / "user_conf" / "model"
    assert (
        f"[plan] model=typo  refused: {conf}/typo.yaml: unknown key 'dropuot' (did you mean dropout?)"
        in p.stdout
    )
    assert p.stdout.strip().splitlines()[-1] == (
        "[plan] plan of 4 runs: 1 to train, 3 refused; 1 run(s) of unknown time"  # no record to estimate from
    )
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["-m", "model=A1", "--cfg", "job"],
            "error: --cfg prints the config of one run; for a sweep, --plan lists",
        ),
        (
            ["model=broken"],
            "broken.yaml: line 7: not YAML (while parsing a flow sequence; expected ',' or ']'",
        ),
        (["model=typo"], "typo.yaml: unknown key 'dropuot' (did you mean dropout?)"),
        (["model=copy"], "error: model=copy: its row file varies nothing from base"),
    ],
)
def test_a_single_command_that_cannot_run_says_why_in_one_line(tmp_path, args, message):
    p = _run(tmp_path, *args)
    assert p.returncode == 2, p.stderr[-3000:]
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], p.stderr[-3000:]
    assert not (tmp_path / "results" / "copy").exists()


COMPOSE = [
    (["modle=A1"], "Could not override 'modle': Key 'modle' not in 'RunConfig'"),
    (["seed=x"], "Error merging override seed=x: Value 'x' of type 'str' could not be converted to Integer"),
    (
        ["hydra/launcher=nope"],
        "In 'hydra/config': Could not find 'hydra/launcher/nope' (options: ablate_gpus, ablate_slurm, ",
    ),
    (
        ["model=B"],
        "model=B is a Table 3 group (B1 B2), not a row: run its rows with `-m model=B`, or name one row",
    ),
    (["experiment=nope"], "experiment=nope: no file conf/experiment/nope.yaml (experiments: multi30k_1h, "),
    (["data=reverse"], "data=reverse: no file conf/data/reverse.yaml (data groups: builtin, files, "),
    (["-m", "model=Q"], "In 'config': Could not find 'model/Q' (options: A1, A2, "),
    (
        ["hydra/launcher=slurm", "hydra.launcher.additional_parameters={account:x}"],
        "Could not override 'hydra.launcher.additional_parameters': Key 'account' is not in struct (a new "
        "key takes a leading +, as in +hydra.launcher.additional_parameters.account=x)",
    ),
]


@pytest.mark.parametrize("overrides, line", COMPOSE)
def test_overrides_that_do_not_compose_are_one_line(tmp_path, overrides, line):
    """What Hydra answers in several lines (or, for a missing experiment, not at all: an optional config
    group) is one line, exit status 2: Hydra composes the config once and hands over what stops it."""
    p = _run(tmp_path, *overrides)
    assert p.returncode == 2, p.stderr[-3000:]
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {line}"), p.stderr[-3000:]
    assert "HYDRA_FULL_ERROR" not in p.stderr and not list(tmp_path.rglob("record.json"))


def _full_disk(*_args, **_kwargs):
    raise OSError(28, "No space left on device")  # as a write raises it: no file named


@pytest.mark.parametrize("phase", ["corpus", "training", "evaluation", "baseline"])
def test_an_os_error_without_a_file_says_what_was_being_done_and_where(phase, tmp_path, monkeypatch, capsys):
    """A full disk while the corpus is prepared names the cache folder (the results folder may have room);
    while a run trains or is evaluated, the run's folder; while a baseline parses, the baseline's. An
    error that names its path itself, or its file, keeps its own words."""
    import ablate.baseline
    import ablate.data.binarize
    import ablate.jobs.train
    import ablate.training.evaluation
    from ablate.config import RunConfig
    from ablate.errors import os_error_line
    from ablate.records.identity import run_dir

    cfg = RunConfig(results_dir=str(tmp_path / "results"))
    cfg.data.cache_dir, cfg.data.vocab_size = str(tmp_path / "cache"), 1000
    full = "[Errno 28] No space left on device"
    if phase == "baseline":
        monkeypatch.setattr(ablate.baseline, "load_split", _full_disk)
        argv = ["right", "--treebank", str(tmp_path / "tb"), "--results", str(tmp_path / "results")]
        assert ablate.baseline.main(argv) == 2
        where = next(p for p in (tmp_path / "results").glob("*/*") if p.is_dir())
        assert capsys.readouterr().err == f"error: {full} (running the baseline in {where})\n"
        return
    if phase == "corpus":
        monkeypatch.setattr(ablate.data.binarize, "clean_split", _full_disk)
        doing = f"preparing the corpus in {tmp_path / 'cache' / 'data'}"
    elif phase == "training":
        monkeypatch.setattr(ablate.jobs.train, "prepare_corpus", lambda data: None)
        monkeypatch.setattr(ablate.jobs.train, "run_worker", _full_disk)
        doing = f"training the run in {run_dir(cfg)}"
    if phase == "evaluation":
        monkeypatch.setattr(ablate.training.evaluation.store, "read_record", _full_disk)
        with pytest.raises(OSError) as e:
            ablate.training.evaluation.evaluate_run(tmp_path / "run")
        doing = f"evaluating the run in {tmp_path / 'run'}"
    else:
        with pytest.raises(OSError) as e:
            ablate.jobs.train.train(cfg)
    assert os_error_line(e.value) == f"{full} ({doing})"


def test_an_os_error_that_names_its_path_keeps_its_words():
    from ablate.errors import doing, os_error_line

    for error in (
        FileNotFoundError("WSJ section folder not found: /tb/22"),  # a message of our own, its path in it
        OSError(13, "Permission denied", "/results/x"),  # the OS's, its file named
    ):
        with pytest.raises(OSError) as e, doing("training the run in /results/base"):
            raise error
        assert os_error_line(e.value) == str(error)


def test_a_record_left_running_by_a_failed_write_is_settled_as_failed(tmp_path):
    """A full disk at the end of a run: training's own failure write failed too. Once the process no
    longer holds the run, the record says failed with the reason; a record another process holds stays."""
    from ablate.config import RunConfig
    from ablate.jobs.train import settle_running
    from ablate.records import folder, identity

    cfg = RunConfig(results_dir=str(tmp_path))
    run = identity.run_dir(cfg)
    run.mkdir(parents=True)
    path = run / "record.json"
    path.write_text(json.dumps({"run_id": run.name, "status": "running"}))
    with folder.run_lock(run) as held:  # another process still trains it
        assert held
        settle_running(cfg, "[Errno 28] No space left on device")
        assert json.loads(path.read_text())["status"] == "running"
    settle_running(cfg, "[Errno 28] No space left on device")
    rec = json.loads(path.read_text())
    assert (rec["status"], rec["reason"]) == ("failed", "[Errno 28] No space left on device")


def test_the_plan_is_a_launcher_and_plan_is_its_shorthand(tmp_path):
    """`hydra/launcher=plan` is the plan: `--plan` gives the same lines in place of the launcher a command
    names; nothing is written, not even Hydra's sweep folder."""
    sweep = ["-m", "model=A1,A2", "seed=1,2", f"hydra.sweep.dir={tmp_path}/sweep"]
    direct = _run(tmp_path, *sweep, "hydra/launcher=plan")
    shorthand = _run(tmp_path, *sweep, "hydra/launcher=joblib_cpu", "hydra.launcher.n_jobs=2", "--plan")
    assert direct.returncode == shorthand.returncode == 0, direct.stderr[-2000:] + shorthand.stderr[-2000:]
    assert direct.stdout == shorthand.stdout
    assert len(_plan_lines(direct.stdout)) == 4
    assert (
        direct.stdout.strip().splitlines()[-1]
        == "[plan] plan of 4 runs: 4 to train; 4 run(s) of unknown time"
    )
    assert not (tmp_path / "sweep").exists() and not (tmp_path / "results").exists()


def test_the_plan_of_one_run_refuses_what_that_run_refuses(tmp_path):
    """Without -m, the plan is of that one run: a Table 3 group in `model=` is refused in the run's own
    words, and a sweep's values are an error, as the run says them."""
    run = _run(tmp_path, "model=B")
    planned = _run(tmp_path, "model=B", "--plan")
    assert run.returncode == planned.returncode == 2
    said = run.stderr.strip().splitlines()[-1].removeprefix("error: ")
    assert said.startswith("model=B is a Table 3 group (B1 B2), not a row")
    assert planned.stdout.strip().splitlines() == [
        f"[plan] model=B  refused: {said}",
        "[plan] plan of 1 run: 1 refused",
    ]
    p = _run(tmp_path, "model=A1,A2", "--plan")
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.strip() == "error: 2 runs in the command of one run: a sweep takes -m (--multirun)"
    p = _run(tmp_path, "model=A1", "--plan")
    assert p.returncode == 0 and len(_plan_lines(p.stdout)) == 1


@pytest.mark.parametrize(
    "args, rows",
    [
        (["experiment=table3_big"], ["base"]),  # hydra.sweeper.params count only in a multirun
        (["-m", "experiment=table3_big"], ["big"]),
        (["hydra.mode=MULTIRUN", "model=A1,A2"], ["A1", "A2"]),  # the multirun Hydra's own key asks for
        (["model=A1", "+hydra.launcher.additional_parameters.account=x"], ["A1"]),  # another launcher's key
    ],
)
def test_the_plan_lists_the_runs_the_command_trains(tmp_path, args, rows):
    p = _run(tmp_path, *args, "--plan")
    assert p.returncode == 0, p.stderr[-2000:]
    assert [row for row, _ in _plan_lines(p.stdout)] == rows
    if "-m" not in args and "hydra.mode=MULTIRUN" not in args:  # the run itself, as Hydra composes it
        cfg = _run(tmp_path, "--cfg", "job", *[a for a in args if "hydra.launcher" not in a], "--plan")
        assert cfg.returncode == 0 and f"  name: {rows[0]}\n" in cfg.stdout


# ---- estimates: a calibration on this machine, and records of other machines through its speed ratio ----

HERE = "This CPU (family 1, model 1); cpu (1 threads)"
THERE = "That CPU (family 2, model 2); cpu (1 threads)"


def test_records_of_another_machine_count_through_the_measured_speed_ratio():
    """This machine ran base's calibration (0.3 s a step, 5 s outside); the other ran base at 0.2 and A1 at
    0.4 and 0.6: the ratio is 0.3 / 0.2 = 1.5, and A1 here is 1.5 x (the median 0.5 s a step) x its steps,
    plus 1.5 x the median of its 20 and 40 s outside."""
    from ablate.jobs.estimate import Timing, estimate, speed_ratios

    timings = [
        Timing("base", "p", HERE, 0.3, 5.0, 1000),
        Timing("base", "p", THERE, 0.2, 10.0, 1000),
        Timing("A1", "p", THERE, 0.4, 20.0, 1000),
        Timing("A1", "p", THERE, 0.6, 40.0, 1000),
        Timing("A1", "q", HERE, 9.0, 9.0, 1000),  # another preset: not counted
    ]
    assert speed_ratios(timings[:4], HERE) == {THERE: pytest.approx(1.5)}
    a1 = estimate("A1", "p", HERE, 100, 1000, timings)
    assert a1.basis == "ratio" and a1.seconds == pytest.approx(1.5 * 0.5 * 100 + 1.5 * 30.0)
    assert a1.detail == "2 records of A1 on 1 other machine x its speed ratio to this one (1.50), by base"
    # the calibrated row itself is measured here: its 0.3 s a step and its 5 s outside
    assert estimate("base", "p", HERE, 100, 1000, timings).seconds == pytest.approx(0.3 * 100 + 5.0)
    # a row no machine ran: this machine's seconds a step per parameter x its parameters
    c3 = estimate("C3", "p", HERE, 100, 4000, timings)
    assert c3.basis == "scaled" and c3.seconds == pytest.approx(0.3 / 1000 * 4000 * 100 + 5.0)
    # nothing of the preset here: no ratio, no number
    assert estimate("A1", "p", "Third CPU; cpu (1 threads)", 100, 1000, timings).seconds is None


def test_a_speed_ratio_is_the_median_over_the_rows_both_machines_ran():
    from ablate.jobs.estimate import Timing, speed_ratios

    timings = [
        Timing("base", "p", HERE, 0.3, 0, 1), Timing("base", "p", THERE, 0.2, 0, 1),  # 1.5
        Timing("A1", "p", HERE, 0.4, 0, 1), Timing("A1", "p", THERE, 0.4, 0, 1),  # 1.0
        Timing("A2", "p", HERE, 0.6, 0, 1), Timing("A2", "p", THERE, 0.2, 0, 1),  # 3.0
        Timing("A3", "p", THERE, 0.1, 0, 1),  # not run here: no part of the ratio
    ]  # fmt: skip
    assert speed_ratios(timings, HERE) == {THERE: pytest.approx(1.5)}


def test_the_calibration_row_is_one_the_most_machines_ran_and_the_cheapest_of_those():
    from ablate.jobs.estimate import Timing, calibration_row

    third = "Third CPU; cpu (1 threads)"
    timings = [Timing("base", "p", m, 0.2, 0, 1) for m in (THERE, third)] + [
        Timing("C4", "p", THERE, 0.1, 0, 1), Timing("big", "p", THERE, 0.1, 0, 1),
        Timing("big", "p", third, 0.1, 0, 1), Timing("C4", "q", third, 0.1, 0, 1),
    ]  # fmt: skip
    rows = {"C4": (300, 10), "base": (700, 10), "big": (2000, 30), "new": (1, 1)}
    assert calibration_row(rows, timings, "p") == "base"  # two machines, and cheaper than big
    assert calibration_row({"C4": (300, 10), "new": (1, 1)}, timings, "p") == "C4"
    assert calibration_row({"new": (5, 1), "other": (1, 1)}, [], "p") == "other"


def test_the_total_runs_the_jobs_in_the_launchers_order():
    """[3, 3, 2, 2, 2] on 2 slots take 7 in that order and 6 in the order 3, 2, 2, 3, 2 (longest first is
    no lower bound); the plan's total is the order the launcher starts them in."""
    from ablate.jobs.estimate import makespan

    assert makespan([3, 3, 2, 2, 2], 2) == 7
    assert makespan([3, 2, 2, 3, 2], 2) == 6
    assert makespan([5, 4, 3, 3], 1) == 15 and makespan([5, 4, 3, 3], 8) == 5 and makespan([], 3) == 0


def test_every_basis_an_estimate_gives_is_named_in_the_module_and_the_docs():
    import ablate.jobs.estimate as est

    doc = (ROOT / "docs" / "planner.md").read_text()
    for basis in est.BASES:
        assert f"- {basis}:" in est.__doc__, basis
        assert f"| {basis} |" in doc, basis


def _record(folder: Path, row: str, seed: int, machine: str, per_step: float, outside: float, params: int):
    """A finished record of the tiny preset as training writes one, by the fields estimates read."""
    cpu, device = machine.split("; ")
    run = folder / row / f"{row}-000000000000-s{seed}"
    run.mkdir(parents=True)
    steps = 40
    rec = {
        "run_id": run.name, "status": "finished", "row": row, "seed": seed, "steps": steps, "params": params,
        "train_time_s": per_step * steps, "wall_time_s": per_step * steps + outside,
        "config": {"recipe": "tiny", "scale": {"name": "tiny"}}, "machine": {"cpu": cpu}, "device": device,
    }  # fmt: skip
    (run / "record.json").write_text(json.dumps(rec))


def test_one_calibration_gives_every_job_an_estimate(tmp_path):
    """Records of base and A1 made on another machine, none here: every job of the plan is of unknown time
    and the closing line names one calibration command, into this machine's folder beside the results: A1
    (as cheap as base under the tiny preset, and first by name). With that calibration's record (A1, 0.06 s
    a step here against 0.04 there), A1 is measured and base is its record there x 1.5: the plan lines say
    so, with the seconds the formula gives."""
    from ablate.jobs.estimate import duration, machine_folder
    from ablate.jobs.plan import _machine

    here = _machine("cpu", 1)
    results = tmp_path / "results"
    _record(results, "base", 1, "Other CPU (family 9, model 9); cpu (1 threads)", 0.02, 2.0, 100)
    _record(results, "A1", 1, "Other CPU (family 9, model 9); cpu (1 threads)", 0.04, 4.0, 100)
    p = _run(tmp_path, "-m", "model=base,A1", "seed=2", "--plan")
    assert p.returncode == 0, p.stderr[-3000:]
    lines = _plan_lines(p.stdout)
    assert all("estimate unknown (the calibration below gives one)" in ln for ln in lines.values())
    into = f"{tmp_path}/results.calibration/{machine_folder(here)}"
    commands = [ln.strip() for ln in p.stdout.splitlines() if ln.startswith("    python -m ablate.run")]
    assert len(commands) == 1 and commands[0].endswith(f"results_dir={into}")
    assert (
        commands[0].startswith("python -m ablate.run model=A1 seed=2 ")
        and "train.max_steps=50" in commands[0]
    )

    _record(Path(into), "A1", 2, here, 0.06, 1.0, 100)
    p = _run(tmp_path, "-m", "model=base,A1", "seed=2", "--plan")
    lines = _plan_lines(p.stdout)
    steps = int(re.search(r"([\d,]+) steps", lines[("base", 2)]).group(1).replace(",", ""))
    assert f"~{duration(0.06 * steps + 1.0)} (measured: 1 record of A1)" in lines[("A1", 2)]
    assert f"~{duration(1.5 * 0.02 * steps + 1.5 * 2.0)} (ratio: 1 record of base" in lines[("base", 2)]
    assert "python -m ablate.run" not in p.stdout  # no calibration left to run


def test_the_plans_composition_is_hydras(tmp_path):
    """The plan composes the jobs that share their group choices once and sets each job's values on a
    copy: the same config as Hydra's own composition of each job, over groups, values of every kind, and
    a value Hydra refuses (its own error)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf, open_dict

    from ablate.config import register_configs
    from hydra_plugins.ablate_plan.plan_launcher import Composer

    register_configs()
    jobs = [
        ["experiment=table3_multi30k", "model=A1", "seed=2", "data.root=/x", "trainer.threads=1"],
        ["experiment=table3_multi30k", "model=A1", "seed=3", "data.root=/y", "trainer.threads=1"],
        ["model=E", "seed=1", "model.dropout=0.3", "train.max_steps=7", "results_dir=r"],
        ["model=E", "seed=1", "+extra=1"],  # not a plain value: composed by Hydra
        ["model=base", "optim.betas=[0.8,0.9]", "decode.beam=2"],
    ]
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        master = compose("config", [], return_hydra_config=True)
        composer = Composer(loader, master)
        composed = [composer(overrides) for overrides in jobs]  # all first, as the sweeper's check does
        for overrides, (ours, holder) in zip(jobs, composed, strict=True):
            hydras = loader.load_sweep_config(master, overrides)
            assert holder.hydra.runtime.choices == hydras.hydra.runtime.choices
            with open_dict(hydras):
                del hydras["hydra"]
            ours = OmegaConf.to_object(ours) if OmegaConf.is_config(ours) else ours
            assert ours == OmegaConf.to_object(hydras), overrides
        assert (composed[0][0].seed, composed[1][0].seed) == (2, 3)  # one working copy, each job its own
        with pytest.raises(Exception, match="seed"):
            composer(["model=base", "seed=abc"])


# ---- the cost of a step: a row never run, estimated from records of any architecture ----


def test_a_transformers_multiply_accumulates_are_the_hand_count_and_torchs():
    """A Transformer of N 1, d_model 4, d_ff 8, h 2, d_k = d_v = 2, a vocabulary of 10, on 6 source and 6
    target tokens in sentences of 3. A token, forward: each attention's projections Q K V O 4 x 4 each
    (64), its scores and weighted values 2 heads x 2 x 3 each (24), the feed-forward 4 x 8 x 2 (64); the
    decoder's cross-attention Q O on the target (32), K V on the source (32), its scores and values (24);
    the output layer 4 x 10 (40). The backward is twice the forward. torch's FLOP counter on the model
    itself (ablate.jobs.estimate.count, on the meta device) counts the same."""
    from ablate.jobs.estimate import count, transformer_macs
    from ablate.nn.config import TransformerConfig
    from ablate.nn.model import Transformer

    m = TransformerConfig(vocab_size=10, n_layers=1, d_model=4, d_ff=8, n_heads=2, d_k=2, d_v=2)
    encoder = 64 + 24 + 64
    decoder = 64 + 24 + 64 + 32 + 24
    source = encoder + 32  # the cross-attention's keys and values of a source token
    target = decoder + 40
    hand = 3 * 6 * (source + target)
    assert hand == 7776
    assert transformer_macs(m, tokens=6, length=3) == hand
    counted = count(lambda: Transformer(m), tokens=6, length=3)
    assert counted.macs == hand
    assert counted.elements > 0 and counted.cost == hand + 80 * counted.elements + 3e9  # the loop's own


def test_a_rows_cost_is_counted_only_where_no_record_of_it_gives_its_time():
    """Measured and ratio estimates never count a step (a plan of rows already run imports no torch);
    a row run nowhere is this machine's seconds per unit of cost (the median over its records of any
    architecture) x its own cost a step."""
    from ablate.jobs.estimate import Estimate, Timing, estimate

    def uncountable():
        raise AssertionError("counted")

    timings = [
        Timing("base", "p", HERE, 0.3, 5.0, uncountable),
        Timing("A1", "p", THERE, 0.4, 20.0, uncountable),
        Timing("base", "p", THERE, 0.2, 10.0, uncountable),
    ]
    assert estimate("base", "p", HERE, 10, uncountable, timings).basis == "measured"
    assert estimate("A1", "p", HERE, 10, uncountable, timings).basis == "ratio"
    here = [
        Timing("base", "p", HERE, 0.30, 5.0, lambda: 1000.0),
        Timing("conv", "p", HERE, 0.10, 7.0, lambda: 400.0),  # 0.25 ms a unit against base's 0.3
        Timing("C5", "p", HERE, 0.80, 9.0, lambda: None),  # a record whose model cannot be built here
    ]
    gru = estimate("gru", "p", HERE, 100, lambda: 200.0, here)
    assert gru.basis == "scaled" and gru.detail == "2 record(s) of base, conv, by the cost of a step"
    assert gru.seconds == pytest.approx(0.275e-3 * 200 * 100 + 6.0) and gru.train_s == pytest.approx(5.5)
    # a model the meta device cannot count (plan._step_cost: None): no number, the calibration gives one
    assert estimate("odd", "p", HERE, 100, lambda: None, here, "cmd") == Estimate(None, "unknown", "cmd")


def test_the_plan_line_names_label_smoothing_and_a_criterion_of_its_own(tmp_path):
    """D3 (no label smoothing) differs from base only in eps_ls: its plan line says so."""
    p = _run(tmp_path, "-m", "model=base,D3,D4", "--plan")
    assert p.returncode == 0, p.stderr[-3000:]
    lines = _plan_lines(p.stdout)
    assert "P_drop 0.1, eps_ls 0.1, sinusoidal" in lines[("base", 1)]
    assert "P_drop 0.1, eps_ls 0, sinusoidal" in lines[("D3", 1)]
    assert "P_drop 0.1, eps_ls 0.2, sinusoidal" in lines[("D4", 1)]


def _prepared(folder: Path) -> Path:
    """A prepared corpus of 8 wordpieces: training targets [4 4] [5], dev target [4 6]."""
    import numpy as np

    folder.mkdir(parents=True)
    (folder / "meta.json").write_text(json.dumps({"vocab_size": 8}))
    train = {"tgt_tokens": np.array([4, 4, 5], np.int32), "tgt_offsets": np.array([0, 2, 3], np.int64)}
    np.savez(folder / "train.npz", **train)
    dev = {"tgt_tokens": np.array([4, 6], np.int32), "tgt_offsets": np.array([0, 2], np.int64)}
    np.savez(folder / "dev.npz", **dev)
    return folder


def test_a_row_whose_records_sit_at_the_unigram_perplexity_is_said_not_to_learn(tmp_path):
    """The unigram model, add-one over 8 pieces: counts 4: 2, 5: 1, end of sentence: 2 (13 with the ones);
    dev 4 6 </s> at 3/13, 1/13, 3/13: PPL 13 / 9^(1/3) = 6.25. A record at dev PPL 5.7 (>= 0.9 x 6.25) says
    the row does not learn under its preset; one at 3.0 alone says nothing (a calibration's beside it at 9.0
    is not the row's learning); another preset's, nothing."""
    from ablate.config import RunConfig
    from ablate.jobs.plan import not_learning, unigram_ppl

    def cfg(results: Path) -> RunConfig:
        c = RunConfig(results_dir=str(results), recipe="tiny")
        c.scale.name, c.model.name, c.data.root = "tiny", "A1", str(tmp_path / "prepared")
        return c

    _prepared(tmp_path / "prepared")
    assert unigram_ppl(cfg(tmp_path)) == pytest.approx(13 / 9 ** (1 / 3))
    stalled, learning = tmp_path / "stalled", tmp_path / "learning"
    calibration = tmp_path / "learning.calibration"  # a calibration's few steps: not the row's learning
    for folder, ppls in ((stalled, (5.7, 3.0)), (learning, (3.0,)), (calibration, (9.0,))):
        for seed, ppl in enumerate(ppls, 1):
            _record(folder, "A1", seed, HERE, 0.1, 1.0, 100)
            path = folder / "A1" / f"A1-000000000000-s{seed}" / "record.json"
            path.write_text(json.dumps({**json.loads(path.read_text()), "metrics": {"dev_ppl": ppl}}))
    assert not_learning(cfg(stalled)) == (
        "(does not learn under this preset: 1 of its 2 record(s) end at dev PPL 5.7 or more, the target's "
        "unigram model's 6.2; a stalled or diverging model takes a lower schedule.scale, a longer "
        "schedule.warmup_steps or train.grad_clip)"
    )
    assert not_learning(cfg(learning)) == ""
    other = cfg(stalled)
    other.recipe = "cpu"
    assert not_learning(other) == ""


@pytest.mark.slow
def test_a_calibration_record_cut_short_is_named_and_the_calibration_runs_again(tmp_path):
    """The calibration the plan prints ran, and its record was then cut short: the plan names that record
    in one line (it cannot give an estimate), prints the calibration again, and that command trains (it
    sets the unreadable record's folder aside): no loop."""
    import shlex

    results = tmp_path / "results"
    _record(results, "base", 1, "Other CPU (family 9, model 9); cpu (1 threads)", 0.02, 2.0, 100)
    p = _run(tmp_path, "-m", "model=base", "seed=2", "--plan")
    (command,) = [ln.strip() for ln in p.stdout.splitlines() if ln.startswith("    python -m ablate.run")]
    assert " resume=false " in command

    def calibrate() -> subprocess.CompletedProcess:
        env = dict(os.environ, WANDB_MODE="offline")
        argv = [sys.executable, *shlex.split(command)[1:]]
        return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)

    assert calibrate().returncode == 0
    (record,) = (tmp_path / "results.calibration").rglob("record.json")
    record.write_text(record.read_text()[:200])  # cut short
    p = _run(tmp_path, "-m", "model=base", "seed=2", "--plan")
    assert p.returncode == 0, p.stderr[-3000:]
    named = [ln for ln in p.stdout.splitlines() if str(record) in ln]
    assert len(named) == 1 and named[0].startswith(f"[plan] {record}: unreadable result record (")
    assert named[0].endswith("): left out of the estimates")
    assert [ln.strip() for ln in p.stdout.splitlines() if ln.startswith("    python -m")] == [command]
    calibrated = calibrate()
    assert calibrated.returncode == 0, calibrated.stderr[-3000:]
    p = _run(tmp_path, "-m", "model=base", "seed=2", "--plan")
    assert "(measured: 1 record of base)" in _plan_lines(p.stdout)[("base", 2)]
    assert "unreadable" not in p.stdout  # the cut record's folder is set aside, beside the new one


def test_a_rows_records_of_another_model_are_not_its_own():
    """`model=gru +model.args.d_model=512` is the row gru of another model: gru's record (d_model 64) is
    not its own, and scales by the cost of a step; the same model (whatever its corpus's vocabulary) is
    measured; a record or a job that does not say its model counts as the row's."""
    from ablate.jobs.estimate import Timing, estimate, model_key

    narrow = model_key({"d_model": 64, "layers": 1, "vocab_size": 500})
    wide = model_key({"d_model": 512, "layers": 1, "vocab_size": 500})
    assert narrow == model_key({"d_model": 64, "layers": 1, "vocab_size": 480}) != wide
    timings = [Timing("gru", "p", HERE, 0.1, 5.0, lambda: 100.0, narrow)]
    scaled = estimate("gru", "p", HERE, 10, lambda: 800.0, timings, model=wide)
    assert scaled.basis == "scaled" and scaled.seconds == pytest.approx(0.1 / 100 * 800 * 10 + 5.0)
    assert estimate("gru", "p", HERE, 10, 800.0, timings, model=narrow).basis == "measured"
    assert estimate("gru", "p", HERE, 10, 800.0, timings).basis == "measured"
    unsaid = [Timing("gru", "p", HERE, 0.1, 5.0, 100.0)]
    assert estimate("gru", "p", HERE, 10, 800.0, unsaid, model=wide).basis == "measured"
