"""Bad input, each a case: a one-line error naming the file, line or config key, and nothing half-written."""

import contextlib
import dataclasses
import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from terminal import AS_TYPED

from ablate.config import ConfigError, to_dataclass
from ablate.data.batching import BatchingError
from ablate.data.sources import DataError
from ablate.data.tokenizer import VocabError
from ablate.jobs.train import train
from ablate.records import identity, store
from ablate.run import register_configs  # noqa: F401 - registers the schema
from ablate.training.fit import CheckpointError

ROOT = Path(__file__).resolve().parents[1]


def cfg_for(tmp_path, *overrides):
    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        d = compose(
            "config",
            overrides=[
                "scale=tiny",
                "recipe=tiny",
                "logger=none",
                f"results_dir={tmp_path}/results",
                f"data.cache_dir={tmp_path}/cache",
                *overrides,
            ],
        )
    return to_dataclass(d)


def write(path: Path, lines: list[str]) -> str:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


def files_corpus(tmp_path, train_src=None, train_tgt=None, dev_src=None, dev_tgt=None, n=60):
    words = ["a b c", "d e f g", "h i", "j k l m n", "o p q"]
    src = [f"{words[i % 5]} {i}" for i in range(n)]
    tgt = [f"{words[(i + 1) % 5]} {i}" for i in range(n)]
    paths = {
        "train_src": train_src or write(tmp_path / "train.en", src),
        "train_tgt": train_tgt or write(tmp_path / "train.de", tgt),
        "dev_src": dev_src or write(tmp_path / "dev.en", src[:5]),
        "dev_tgt": dev_tgt or write(tmp_path / "dev.de", tgt[:5]),
    }
    return ["data=files", "data.vocab_size=40"] + [f"data.{k}={v}" for k, v in paths.items()]


def nothing_written(tmp_path):
    assert not list((tmp_path / "results").rglob("record.json")) if (tmp_path / "results").exists() else True
    assert not list((tmp_path / "cache").glob("data/*/meta.json")) if (tmp_path / "cache").exists() else True


def one_line(e: BaseException) -> str:
    msg = str(e)
    assert "\n" not in msg.strip(), msg
    return msg


def test_missing_data_file(tmp_path):
    with pytest.raises(DataError, match=r"nope\.en: no such file"):
        train(cfg_for(tmp_path, *files_corpus(tmp_path, train_src=str(tmp_path / "nope.en"))))
    nothing_written(tmp_path)


def test_unreadable_data_file(tmp_path):
    bad = tmp_path / "bad.en.gz"
    bad.write_bytes(b"\x1f\x8b\x08\x00 this is not gzip")
    with pytest.raises(DataError, match=r"bad\.en\.gz: cannot read"):
        train(cfg_for(tmp_path, *files_corpus(tmp_path, train_src=str(bad))))
    nothing_written(tmp_path)


def test_line_counts_differ(tmp_path):
    short = write(tmp_path / "short.de", ["x"] * 10)
    with pytest.raises(DataError, match=r"train\.en has 60 lines but .*short\.de has 10") as e:
        train(cfg_for(tmp_path, *files_corpus(tmp_path, train_tgt=short)))
    one_line(e.value)
    nothing_written(tmp_path)


def test_empty_line_in_dev(tmp_path):
    dev = write(tmp_path / "devx.en", ["a b", "", "c d", "e", "f"])
    with pytest.raises(DataError, match=r"devx\.en:2: empty line"):
        train(cfg_for(tmp_path, *files_corpus(tmp_path, dev_src=dev)))
    nothing_written(tmp_path)


def test_invalid_utf8(tmp_path):
    bad = tmp_path / "utf.en"
    bad.write_bytes(("ok\n" * 7).encode() + b"caf\xe9\n" + ("ok\n" * 52).encode())
    with pytest.raises(DataError, match=r"utf\.en:8: invalid UTF-8"):
        train(cfg_for(tmp_path, *files_corpus(tmp_path, train_src=str(bad))))
    nothing_written(tmp_path)


