"""The parsing task (ablate.data.treebank.corpus): treebank -> parallel text + gold trees, and the dev F1."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest

from ablate.config import ConfigError, DataConfig, RunConfig
from ablate.data.treebank.corpus import (
    ParsingCorpus,
    constituents,
    gold_path,
    gold_trees,
    load_trees,
    parsing_corpus,
    read_trees,
    treebank_root,
    write_trees,
)
from ablate.data.treebank.linearize import delinearize, linearize
from ablate.data.treebank.tree import clean, parse_bracketed, read_mrg, to_string, words
from ablate.data.treebank.wsj import TRAIN_SECTIONS
from ablate.tasks.parsing import ParsingConfig
from ablate.tasks.parsing.score import parsing_metrics

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "ptb"


@pytest.fixture
def treebank(tmp_path) -> Path:
    """The fixture WSJ (sections 02, 22, 23) completed to 02-23: 03-21 hold a copy of 02's first file."""
    root = tmp_path / "wsj"
    shutil.copytree(FIXTURES / "wsj", root)
    first = sorted((root / "02").glob("*.mrg"))[0]
    for sec in TRAIN_SECTIONS[1:]:
        (root / sec).mkdir()
        shutil.copy(first, root / sec / f"wsj_{sec}00.mrg")
    return root


def _cfg(tmp_path: Path, **kw) -> RunConfig:
    """A parsing run's config: the parsing task's own keys (ParsingConfig) in task_cfg, the rest in data."""
    kw.setdefault("tgt_lang", "tree")
    own = {k: kw.pop(k) for k in [f.name for f in fields(ParsingConfig)] if k in kw}
    data = DataConfig(name=kw.pop("name", "wsj"), cache_dir=str(tmp_path / "cache"), **kw)
    return RunConfig(data=data, task="parsing", task_cfg=ParsingConfig(**own))


def _fixture_trees(section: str) -> list:
    return [clean(t) for p in sorted((FIXTURES / "wsj" / section).glob("*.mrg")) for t in read_mrg(p)]


def test_corpus_from_treebank(tmp_path, treebank):
    corpus = parsing_corpus(_cfg(tmp_path, treebank_dir=str(treebank)))
    assert isinstance(corpus, ParsingCorpus) and set(corpus.splits) == {"train", "dev", "test"}
    dev_gold = _fixture_trees("22")
    dev = corpus.splits["dev"]
    assert dev.src == [" ".join(words(t)) for t in dev_gold]
    assert dev.tgt == [linearize(t) for t in dev_gold]
    assert corpus.gold["dev"] == dev_gold and corpus.gold["test"] == _fixture_trees("23")
    # train: 02 (all files) + one file of 02 in each of 03-21
    first = sorted((FIXTURES / "wsj" / "02").glob("*.mrg"))[0]
    n_first = len(read_mrg(first))
    assert len(corpus.splits["train"]) == len(_fixture_trees("02")) + 19 * n_first
    for s, t in zip(corpus.splits["train"].src, corpus.splits["train"].tgt):
        assert t.split().count("XX") == len(s.split())
    # the key is the trees' content: same trees -> same key; one tree changed -> another key
    assert parsing_corpus(_cfg(tmp_path, treebank_dir=str(treebank))).key == corpus.key
    f = treebank / "22" / "wsj_2200.mrg"
    f.write_text(f.read_text().replace("rained", "poured"))
    assert parsing_corpus(_cfg(tmp_path, treebank_dir=str(treebank))).key != corpus.key


def test_silver_trees_only_in_the_semi_supervised_setting(tmp_path, treebank):
    silver = str(FIXTURES / "silver.txt")
    base = parsing_corpus(_cfg(tmp_path, treebank_dir=str(treebank)))
    semi = parsing_corpus(_cfg(tmp_path, name="wsj_semi", treebank_dir=str(treebank), silver_trees=silver))
    n_silver = sum(1 for ln in Path(silver).read_text().splitlines() if ln.strip())
    assert len(semi.splits["train"]) == len(base.splits["train"]) + n_silver
    assert semi.splits["dev"].src == base.splits["dev"].src and semi.key != base.key
    with pytest.raises(ConfigError, match="wsj_semi"):
        load_trees(_cfg(tmp_path, treebank_dir=str(treebank), silver_trees=silver))
    with pytest.raises(ConfigError, match="silver_trees"):
        load_trees(_cfg(tmp_path, name="wsj_semi", treebank_dir=str(treebank)))


def test_constituents_are_the_spans_of_two_words_or_more_in_preorder():
    (t,) = parse_bracketed(
        "(S (NP (DT The) (NN dog)) (VP (VBD saw) (NP (DT a) (JJ big) (NN cat)) (PP (IN on) (NP (PRP it))))"
        " (. .))"
    )
    assert [to_string(c) for c in constituents([t, t])] == 2 * [
        "(NP (DT The) (NN dog))",
        "(VP (VBD saw) (NP (DT a) (JJ big) (NN cat)) (PP (IN on) (NP (PRP it))))",
        "(NP (DT a) (JJ big) (NN cat))",
        "(PP (IN on) (NP (PRP it)))",
    ]  # not the whole tree, not (NP it): one word is a tag's guess, not a bracket to place


