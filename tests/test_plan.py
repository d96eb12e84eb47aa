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
    assert lines[("A1", 2)].endswith("(scaled: 1 record(s) of base, by parameters)")
    assert f"  {ids[('base', 2)]}  to train  ~" in lines[("base", 2)]
    assert lines[("base", 2)].endswith("(measured: 1 record of base)")
    assert (
        "recipe=tiny scale=tiny  N 1, d_model 32, d_ff 128, h 1, d_k 32, d_v 32, P_drop 0.1"
        in lines[("A1", 1)]
    )
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