def test_line_of_100000_characters(tmp_path):
    dev = write(tmp_path / "long.en", ["a b", "x" * 100_000, "c", "d", "e"])
    with pytest.raises(DataError, match=r"long\.en:2: line of 100,000 characters"):
        train(cfg_for(tmp_path, *files_corpus(tmp_path, dev_src=dev)))
    nothing_written(tmp_path)
    # In training data the pair is dropped and counted, not crashed on.
    from ablate.data.sources import read_parallel

    src = write(tmp_path / "t.en", ["a b", "y" * 100_000, "c d"])
    tgt = write(tmp_path / "t.de", ["a b", "z", "c d"])
    assert read_parallel(src, tgt).dropped == {"too_long": 1}


def test_empty_corpus(tmp_path):
    empty = write(tmp_path / "e.en", [])
    empty_de = write(tmp_path / "e.de", [])
    with pytest.raises(DataError, match=r"e\.en: no usable sentence pairs"):
        train(cfg_for(tmp_path, *files_corpus(tmp_path, train_src=empty, train_tgt=empty_de)))
    nothing_written(tmp_path)


def test_vocabulary_larger_than_the_data_supports(tmp_path):
    with pytest.raises(VocabError, match=r"data\.vocab_size=5000 is larger than this corpus supports") as e:
        train(cfg_for(tmp_path, *files_corpus(tmp_path), "data.vocab_size=5000"))
    one_line(e.value)
    nothing_written(tmp_path)


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (["model.d_model=256"], "model.n_heads \\* model.d_v"),
        (["model.dropout=-0.1"], "model.dropout=-0.1 must be in \\[0, 1\\)"),
        (["model.dropout=1.0"], "model.dropout=1.0 must be in \\[0, 1\\)"),
        (["model.label_smoothing=1.0"], "model.label_smoothing=1.0 must be in \\[0, 1\\)"),
        (["model.label_smoothing=-0.5"], "model.label_smoothing=-0.5"),
        (["model.d_model=511", "model.strict_heads=false"], "model.d_model=511 must be even"),
        (["model.positional=alibi"], "model.positional='alibi' is not one of sinusoidal, learned, rotary"),
        (["train.budget_minutes=30"], "train.budget_minutes=30.0 needs a schedule that decays to an end"),
        (["schedule=cosine", "train.budget_minutes=0"], "train.budget_minutes=0.0 must be positive"),
        (
            ["schedule=constant", "schedule.warmup_steps=0"],
            "schedule.peak: needed with schedule.warmup_steps=0",
        ),
        (["schedule.warmup_steps=0"], "schedule.warmup_steps=0: equation 3 needs a warmup of 1 or more"),
        (
            ["optim=sgd", "+optim.momentun=0.5"],
            r"optim.momentun: not a key of torch.optim.SGD \(did you mean momentum",
        ),
        (["+optim.lr=0.1"], r"optim.lr: set by the run, not the config \(the schedule's"),
        (["+schedule.peek=0.1"], "schedule.peek: not a key of ablate.nn.optim.InverseSqrt"),
        (
            ["optim._target_=torch.optim.Nope"],
            "optim._target_=torch.optim.Nope: not a class that imports here",
        ),
    ],
)
def test_bad_model_config(tmp_path, overrides, key):
    with pytest.raises(ConfigError, match=key) as e:
        train(cfg_for(tmp_path, *overrides))
    one_line(e.value)
    nothing_written(tmp_path)


def test_max_tokens_smaller_than_the_longest_sentence(tmp_path):
    with pytest.raises(BatchingError, match=r"train\.max_tokens=20 is smaller than the longest sentence"):
        train(cfg_for(tmp_path, "train.max_tokens=20"))


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ckpt")
    cfg = cfg_for(tmp, "train.max_steps=4", "trainer.threads=1")
    rec = train(cfg)
    return tmp, cfg, rec


