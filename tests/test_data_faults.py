"""Faults in the data a run is given or has prepared: edited inputs, a damaged prepared folder, a BOM, a
folder where a file belongs, a vocabulary the corpus cannot support. Each is one line naming the key, file or
line, and nothing already written is lost."""

import json
import os
from pathlib import Path

import pytest
from test_bad_input import cfg_for as run_cfg
from test_run_smoke import run

from ablate.config import DataConfig, RunConfig
from ablate.data import corpora
from ablate.data.sources import DataError
from ablate.data.tokenizer import VocabError
from ablate.prepare import main as prepare_main
from ablate.records import identity
from ablate.run import register_configs  # noqa: F401 - registers the schema

ROOT = Path(__file__).resolve().parents[1]
WORDS = ["a b c", "d e f g", "h i", "j k l m n", "o p q"]


def write_corpus(d: Path, n: int = 60, test: bool = False) -> dict[str, str]:
    """Line-aligned train/dev(/test) files; their data.* keys."""
    d.mkdir(parents=True, exist_ok=True)
    keys = {}
    for split, m in (("train", n), ("dev", 5)) + ((("test", 5),) if test else ()):
        (d / f"{split}.en").write_text("".join(f"{WORDS[i % 5]} {i}\n" for i in range(m)), encoding="utf-8")
        (d / f"{split}.de").write_text(
            "".join(f"{WORDS[(i + 1) % 5]} {i}\n" for i in range(m)), encoding="utf-8"
        )
        keys[f"{split}_src"], keys[f"{split}_tgt"] = str(d / f"{split}.en"), str(d / f"{split}.de")
    return keys


def data_cfg(tmp_path: Path, **kw) -> DataConfig:
    kw.setdefault("name", "files")
    kw.setdefault("vocab_size", 40)
    return DataConfig(cache_dir=str(tmp_path / "cache"), **kw)


def files_overrides(keys: dict[str, str]) -> list[str]:
    return ["data=files", "data.vocab_size=40"] + [f"data.{k}={v}" for k, v in keys.items()]


def one_line(e: BaseException) -> str:
    msg = str(e)
    assert "\n" not in msg.strip() and "src/" not in msg and "Traceback" not in msg, msg
    return msg


def edit_in_place(path: Path) -> None:
    """Another line 3, same size and a later mtime (what an editor leaves)."""
    text = Path(path).read_text(encoding="utf-8").splitlines(keepends=True)
    text[2] = ("z" if text[2][0] != "z" else "y") + text[2][1:]
    st = os.stat(path)
    Path(path).write_text("".join(text), encoding="utf-8")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


# ----------------------------------------------------------------------------------------------------------
# 1. Inputs edited after a run: a new prepared corpus and a new run identity


def test_an_edited_training_file_gives_a_new_corpus_key_and_a_new_run_id(tmp_path):
    keys = write_corpus(tmp_path / "in")
    cfg = run_cfg(tmp_path, *files_overrides(keys))
    key, rid = corpora.corpus_cache_key(cfg), identity.run_id(cfg)
    edit_in_place(Path(keys["train_src"]))
    assert corpora.corpus_cache_key(cfg) != key
    assert identity.run_id(cfg) != rid
    assert "data.fingerprint" in identity.identity_dict(cfg)