def test_constituent_pairs_add_training_pairs_only(tmp_path, treebank):
    base = parsing_corpus(_cfg(tmp_path, treebank_dir=str(treebank)))
    more = parsing_corpus(_cfg(tmp_path, treebank_dir=str(treebank), constituent_pairs=True))
    train = load_trees(_cfg(tmp_path, treebank_dir=str(treebank)))["train"]
    n = len(base.splits["train"])
    assert more.splits["train"].src[:n] == base.splits["train"].src and more.key != base.key
    extra = list(zip(more.splits["train"].src[n:], more.splits["train"].tgt[n:]))
    assert len(extra) == len(constituents(train)) > n
    assert all(t.split().count("XX") == len(s.split()) >= 2 for s, t in extra)
    for split in ("dev", "test"):
        assert more.splits[split].src == base.splits[split].src and more.gold[split] == base.gold[split]


def test_missing_treebank_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="task_cfg.treebank_dir"):
        parsing_corpus(_cfg(tmp_path))
    with pytest.raises(ConfigError, match="no such folder"):
        parsing_corpus(_cfg(tmp_path, treebank_dir=str(tmp_path / "nope")))
    # the fixture alone lacks sections 03-21: the missing folder is named
    with pytest.raises(FileNotFoundError, match="03"):
        parsing_corpus(_cfg(tmp_path, treebank_dir=str(FIXTURES / "wsj")))


def test_builtin_treebank_is_written_into_the_cache(tmp_path):
    cfg = _cfg(tmp_path, treebank_builtin=True, builtin_train=40, builtin_dev=6, builtin_test=5)
    corpus = parsing_corpus(cfg)
    root = treebank_root(cfg)
    assert root.parent == tmp_path / "cache" / "treebanks" and (root / "22").is_dir()
    assert [len(corpus.splits[s]) for s in ("train", "dev", "test")] == [40, 6, 5]
    assert parsing_corpus(cfg).key == corpus.key  # deterministic, and the folder is reused
    other = parsing_corpus(
        _cfg(tmp_path, treebank_builtin=True, builtin_train=40, builtin_dev=6, builtin_test=5, builtin_seed=7)
    )
    assert other.key != corpus.key


def test_gold_trees_round_trip_and_fallback(tmp_path, treebank):
    cfg = _cfg(tmp_path, treebank_dir=str(treebank))
    corpus = parsing_corpus(cfg)
    folder = tmp_path / "prepared"
    folder.mkdir()
    corpus.write_extras(folder)
    assert gold_path(folder, "dev").is_file() and gold_path(folder, "test").is_file()
    assert gold_trees(folder, "dev") == corpus.gold["dev"]
    assert gold_trees(folder, "test") == corpus.gold["test"]
    # a folder prepared without the gold files: the treebank is read again
    assert gold_trees(tmp_path, "dev", cfg) == corpus.gold["dev"]
    with pytest.raises(FileNotFoundError):
        gold_trees(tmp_path, "dev")
    write_trees(tmp_path / "x.mrg", corpus.gold["dev"])
    assert read_trees(tmp_path / "x.mrg") == corpus.gold["dev"]


def test_parsing_metrics(tmp_path, treebank):
    corpus = parsing_corpus(_cfg(tmp_path, treebank_dir=str(treebank)))
    dev, gold = corpus.splits["test"], corpus.gold["test"]  # 2 sentences
    perfect = parsing_metrics(dev.src, dev.tgt, gold)
    assert perfect["f1"] == pytest.approx(100.0) and perfect["n_repaired"] == 0
    for key in ("f1", "f1_le40", "precision", "recall", "n_repaired"):
        assert key in perfect
    json.dumps(perfect)  # goes into the record as it is
    # garbage outputs are repaired into trees over the source words and still scored
    bad = parsing_metrics(dev.src, ["(NP XX" for _ in dev.tgt], gold)
    assert 0.0 <= bad["f1"] < 100.0 and bad["n_repaired"] == len(dev) and bad["n_error"] == 0
    # decode.dev_limit: only the first hypotheses are scored
    one = parsing_metrics(dev.src, dev.tgt[:1], gold)
    assert one["n"] == 1 and one["f1"] == pytest.approx(100.0)
    assert delinearize(dev.tgt[0], dev.src[0].split()) is not None
    with pytest.raises(ValueError):
        parsing_metrics(dev.src[:1], dev.tgt, gold)  # fewer sources than hypotheses