def _second_run_with(tmp_path, finished_run, payload):
    tmp, _, _ = finished_run
    cfg = cfg_for(tmp, "train.max_steps=4", "model.d_ff=4096", "trainer.threads=1")  # another architecture
    ckpt = identity.run_dir(cfg) / "checkpoints" / "last.ckpt"
    ckpt.parent.mkdir(parents=True, exist_ok=True)
    payload(ckpt)
    return cfg, ckpt


@pytest.mark.parametrize("side", ["--src", "--ref"])
def test_a_too_long_line_of_a_given_file_is_named_by_its_file_and_line(tmp_path, finished_run, side, capsys):
    """`python -m ablate.evaluate RUN --src F --ref F`: a line longer than a decoding batch is named, not
    the training keys (train.max_tokens, data.max_len) the user did not touch."""
    from ablate.evaluate import main

    _, cfg, _ = finished_run
    lines = {"--src": ["a b", "c d", "e f"], "--ref": ["a b", "c d", "e f"]}
    lines[side][1] = " ".join(["the"] * (cfg.train.max_tokens + 5))  # a piece a word at least
    paths = {}
    for flag, text in lines.items():
        paths[flag] = tmp_path / f"{flag[2:]}.txt"
        paths[flag].write_text("\n".join(text) + "\n")
    argv = [str(identity.run_dir(cfg)), "--src", str(paths["--src"]), "--ref", str(paths["--ref"])]
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    err = "\n".join(ln for ln in lines if not ln.startswith("[ablate] note:"))  # a busy machine's note
    assert err.startswith(f"error: {paths[side]} line 2: ") and len(err.splitlines()) == 1, err
    assert "train.max_tokens" not in err and "data.max_len" not in err


def test_checkpoint_of_another_architecture(tmp_path, finished_run):
    src = next(identity.run_dir(finished_run[1]).glob("checkpoints/last.ckpt"))
    cfg, ckpt = _second_run_with(tmp_path, finished_run, lambda p: shutil.copy(src, p))
    with pytest.raises(CheckpointError, match=r"last\.ckpt: checkpoint of a different architecture"):
        train(cfg)
    rec = json.loads((ckpt.parent.parent / "record.json").read_text())
    assert rec["status"] == "failed" and "different architecture" in rec["reason"]


