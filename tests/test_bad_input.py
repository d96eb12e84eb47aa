"""Bad input, each a case: a one-line error naming the file, line or config key, and nothing half-written."""

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
        (["model.positional=rotary"], "model.positional='rotary' is not one of sinusoidal, learned"),
        (["train.budget_minutes=30"], "train.budget_minutes=30.0 needs train.lr_schedule=cosine"),
        (["train.lr_schedule=cosine", "train.budget_minutes=0"], "train.budget_minutes=0.0 must be positive"),
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
    with pytest.raises(CheckpointError, match=r"no readable checkpoint \(last.ckpt\)"):
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
