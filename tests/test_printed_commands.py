"""A record is data: every command the package prints for a researcher to paste (--missing-command,
--decide-command, the plan's calibration) is shell-safe whatever a record's values hold. Pasted into bash
it runs exactly its argv words (no marker file appears), each override parses in Hydra back to the
record's value, and no value is read as an option; a record's git revision reaches git only as a commit
hash."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from test_report_table3 import TODAY, _write_run

from ablate.jobs.command import CommandError, checked_override, hydra_value, override, run_command
from ablate.records import staleness
from ablate.report.__main__ import main

ROOT = Path(__file__).resolve().parents[1]
MARK = "PWNED"  # the file a hostile value would create, in the folder the command is pasted in
HOSTILE = {
    "quotes": f"a'b'c; touch {MARK} #",
    "double quotes": f'x"; touch {MARK}; echo "y',
    "command substitution": f"$(touch {MARK})",
    "backticks": f"`touch {MARK}`",
    "newline": f"one\ntouch {MARK}",
    "option": f"--cfg=job -cd /tmp; touch {MARK}",
    "spaces": "  two  spaces ",
    "interpolation": "${oc.env:HOME}",
    "all": f"a'b\"c; touch {MARK} # $(touch {MARK}) `touch {MARK}`\n-x \\",
}


@pytest.fixture(autouse=True)
def _a_users_shell(monkeypatch, tmp_path):
    """A user's shell in a folder of records of the package's own study; the records' code is today's."""
    monkeypatch.delenv("ABLATE_RESULTS", raising=False)
    monkeypatch.delenv("ABLATE_STUDY", raising=False)
    monkeypatch.setattr(staleness, "code_hash", lambda task: TODAY)
    monkeypatch.chdir(tmp_path)


def _hostile_record(root: Path, value: str, launched: bool, note: bool = True) -> None:
    """A finished record of base, seed 1, whose data.src_lang (a field) and schedule.note (a key of its
    own, where `note`) hold `value`; `launched`: it kept its launch (the overrides its command gave, in
    Hydra's grammar)."""
    folder = _write_run(root / "results", "base", 1)
    rec = json.loads((folder / "record.json").read_text())
    rec["config"]["data"]["src_lang"] = value
    rec["config"]["train"]["max_tokens"] = 2000  # the fixture's 4096 a step is more than its batch: refused
    schedule = {"_target_": "ablate.nn.optim.InverseSqrt", "_partial_": True, "warmup_steps": 4000}
    rec["config"]["schedule"] = {**schedule, "scale": 1.0, **({"note": value} if note else {})}
    if launched:
        given = ["model=base", "seed=1", "scale=tiny", override("data.src_lang", value)]
        given += [override("schedule.note", value, "+")] if note else []
        rec["launch"] = {"overrides": given, "searchpath": []}
    (folder / "record.json").write_text(json.dumps(rec))


def _pasted(printed: str, where: Path) -> list[list[str]]:
    """The argv of each command `printed` holds, as bash runs them pasted in `where` (a `python` on PATH
    that writes its argv down and runs nothing); no file but those argv lists appears there."""
    bin_ = where / "bin"
    bin_.mkdir(exist_ok=True)
    (bin_ / "python").write_text(
        f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -c "import json, sys, uuid; '
        f"json.dump(sys.argv[1:], open(f'argv-{{uuid.uuid4().hex}}.json', 'w'))\" \"$@\"\n"
    )
    (bin_ / "python").chmod(0o755)
    before = set(os.listdir(where))
    env = {"PATH": f"{bin_}:/usr/bin:/bin", "HOME": str(where)}
    done = subprocess.run(["bash", "-c", printed], cwd=where, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    new = set(os.listdir(where)) - before
    assert not (where / MARK).exists() and all(n.startswith("argv-") for n in new), new
    files = sorted((where / n for n in new), key=os.path.getmtime)
    return [json.loads(f.read_text()) for f in files]


def _composed(overrides: list[str]):
    """The config `python -m ablate.run <overrides>` composes (Hydra's compose, the package's conf)."""
    from hydra import compose, initialize_config_dir

    from ablate.config import register_configs

    register_configs()
    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        return compose("config", overrides=[*overrides, "logger=none"])


@pytest.mark.parametrize("launched", [False, True], ids=["rebuilt", "launched"])
@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_missing_command_pasted_into_bash_runs_its_words_and_composes_the_records_value(
    name, launched, tmp_path, capsys
):
    value = HOSTILE[name]
    _hostile_record(tmp_path, value, launched)
    assert (
        main(["table3", "--results", "results", "--missing-command", "--rows", "base", "--seeds", "1,2"]) == 0
    )
    printed = capsys.readouterr().out
    assert printed.startswith("python -m ablate.run -m model=base seed=2 ")
    (argv,) = _pasted(printed, tmp_path)
    assert argv[:3] == ["-m", "ablate.run", "-m"]
    words = argv[3:]
    assert all("=" in w and not w.startswith("-") for w in words), words  # no option among them
    cfg = _composed(words)
    assert cfg.data.src_lang == value and cfg.schedule.note == value
    assert (cfg.model.name, cfg.seed, cfg.scale.name) == ("base", 2, "tiny")


def test_a_plain_command_reads_as_typed():
    """shlex quotes only what needs it: plain rows, seeds and values stay as a researcher types them."""
    words = ["model=base,wide", "seed=1,2", override("train.lr", 0.001), override("data.name", "multi30k")]
    assert run_command(words, multirun=True) == (
        "python -m ablate.run -m model=base,wide seed=1,2 train.lr=0.001 data.name=multi30k"
    )
    assert override("results_dir", "my results") == "results_dir=my results"
    assert (
        run_command([override("results_dir", "my results")])
        == "python -m ablate.run 'results_dir=my results'"
    )


ODD = [
    "true",
    "1e3",
    "null",
    "a,b",
    "[1]",
    "-x",
    "",
    "\\",
    1,
    0.5,
    True,
    None,
    [1, "a b", "x'y"],
    {"k": "$(x)"},
]


@pytest.mark.parametrize("value", [*HOSTILE.values(), *ODD])
def test_hydra_parses_every_override_back_to_its_value(value):
    """Hydra's parser, then OmegaConf's resolution, give back the value, of any type a record holds: a
    string that reads as a bool, a number, null, a sweep or a list stays a string."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    got = OverridesParser.create().parse_override(override("k", value)).value()
    assert OmegaConf.to_container(OmegaConf.create({"k": got}), resolve=True)["k"] == value
    assert isinstance(hydra_value(value), str)


@pytest.mark.parametrize("word", ["-cd=/tmp/evil", "--config-dir=/tmp/evil", "--cfg", "-m", "x=a;b", "x=`y`",
                                  "a b=c", ""])  # fmt: skip
def test_a_word_that_is_an_option_or_no_override_is_never_printed(word):
    with pytest.raises(CommandError):
        checked_override(word)
    with pytest.raises(CommandError):
        run_command(["model=base", word])
    with pytest.raises(CommandError):
        override(word or "-", "v")  # nor as a key


@pytest.mark.parametrize("given", ["--config-dir=/tmp/evil", f"x=1; touch {MARK}", "-m"])
def test_a_launch_override_that_would_be_an_option_prints_no_command(given, tmp_path, capsys):
    """A record whose launch holds a word no override is: the report prints no command (exit 2, one line
    naming the record and the word), and nothing of it runs."""
    _hostile_record(tmp_path, "en", launched=True)
    (path,) = (tmp_path / "results").rglob("record.json")
    rec = json.loads(path.read_text())
    rec["launch"]["overrides"].append(given)
    path.write_text(json.dumps(rec))
    assert (
        main(["table3", "--results", "results", "--missing-command", "--rows", "base", "--seeds", "1,2"]) == 2
    )
    out, err = capsys.readouterr()
    assert out == ""
    (line,) = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert repr(given) in line and "the record of base-" in line and "no command is printed" in line


def test_a_record_key_that_is_no_config_key_prints_no_command(tmp_path, capsys):
    _hostile_record(tmp_path, "en", launched=False)
    (path,) = (tmp_path / "results").rglob("record.json")
    rec = json.loads(path.read_text())
    rec["config"]["schedule"][f"x=1 --cfg job; touch {MARK}"] = 2
    path.write_text(json.dumps(rec))
    assert (
        main(["table3", "--results", "results", "--missing-command", "--rows", "base", "--seeds", "1,2"]) == 2
    )
    out, err = capsys.readouterr()
    assert out == "" and "is not a config key an override can name" in err


def test_the_decide_command_and_its_calibration_pasted_into_bash_compose_the_records_value(tmp_path):
    """--decide-command's lines (rows that need more seeds, the record's overrides) and the calibration the
    plan prints for a run of unknown time, into a results folder whose name is hostile too: each pasted
    runs its words, and composes the value."""
    from test_planner import _collection

    from ablate.config import to_dataclass
    from ablate.jobs import plan
    from ablate.report.collect import Run
    from ablate.report.decide import decide, decide_command
    from ablate.report.missing import command_overrides
    from ablate.tasks import PPL

    value = HOSTILE["all"]
    over = command_overrides(Run({"config": {"data": {"name": "builtin", "src_lang": value}}}))
    assert override("data.src_lang", value) in over
    coll = _collection({"base": {1: 5.0, 2: 5.2, 3: 5.1}, "A1": {1: 5.3, 2: 5.1, 3: 5.6}})
    coll.results_dir = tmp_path
    cmd, _, _ = decide_command(coll, decide(coll, [PPL]), over)
    for argv in _pasted(cmd, tmp_path):
        assert argv[:3] == ["-m", "ablate.run", "-m"] and argv[3].startswith("model=")
        assert (
            _composed([w for w in argv[3:] if not w.startswith(("model=", "seed="))]).data.src_lang == value
        )

    results = str(tmp_path / f"res'ults; touch {MARK}")
    words = ["recipe=tiny", "scale=tiny", "model=base", "seed=3", override("data.src_lang", value)]
    cfg = to_dataclass(_composed([*words, override("results_dir", results)]))
    command = plan.calibration(cfg, words)["command"]
    (argv,) = _pasted(command, tmp_path)
    assert argv[:2] == ["-m", "ablate.run"] and all(not w.startswith("-") for w in argv[2:])
    again = _composed(argv[2:])
    assert again.data.src_lang == value and again.train.max_steps == plan.MEASURE_STEPS
    assert again.results_dir.startswith(f"{results}.calibration/")


def test_a_hostile_missing_command_plans_as_printed_in_a_clean_shell(tmp_path, capsys):
    """The printed command, run by the real interpreter with --plan (trains nothing) in bash: Hydra takes
    every word, plans the one cell, and no marker appears (schedule.note aside: the schedule's class takes
    no such key, and the plan would refuse the cell for it)."""
    _hostile_record(tmp_path, HOSTILE["all"], launched=False, note=False)
    assert (
        main(["table3", "--results", "results", "--missing-command", "--rows", "base", "--seeds", "1,2"]) == 0
    )
    printed = capsys.readouterr().out.rstrip("\n")
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "PYTHONPATH": str(ROOT),
    }
    done = subprocess.run(["bash", "-c", f"{printed} --plan"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    assert not (tmp_path / MARK).exists()
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    assert "plan of 1 run" in done.stdout, done.stdout


# ---- a record's revision reaches git only as a commit hash


@pytest.mark.parametrize(
    "rev", ["--output=/tmp/x", "HEAD; rm -rf ~", "-p", "HEAD", "main", "0123abc..HEAD", 12]
)
def test_a_records_revision_that_is_no_commit_hash_never_reaches_git(rev, monkeypatch):
    """A record whose code changed and whose revision is not 7 to 40 hex digits: its staleness says why
    in one line, and git is never asked about it (no call names it)."""
    calls = []
    run = subprocess.run

    def recording(args, *a, **k):
        calls.append(list(args))
        return run(args, *a, **k)

    monkeypatch.setattr(staleness.subprocess, "run", recording)
    monkeypatch.setattr(staleness, "code_hash", lambda task, *a: "0" * 12)
    rec = {"task": "translation", "code_hash": "1" * 12, "git": rev, "uncommitted": []}
    why = staleness.why_stale(rec)
    assert why is not None and "\n" not in why
    assert "is not a commit hash (7 to 40 hex digits): not compared with git" in why
    assert not any(str(rev) in " ".join(map(str, c)) for c in calls), calls
    assert staleness._changed_since(str(rev), "translation") is None


def test_a_commit_hash_is_compared_with_git():
    assert staleness.revision_problem("0123abc") is None
    assert staleness.revision_problem("0" * 40) is None
    for bad in ("0123ab", "0" * 41, "0123ABC", "0123abc\n", None, ["0123abc"]):
        assert staleness.revision_problem(bad) is not None