def test_corrupted_checkpoint(tmp_path, finished_run):
    src = next(identity.run_dir(finished_run[1]).glob("checkpoints/last.ckpt"))
    data = src.read_bytes()
    cfg, _ = _second_run_with(tmp_path, finished_run, lambda p: p.write_bytes(data[: len(data) // 2]))
    with pytest.raises(CheckpointError, match=r"no readable checkpoint \(last.ckpt; each read as weights"):
        train(cfg)


class Payload:  # a checkpoint must not be able to run code: weights_only=True refuses classes
    def __reduce__(self):
        return (os.system, ("echo pwned > /tmp/ablate_pwned",))


def test_checkpoint_that_would_run_code_is_refused(tmp_path, finished_run):
    cfg, _ = _second_run_with(tmp_path, finished_run, lambda p: torch.save({"x": Payload()}, p))
    with pytest.raises(CheckpointError):
        train(cfg)
    assert not Path("/tmp/ablate_pwned").exists()


def test_corrupted_record(tmp_path, finished_run):
    tmp, cfg, rec = finished_run
    other = cfg_for(tmp, "train.max_steps=4", "seed=7")
    path = identity.run_dir(other) / "record.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"status": "finish')
    with pytest.raises(store.RecordError, match=r"record\.json: unreadable result record"):
        train(other)
    assert path.read_text() == '{"status": "finish'  # left as it was for the user to look at
    recs, errors = store.find_records(tmp / "results")
    assert len(errors) == 1 and "record.json" in errors[0]
    assert any(r["run_id"] == rec["run_id"] for r in recs)


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        (["model=Q"], "model/Q"),
        (["model.dropout=1.5"], "error: model.dropout=1.5 must be in [0, 1)"),
    ],
)
def test_cli_exits_non_zero_with_one_line(tmp_path, args, expect):
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "ablate.run",
            "scale=tiny",
            "recipe=tiny",
            "logger=none",
            f"results_dir={tmp_path}/r",
            f"data.cache_dir={tmp_path}/c",
            *args,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode != 0
    assert expect in p.stderr
    if expect.startswith("error:"):
        assert [line for line in p.stderr.splitlines() if line.startswith("error:")] == [expect]


def test_gzip_input_is_read(tmp_path):
    with gzip.open(tmp_path / "g.en.gz", "wt") as f:
        f.write("".join(f"a b {i}\n" for i in range(60)))
    extra = files_corpus(tmp_path, train_src=str(tmp_path / "g.en.gz"))
    cfg = cfg_for(tmp_path, *extra)
    from ablate.data.datamodule import load_corpus

    assert len(load_corpus(cfg.data).splits["train"]) == 60


# A value given unquoted that Hydra's override parser cannot read: each member of the family, alone and in
# a sweep, is one line with the hint to quote it; the same value quoted composes.
UNQUOTED = [
    (
        ["data.train_src=my", "file.txt"],
        "Error parsing override 'file.txt': missing EQUAL",
    ),  # the shell split it
    (["data.train_src=données.txt"], "data.train_src=données.txt: unexpected 'é'"),
    (["sweep_name=Ünïcode"], "sweep_name=Ünïcode: unexpected 'Ü'"),
    (["data.train_src=a(b).txt"], "data.train_src=a(b).txt: mismatched input '.'"),
    (["data.train_src=a&b.txt"], "data.train_src=a&b.txt: unexpected '&'"),
]


@pytest.mark.parametrize("args, said", UNQUOTED)
def test_an_unquoted_value_gets_the_hint_to_quote_it(tmp_path, args, said):
    from ablate.run import QUOTE_HINT

    for multirun in ([], ["-m"]) if args[0].startswith("data.train_src=données") else ([],):
        cmd = [sys.executable, "-m", "ablate.run", *multirun, *args, f"results_dir={tmp_path}/r"]
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 2 and len(lines) == 1, p.stderr[-2000:]
        assert lines[0].startswith(f"error: {said}"), lines
        assert lines[0].endswith(f"({QUOTE_HINT})"), lines
    key, _, value = " ".join(args).partition("=")
    quoted = [sys.executable, "-m", "ablate.run", f"{key}='{value}'", "--cfg", "job", "-p", key]
    q = subprocess.run(quoted, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert q.returncode == 0 and q.stdout.strip().splitlines()[-1] == value, q.stderr[-2000:]


# Ctrl-C while a corpus is prepared (the vocabulary learned, the text encoded), in every command that
# prepares one: one line and exit 130, no traceback, and the next call finds nothing half-written.
PREPARING = {
    "run": [
        "-m",
        "ablate.run",
        "logger=none",
        "recipe=tiny",
        "scale=tiny",
        "train.max_steps=1",
        "decode.dev_limit=2",
    ],
    "prepare": ["-m", "ablate.prepare"],
}


@pytest.mark.slow
@pytest.mark.parametrize("command", sorted(PREPARING))
def test_ctrl_c_while_the_corpus_is_prepared_is_one_line(tmp_path, multi30k_dir, command):
    import signal

    data = [
        "data=multi30k",
        f"data.root={multi30k_dir}",
        f"data.cache_dir={tmp_path}/cache",
        "data.vocab_size=8000",
    ]
    args = [
        sys.executable,
        *PREPARING[command],
        *data,
        *([f"results_dir={tmp_path}/r"] if command == "run" else []),
    ]
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **AS_TYPED)
    for line in p.stdout:
        if line.startswith("vocabulary"):  # learning the 8,000-piece vocabulary, then encoding: seconds
            os.killpg(p.pid, signal.SIGINT)
            break
    after = p.stdout.read().splitlines()
    assert p.wait() == 130, after
    assert len(after) == 1 and after[0].startswith("[ablate] stopped: interrupted by Ctrl-C"), after
    assert not list((tmp_path / "cache" / "data").glob("*/meta.json"))  # no corpus folder claims to be whole
    again = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]