def test_experiment_configs():
    def job(*overrides):
        p = subprocess.run(
            [sys.executable, "-m", "ablate.run", "--cfg", "job", *overrides],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert p.returncode == 0, p.stderr[-2000:]
        return p.stdout

    paper = job("experiment=wsj_parsing", "task_cfg.treebank_dir=/ptb/wsj")
    for line in (
        "n_layers: 4",
        "d_model: 1024",
        "d_ff: 2048",
        "d_k: 128",
        "beam: 21",
        "alpha: 0.3",
        "max_len_b: 300",
        "vocab_size: 16000",
        "name: paper",
        "task: parsing",
        "name: wsj",
        "treebank_dir: /ptb/wsj",
    ):
        assert line in paper, line
    builtin = job("experiment=wsj_parsing_builtin")
    for line in ("name: cpu_parsing", "treebank_builtin: true", "beam: 4", "d_model: 1024"):
        assert line in builtin, line
    assert "name: tiny" in job("experiment=wsj_parsing_builtin", "scale=tiny", "recipe=tiny")
    cpu = job("experiment=wsj_parsing_cpu", "task_cfg.treebank_dir=/ptb/sample")
    for line in ("tgt_lang: tree_words", "constituent_pairs: true", "vocab_size: 4000", "max_steps: 30000",
                 "_target_: ablate.nn.optim.Cosine", "budget_minutes: 55", "well_formed: true",
                 "beam: 21"):  # fmt: skip
        assert line in cpu, line
    assert "constituent_pairs: false" in paper  # the paper's setting: whole trees only
    assert "well_formed: false" in paper  # the paper's: a free search, its malformed outputs repaired


@pytest.mark.slow
def test_builtin_parsing_experiment_end_to_end(tmp_path):
    env = dict(os.environ, WANDB_MODE="offline", PYTHONUNBUFFERED="1")
    cmd = [
        sys.executable,
        "-m",
        "ablate.run",
        "experiment=wsj_parsing_builtin",
        "scale=tiny",
        "recipe=tiny",
        "logger=none",
        f"results_dir={tmp_path}/results",
        f"data.cache_dir={tmp_path}/cache",
        "trainer.threads=1",
    ]
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    records = list((tmp_path / "results").rglob("record.json"))
    assert len(records) == 1
    rec = json.loads(records[0].read_text())
    assert rec["status"] == "finished" and rec["task"] == "parsing" and rec["row"] == "parsing"
    m = rec["metrics"]
    assert 0.0 <= m["f1"] <= 100.0 and 0.0 <= m["f1_le40"] <= 100.0
    for key in ("precision", "recall", "n_repaired", "dev_ppl"):
        assert key in m
    assert m["n"] == rec["data"]["splits"]["dev"]["pairs"]
    cfg = rec["config"]
    assert cfg["decode"]["beam"] == 4 and cfg["decode"]["alpha"] == 0.3 and cfg["decode"]["max_len_b"] == 300
    assert cfg["base"]["n_layers"] == 4 and cfg["base"]["d_model"] == 1024
    assert "dev F1" in p.stdout
    prepared = list((tmp_path / "cache" / "data").glob("*/dev.gold.mrg"))
    assert len(prepared) == 1
    # Table 4 reports section 23: evaluate decodes the test split, scores it with EVALB's rules and writes
    # the hypotheses as trees; re-reading those trees and scoring them again gives the recorded F1
    run = records[0].parent
    evaluate = [sys.executable, "-m", "ablate.evaluate", str(run), "--split", "test"]
    q = subprocess.run(evaluate, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert q.returncode == 0, q.stderr[-3000:]
    from ablate.records import evaluations

    (ev,) = evaluations.read(run, rec["run_id"])  # evaluate's figures, a fact beside the record
    m = ev.metrics
    assert "test_f1" not in json.loads(records[0].read_text())["metrics"]
    assert 0.0 <= m["test_f1"] <= 100.0 and m["test_n"] == rec["data"]["splits"]["test"]["pairs"]
    assert m["test_n_over_200_brackets"] == 0 and "test_n_error" in m
    from ablate.data.treebank.corpus import gold_trees, read_trees
    from ablate.tasks.parsing.evalb import evalb

    gold = gold_trees(prepared[0].parent, "test")
    assert ev.files["test_trees"].startswith("evaluations/")  # the evaluation's own file, not the run's
    again = evalb(gold, read_trees(run / ev.files["test_trees"])).summary().fmeasure
    assert again == pytest.approx(m["test_f1"], abs=1e-9)


def test_the_run_summary_puts_the_repaired_outputs_and_the_flat_tree_floor_beside_f1():
    from ablate.tasks.parsing import ParsingTask

    m = {"f1": 12.95, "f1_le40": 13.11, "n_repaired": 123, "n": 127, "f1_flat": 9.9507}
    assert ParsingTask().summary(m)[0] == (
        "dev F1     12.95  (EVALB, COLLINS.prm; <= 40 words: 13.11; 123/127 outputs repaired; "
        "one flat tree a sentence: 9.95)"
    )