def test_touch_alone_keeps_the_corpus_key_and_the_run_id(tmp_path):
    keys = write_corpus(tmp_path / "in")
    cfg = run_cfg(tmp_path, *files_overrides(keys))
    key, rid = corpora.corpus_cache_key(cfg), identity.run_id(cfg)
    st = os.stat(keys["dev_tgt"])
    os.utime(keys["dev_tgt"], ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    assert corpora.corpus_cache_key(cfg) == key
    assert identity.run_id(cfg) == rid


def test_content_is_hashed_again_only_when_size_or_mtime_changed(tmp_path, monkeypatch):
    from ablate.data import fingerprint

    path = tmp_path / "a.en"
    path.write_text("one\ntwo\n")
    calls = []
    real = fingerprint.sha256_file
    monkeypatch.setattr(fingerprint, "sha256_file", lambda p: calls.append(p) or real(p))
    cache = str(tmp_path / "cache")
    first = fingerprint.file_fingerprint(path, cache)
    fingerprint.forget()  # a new process: only the cache file beside the corpora remains
    assert fingerprint.file_fingerprint(path, cache) == first and len(calls) == 1
    stored = list((tmp_path / "cache" / "fingerprints").glob("*.json"))
    assert len(stored) == 1 and set(json.loads(stored[0].read_text())) >= {"size", "mtime_ns", "sha256"}
    os.utime(path, ns=(0, 10**18))  # touch: hashed again, same fingerprint
    assert fingerprint.file_fingerprint(path, cache) == first and len(calls) == 2
    path.write_text("one\nTWO\n")
    assert fingerprint.file_fingerprint(path, cache) != first and len(calls) == 3


def test_an_edited_treebank_file_gives_a_new_corpus_key_and_run_id(tmp_path):
    tb = tmp_path / "wsj"
    for section in [f"{i:02d}" for i in range(2, 24)]:
        (tb / section).mkdir(parents=True)
        (tb / section / f"wsj_{section}00.mrg").write_text("( (S (NP (DT The) (NN cat)) (VP (VBD sat))) )\n")
    cfg = run_cfg(tmp_path, "data=wsj", "task=parsing", f"task_cfg.treebank_dir={tb}")
    key, rid = corpora.corpus_cache_key(cfg), identity.run_id(cfg)
    edit = tb / "05" / "wsj_0500.mrg"
    edit.write_text(edit.read_text().replace("cat", "dog"))
    assert corpora.corpus_cache_key(cfg) != key
    assert identity.run_id(cfg) != rid
    (tb / "07" / "wsj_0701.mrg").write_text("( (S (NP (PRP It)) (VP (VBZ is))) )\n")  # a file added
    assert identity.run_id(cfg) not in (rid,)


def test_the_same_files_in_another_folder_are_the_same_run(tmp_path):
    # data named by content: a checkout's committed runs are found finished wherever the data sits
    import shutil

    keys = write_corpus(tmp_path / "in")
    rid = identity.run_id(run_cfg(tmp_path, *files_overrides(keys)))
    shutil.copytree(tmp_path / "in", tmp_path / "elsewhere")
    moved = {k: v.replace(str(tmp_path / "in"), str(tmp_path / "elsewhere")) for k, v in keys.items()}
    assert moved != keys
    assert identity.run_id(run_cfg(tmp_path, *files_overrides(moved))) == rid
    edit_in_place(Path(moved["dev_tgt"]))  # and content still names it
    assert identity.run_id(run_cfg(tmp_path, *files_overrides(moved))) != rid


# The ids these configurations had before data.fingerprint and before the optim and schedule groups (computed
# by that code): the built-in corpus's committed runs are found finished under the layout of today.
OLD_IDS = {None: "base-44136fa355b3-s1", "builtin": "base-278a2871c71a-s1", "tiny": "base-278a2871c71a-s1"}


@pytest.mark.parametrize(
    "name, overrides",
    [(None, None), ("builtin", ["data=builtin"]), ("tiny", ["scale=tiny", "recipe=tiny", "data=builtin"])],
)
def test_the_builtin_corpus_keeps_its_run_ids(tmp_path, name, overrides):
    cfg = RunConfig() if overrides is None else run_cfg(tmp_path, *overrides)
    assert identity.run_id(cfg) == OLD_IDS[name]
    assert "data.fingerprint" not in identity.identity_dict(cfg)


def test_a_run_on_an_edited_file_is_run_again_not_skipped(tmp_path, capsys):
    from ablate.jobs.train import train

    keys = write_corpus(tmp_path / "in")
    overrides = [*files_overrides(keys), "train.max_steps=2", "trainer.threads=1", "decode.dev_limit=2"]
    first = train(run_cfg(tmp_path, *overrides))
    first_dir = identity.run_dir(run_cfg(tmp_path, *overrides))
    assert first["status"] == "finished"
    edit_in_place(Path(keys["train_tgt"]))
    capsys.readouterr()
    second = train(run_cfg(tmp_path, *overrides))
    assert "already finished" not in capsys.readouterr().out
    assert second["status"] == "finished" and second["run_id"] != first["run_id"]
    assert len(list((tmp_path / "cache" / "data").glob("*/meta.json"))) == 2  # the old corpus is kept
    assert json.loads((first_dir / "record.json").read_text())["status"] == "finished"  # the first is kept


# ----------------------------------------------------------------------------------------------------------
# 2. A prepared folder with a file gone is rebuilt, saying which


@pytest.mark.parametrize("gone", ["spm.model", "train.npz", "test.npz", "dev.tgt.txt"])
def test_a_prepared_folder_missing_a_file_is_rebuilt_saying_which(tmp_path, gone):
    cfg = data_cfg(tmp_path, **write_corpus(tmp_path / "in", test=True))
    out = corpora.prepare_corpus(cfg, lambda m: None).root
    (out / gone).unlink()
    log = []
    assert corpora.prepare_corpus(cfg, log.append).root == out
    assert [m for m in log if gone in m] == [f"{out}: {gone} is missing; preparing it again"]
    assert corpora.is_prepared(out) and (out / gone).is_file()


def test_a_truncated_prepared_file_is_rebuilt(tmp_path):
    cfg = data_cfg(tmp_path, **write_corpus(tmp_path / "in"))
    out = corpora.prepare_corpus(cfg, lambda m: None).root
    data = (out / "train.npz").read_bytes()
    (out / "train.npz").write_bytes(data[: len(data) // 2])
    log = []
    corpora.prepare_corpus(cfg, log.append)
    assert any("train.npz" in m and "preparing it again" in m for m in log)
    assert (out / "train.npz").read_bytes() == data


def test_an_incomplete_prepared_folder_given_as_data_root_is_one_line(tmp_path):
    cfg = data_cfg(tmp_path, **write_corpus(tmp_path / "in"))
    out = corpora.prepare_corpus(cfg, lambda m: None).root
    (out / "spm.model").unlink()
    with pytest.raises(DataError, match=r"spm\.model is missing .*data\.root") as e:
        corpora.prepare_corpus(data_cfg(tmp_path, name="multi30k", root=str(out)), lambda m: None)
    one_line(e.value)
    assert (out / "meta.json").is_file()  # a folder the user named is not rebuilt or removed


# ----------------------------------------------------------------------------------------------------------
# 3. A UTF-8 byte-order mark is not part of the text


def test_a_bom_is_not_kept_in_references_or_sources(tmp_path):
    keys = write_corpus(tmp_path / "in")
    for k in ("dev_src", "dev_tgt", "train_src"):
        p = Path(keys[k])
        p.write_bytes(b"\xef\xbb\xbf" + p.read_bytes())
    cfg = data_cfg(tmp_path, **keys)
    out = corpora.prepare_corpus(cfg, lambda m: None).root
    for name in ("dev.tgt.txt", "dev.src.txt", "train.src.txt"):
        assert "\ufeff" not in (out / name).read_text(encoding="utf-8"), name
    assert corpora.load_corpus(cfg).splits["dev"].tgt[0] == "d e f g 0"
    from ablate.data.sources import read_lines

    assert read_lines(keys["dev_tgt"])[0] == "d e f g 0"


# ----------------------------------------------------------------------------------------------------------
# 4. A folder where a file belongs


def test_a_folder_given_as_a_data_file_is_one_line(tmp_path):
    from ablate.jobs.train import train

    keys = write_corpus(tmp_path / "in")
    keys["dev_src"] = str(tmp_path / "in")
    with pytest.raises(DataError, match=rf"^{tmp_path / 'in'}: no such file \(a folder\)$") as e:
        train(run_cfg(tmp_path, *files_overrides(keys)))
    one_line(e.value)
    assert not list((tmp_path / "cache").rglob("meta.json"))
    assert not (tmp_path / "results").exists() or not list((tmp_path / "results").rglob("record.json"))


def test_the_command_line_says_a_folder_is_not_a_file_and_exits_2(tmp_path):
    keys = write_corpus(tmp_path / "in")
    keys["dev_tgt"] = str(tmp_path)
    p = run(tmp_path, *files_overrides(keys))
    assert p.returncode == 2, p.stderr
    err = [line for line in p.stderr.splitlines() if line.strip()]
    assert err == [f"error: {tmp_path}: no such file (a folder)"]


# ----------------------------------------------------------------------------------------------------------
# 5. A vocabulary the corpus cannot support


def test_a_vocabulary_too_small_names_the_key_and_the_minimum(tmp_path):
    cfg = data_cfg(tmp_path, vocab_size=10, **write_corpus(tmp_path / "in"))
    too_small = r"^data\.vocab_size=10 is too small for this corpus: .*at least (\d+)"
    with pytest.raises(VocabError, match=too_small) as e:
        corpora.prepare_corpus(cfg, lambda m: None)
    one_line(e.value)
    need = int(str(e.value).split("at least ")[1].split()[0].rstrip(",;:)"))
    out = corpora.prepare_corpus(data_cfg(tmp_path, vocab_size=need, **write_corpus(tmp_path / "in")), print)
    assert corpora.is_prepared(out.root)  # the minimum it names is enough


def test_a_training_corpus_of_one_pair_is_one_line_naming_the_file(tmp_path):
    keys = write_corpus(tmp_path / "in")
    Path(keys["train_src"]).write_text("hello world\n")
    Path(keys["train_tgt"]).write_text("hallo welt\n")
    cfg = data_cfg(tmp_path, vocab_size=8000, **keys)
    with pytest.raises(VocabError, match=r"data\.vocab_size=8000 .*train\.en.*1 pair") as e:
        corpora.prepare_corpus(cfg, lambda m: None)
    one_line(e.value)
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.name in ("meta.json", "spm.model")]


# ----------------------------------------------------------------------------------------------------------
# 6. python -m ablate.prepare: the same builder, the same messages


@pytest.mark.parametrize(
    ("change", "expect"),
    [
        (lambda d, k: k.update(dev_src=str(d)), "error: {d}: no such file (a folder)"),
        (lambda d, k: k.update(vocab_size="10"), "error: data.vocab_size=10 is too small for this corpus"),
    ],
)
def test_prepare_command_line_one_line_exit_2(tmp_path, capsys, change, expect):
    d = tmp_path / "in"
    keys = write_corpus(d)
    keys["vocab_size"] = "40"
    change(d, keys)
    args = ["data=files", f"data.cache_dir={tmp_path / 'cache'}"] + [f"data.{k}={v}" for k, v in keys.items()]
    assert prepare_main(args) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith(expect.format(d=d)), err


def test_prepare_command_line_rebuilds_a_damaged_folder(tmp_path, capsys):
    keys = write_corpus(tmp_path / "in")
    args = ["data=files", "data.vocab_size=40", f"data.cache_dir={tmp_path / 'cache'}"]
    args += [f"data.{k}={v}" for k, v in keys.items()]
    assert prepare_main(args) == 0
    out = Path(capsys.readouterr().out.strip().splitlines()[-1])
    (out / "spm.model").unlink()
    assert prepare_main(args) == 0
    printed = capsys.readouterr().out
    assert f"{out}: spm.model is missing; preparing it again" in printed
    assert corpora.is_prepared(out)