# Degenerate data that prepares and trains without an error (ablate.data.degenerate): said before training.
def _multi30k_files(m: Path) -> dict[str, Path]:
    return {"train_src": m / "train.en.gz", "train_tgt": m / "train.de.gz", "dev_src": m / "val.en.gz",
            "dev_tgt": m / "val.de.gz", "test_src": m / "test_2016_flickr.en.gz",
            "test_tgt": m / "test_2016_flickr.de.gz"}  # fmt: skip


@pytest.mark.parametrize("split", ["dev", "test"])
def test_held_out_sides_swapped_are_refused_before_the_vocabulary(tmp_path, multi30k_dir, split):
    files = _multi30k_files(multi30k_dir)
    files[f"{split}_src"], files[f"{split}_tgt"] = files[f"{split}_tgt"], files[f"{split}_src"]
    overrides = ["data=files", *(f"data.{k}={v}" for k, v in files.items())]
    swapped = (
        rf"the {split} sides look swapped: \d+% of the source file's words occur only in the training target"
    )
    with pytest.raises(DataError, match=swapped) as e:
        train(cfg_for(tmp_path, *overrides))
    assert str(e.value).endswith(f"swap data.{split}_src and data.{split}_tgt")
    one_line(e.value)
    nothing_written(tmp_path)


def test_held_out_sides_in_order_and_shared_words_are_not_swapped(tmp_path, multi30k_dir):
    from ablate.data.degenerate import SideWords

    plain = {}
    for key, path in _multi30k_files(multi30k_dir).items():
        plain[key] = tmp_path / key
        plain[key].write_bytes(gzip.decompress(path.read_bytes()))
    p = plain
    sides = SideWords(p["train_src"], p["train_tgt"])
    assert sides.swapped(p["dev_src"], p["dev_tgt"]) is None
    assert sides.swapped(p["test_src"], p["test_tgt"]) is None
    assert sides.swapped(p["dev_tgt"], p["dev_src"])  # the negative's negative
    # sides that share their words (a copy task): never swapped, whichever way round
    assert SideWords(p["train_src"], p["train_src"]).swapped(p["dev_src"], p["dev_src"]) is None


@pytest.mark.parametrize("pairs, vocab", [(1, 20), (5, 30), (999, 40)])  # a vocabulary each corpus holds
def test_too_few_training_pairs_are_said_on_every_run(tmp_path, pairs, vocab):
    from ablate.data.corpora import prepare_corpus

    cfg = cfg_for(tmp_path, *files_corpus(tmp_path, n=pairs), f"data.vocab_size={vocab}")
    for _ in ("prepared", "found in the cache"):
        said: list[str] = []
        prepare_corpus(cfg.data, log=said.append)
        warning = [s for s in said if s.startswith("warning:")]
        assert warning == [f"warning: {pairs:,} training pair{'' if pairs == 1 else 's'}: a model learns so "
                           "few by heart, not the task (fewer than 1,000; Multi30k has 29,000, the built-in "
                           "corpus 30,000)"]  # fmt: skip
    enough = cfg_for(tmp_path / "enough", *files_corpus(tmp_path, n=1000))
    said = []
    prepare_corpus(enough.data, log=said.append)
    assert not [s for s in said if s.startswith("warning:")]


# A cache in a bad place: said in one line naming data.cache_dir and ABLATE_CACHE, and a complete cache
# shared read-only serves as it is.
@contextlib.contextmanager
def _read_only(folder: Path):
    """`folder` read-only for root too (a read-only bind mount over itself); skipped where mounts are not
    allowed."""
    if subprocess.run(["mount", "--bind", str(folder), str(folder)], capture_output=True).returncode:
        pytest.skip("a read-only bind mount needs root and a mount namespace that allows it")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(folder)], check=True, capture_output=True)
        yield folder
    finally:
        subprocess.run(
            ["umount", "--lazy", str(folder)], check=True
        )  # open files (mapped arrays) keep it busy


def _cache_cfg(tmp_path, monkeypatch, cache: str | None):
    from ablate.data.corpora import prepare_corpus

    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "env-cache"))
    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        over = ["scale=tiny", "recipe=tiny", "logger=none", f"results_dir={tmp_path}/results"]
        cfg = to_dataclass(compose("config", overrides=over + ([f"data.cache_dir={cache}"] if cache else [])))
    return cfg, lambda: prepare_corpus(cfg.data, log=lambda msg: None)


@pytest.mark.parametrize("where", ["ABLATE_CACHE a file", "data.cache_dir a file", "read-only, empty"])
def test_a_cache_that_cannot_be_written_is_named(tmp_path, monkeypatch, where):
    cache = tmp_path / ("env-cache" if where == "ABLATE_CACHE a file" else "cache")
    if "file" in where:
        cache.write_text("not a folder\n")
    else:
        cache.mkdir()
    _, prepare = _cache_cfg(tmp_path, monkeypatch, None if where.startswith("ABLATE") else str(cache))
    with contextlib.ExitStack() as stack:
        if "read-only" in where:
            stack.enter_context(_read_only(cache))
        with pytest.raises(DataError) as e:
            prepare()
    said = one_line(e.value)
    assert said.startswith(f"data.cache_dir={cache} (default: $ABLATE_CACHE, else ~/.cache/ablate): "), said
    assert ("Not a directory" if "file" in where else "Read-only file system") in said
    assert said.endswith("name a folder this user can write")


def test_a_complete_cache_shared_read_only_serves(tmp_path, monkeypatch):
    cfg, prepare = _cache_cfg(tmp_path, monkeypatch, str(tmp_path / "cache"))
    built = prepare().root
    with _read_only(tmp_path / "cache"):
        assert prepare().root == built
        rec = train(dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, max_steps=2)))
    assert rec["status"] == "finished"


# -- a researcher's task: its declarations and its code ------------------------------------------------

USER_TASK = ROOT / "tests" / "user_task"


def _user_task(tmp_path: Path, name: str, old: str, new: str) -> Path:
    """tests/user_task copied with its module renamed to `name` and one edit, its experiment naming it."""
    folder = tmp_path / name
    shutil.copytree(USER_TASK, folder, ignore=shutil.ignore_patterns("__pycache__"))
    source = (folder / "reverse_task.py").read_text()
    assert old in source
    (folder / "reverse_task.py").unlink()
    (folder / f"{name}.py").write_text(source.replace(old, new))
    experiment = folder / "conf" / "experiment" / "reverse.yaml"
    experiment.write_text(experiment.read_text().replace("reverse_task:", f"{name}:"))
    return folder


def _line_of(path: Path, text: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def _commands(folder: Path, tmp_path: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(folder), ABLATE_RESULTS=str(tmp_path / "r"))
    env["ABLATE_CACHE"] = str(tmp_path / "c")
    run = [
        "ablate.run",
        f"hydra.searchpath=[file://{folder}/conf]",
        "experiment=reverse",
        "logger=none",
        "trainer.threads=1",
        "trainer.progress_bar=false",
        "task_cfg.train_pairs=200",
        "train.decode_every=1",
    ]  # fmt: skip  (every dev pass decodes: the first is at step 10)
    report = ["ablate.report", "metrics", "--task", f"{folder.name}:ReverseTask", "--results", str(tmp_path),
              "--out", "-"]  # fmt: skip
    prepare = ["ablate.prepare", f"task={folder.name}:ReverseTask", "data=reverse",
               "task_cfg.train_pairs=200"]  # fmt: skip
    return {"env": env, "run": run, "report": report, "prepare": prepare}


def _said(args: list[str], env: dict) -> tuple[int, str]:
    p = subprocess.run([sys.executable, "-m", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=600)  # fmt: skip
    lines = [line for line in p.stderr.splitlines() if line.startswith("error:")]
    assert "Traceback" not in p.stderr, p.stderr[-2000:]
    return p.returncode, lines[-1] if lines else p.stderr[-2000:]


@pytest.mark.parametrize(
    "old, new, says",
    [
        (
            "higher_is_better=True",
            'higher_is_better="yes"',
            "metric 'acc': higher_is_better='yes' is not True",
        ),
        (
            "higher_is_better=True",
            'direction="up"',
            "metric 'acc': direction='up' is not 'higher' or 'lower'",
        ),
        (
            "    sentence_stats=",
            "    foo=1,\n    sentence_stats=",
            "TypeError: Metric.__init__() got an unexpected",
        ),
    ],
)
def test_a_bad_metric_declaration_is_one_line_naming_the_metric_and_its_line(tmp_path, old, new, says):
    """run, report and prepare each refuse it in one line, exit 2, with the researcher's file and line."""
    folder = _user_task(tmp_path, "bad_metric_task", old, new)
    at = f"{folder / 'bad_metric_task.py'}:{_line_of(folder / 'bad_metric_task.py', 'EXACT = Metric(')}"
    c = _commands(folder, tmp_path)
    for command in ("run", "report", "prepare"):
        status, line = _said(c[command], c["env"])
        assert status == 2 and says in line and at in line, (command, line)
    assert not list(tmp_path.rglob("record.json"))


def test_a_metric_no_scorer_reports_fails_the_run_at_the_first_dev_pass_and_resumes_after_the_fix(tmp_path):
    """The scorer gives `dev_accuracy`, the metric is `dev_acc`: the run stops at its first dev pass (step
    10) in one line naming the metric, its record `failed` with it; the fixed task resumes it from its
    step-10 checkpoint and finishes."""
    folder = _user_task(tmp_path, "wrong_key_task", 'Scored({"dev_acc"', 'Scored({"dev_accuracy"')
    c = _commands(folder, tmp_path)
    status, line = _said(c["run"], c["env"])
    says = "metric 'acc': its dev scorer reported no 'dev_acc' (its figures: dev_accuracy)"
    assert status == 2 and line.endswith(says), line
    (rec_path,) = (tmp_path / "r").rglob("record.json")
    rec = json.loads(rec_path.read_text())
    assert rec["status"] == "failed" and rec["reason"].endswith(says)
    assert (rec_path.parent / "checkpoints" / "step0000010.ckpt").is_file()
    module = folder / "wrong_key_task.py"
    module.write_text(module.read_text().replace('"dev_accuracy"', '"dev_acc"'))
    p = subprocess.run([sys.executable, "-m", *c["run"]], cwd=ROOT, env=c["env"], capture_output=True,
                       text=True, timeout=600)  # fmt: skip
    assert p.returncode == 0 and "resuming from" in p.stdout, p.stdout[-2000:]
    assert "(step 10)" in p.stdout
    rec = json.loads(rec_path.read_text())
    assert rec["status"] == "finished" and rec["steps"] == 20 and "dev_acc" in rec["metrics"]


def test_an_exception_in_the_researchers_scorer_is_one_line_with_its_type_file_and_line(tmp_path):
    folder = _user_task(
        tmp_path, "raising_task", "hits = exact(hyps, refs)\n", "hits = exact(hyps, refs) / 0 // {}\n"
    )
    c = _commands(folder, tmp_path)
    status, line = _said(c["run"], c["env"])
    at = f"{folder / 'raising_task.py'}:{_line_of(folder / 'raising_task.py', '/ 0 // {}')}"
    assert status == 2 and "its dev scorer raised TypeError: unsupported operand" in line and at in line, line
    (rec_path,) = (tmp_path / "r").rglob("record.json")
    rec = json.loads(rec_path.read_text())
    assert rec["status"] == "failed" and "TypeError" in rec["reason"] and at in rec["reason"]
