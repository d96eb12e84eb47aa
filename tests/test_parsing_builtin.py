"""Built-in synthetic treebank (ablate.data.treebank.builtin) and WSJ loading (ablate.data.treebank.wsj)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ablate.data.treebank.builtin import generate_trees, write_builtin_treebank
from ablate.data.treebank.linearize import delinearize, linearize, strip_tags
from ablate.data.treebank.tree import clean, preterminals, read_mrg, to_string, words
from ablate.data.treebank.wsj import (
    DEV_SECTIONS,
    TEST_SECTIONS,
    TRAIN_SECTIONS,
    load_silver,
    load_split,
    load_wsj,
    parallel_text,
)
from ablate.tasks.parsing.evalb import evalb

FIXTURES = Path(__file__).parent / "fixtures" / "ptb"
SIZES = {"n_train": 45, "n_dev": 7, "n_test": 5}


@pytest.fixture(scope="module")
def treebank(tmp_path_factory) -> Path:
    return write_builtin_treebank(tmp_path_factory.mktemp("tb") / "wsj", seed=3, **SIZES)


def _all_labels(tree) -> list[str]:
    out, stack = [], [tree]
    while stack:
        node = stack.pop()
        out.append(node.label)
        stack.extend(node.children)
    return out


def test_standard_split():
    assert TRAIN_SECTIONS[0] == "02" and TRAIN_SECTIONS[-1] == "21" and len(TRAIN_SECTIONS) == 20
    assert DEV_SECTIONS == ("22",) and TEST_SECTIONS == ("23",)


def test_layout_and_sizes(treebank):
    assert (treebank / "02" / "wsj_0200.mrg").is_file()
    assert sorted(p.name for p in treebank.iterdir() if p.is_dir()) == [f"{i:02d}" for i in range(2, 24)]
    # 45 train trees over 20 sections: 5 sections of 3 and 15 of 2.
    assert [len(load_wsj(treebank, [s])) for s in TRAIN_SECTIONS] == [3] * 5 + [2] * 15
    assert [len(load_split(treebank, s)) for s in ("train", "dev", "test")] == [45, 7, 5]
    assert len(load_wsj(treebank, [2, "3"])) == 6  # section numbers as int or str


def test_deterministic_and_idempotent(treebank, tmp_path):
    other = write_builtin_treebank(tmp_path / "again", seed=3, **SIZES)
    files = sorted(p.relative_to(treebank) for p in treebank.rglob("*.mrg"))
    assert files == sorted(p.relative_to(other) for p in other.rglob("*.mrg"))
    assert all((treebank / f).read_bytes() == (other / f).read_bytes() for f in files)
    before = {f: (treebank / f).stat().st_mtime_ns for f in files}
    assert write_builtin_treebank(treebank, seed=3, **SIZES) == treebank
    assert {f: (treebank / f).stat().st_mtime_ns for f in files} == before  # nothing rewritten
    # No temporary folder left next to it.
    assert sorted(p.name for p in treebank.parent.iterdir()) == ["wsj"]


def test_other_parameters_replace_and_foreign_folder_is_kept(tmp_path):
    path = write_builtin_treebank(tmp_path / "tb", seed=1, n_train=20, n_dev=2, n_test=2)
    first = load_split(path, "test")
    write_builtin_treebank(path, seed=2, n_train=20, n_dev=2, n_test=3)
    assert len(load_split(path, "test")) == 3 and load_split(path, "test")[:2] != first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tb"]
    foreign = tmp_path / "real_ptb"
    foreign.mkdir()
    with pytest.raises(FileExistsError, match="real_ptb"):
        write_builtin_treebank(foreign)


def test_dev_and_test_do_not_depend_on_train_size(tmp_path):
    a = write_builtin_treebank(tmp_path / "a", seed=0, n_train=20, n_dev=3, n_test=3)
    b = write_builtin_treebank(tmp_path / "b", seed=0, n_train=40, n_dev=3, n_test=3)
    assert load_split(a, "test") == load_split(b, "test")


def test_raw_trees_give_clean_real_work():
    raw = generate_trees(400, seed=0)
    labels = [label for t in raw for label in _all_labels(t)]
    raw_words = [w for t in raw for w in words(t)]
    assert any(label.endswith("-SBJ") for label in labels)
    assert any(label.startswith("WHNP-") for label in labels)
    assert any(w.startswith("*T*-") for w in raw_words) and "0" in raw_words and "*" in raw_words
    assert {"-LRB-", ",", ".", "``", "''"} <= set(raw_words)
    assert {"PRT", "ADVP", "ADJP-PRD", "SBAR", "PP-LOC"} <= set(labels)
    cleaned = [clean(t) for t in raw]
    for tree in cleaned:
        tags = [p.label for p in preterminals(tree)]
        assert "-NONE-" not in tags
        assert all("-" not in label or label in ("-LRB-", "-RRB-") for label in _all_labels(tree))


def test_files_are_real_mrg_and_pipeline_round_trips(treebank):
    raw = read_mrg(treebank / "23" / "wsj_2300.mrg")
    assert len(raw) == 5 and all(t.label == "" for t in raw)  # "( (S ...) )" wrapping
    text = (treebank / "23" / "wsj_2300.mrg").read_text()
    assert text.startswith("( (") and "\n    " in text  # pretty-printed across lines
    trees = load_wsj(treebank, TRAIN_SECTIONS)
    sources, targets = parallel_text(trees)
    rebuilt = [delinearize(t, s.split()) for s, t in zip(sources, targets, strict=True)]
    assert rebuilt == [strip_tags(t) for t in trees]
    assert evalb(trees, rebuilt).summary().fmeasure == pytest.approx(100.0)
    assert targets[0] == linearize(trees[0]) and sources[0] == " ".join(words(trees[0]))


def test_fixture_treebank_loads():
    trees = load_wsj(FIXTURES / "wsj", ["02"])
    assert len(trees) == 3 and trees[2].label == "S"
    assert to_string(load_split(FIXTURES / "wsj", "dev")[0]) == "(S (NP (PRP It)) (VP (VBD rained)) (. .))"


def test_wsj_errors_name_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="treebank folder not found: .*nowhere"):
        load_wsj(tmp_path / "nowhere", ["02"])
    with pytest.raises(FileNotFoundError, match=r"section folder not found: .*[/\\]07"):
        load_wsj(FIXTURES / "wsj", ["07"])
    (tmp_path / "tb" / "02").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match=r"no \.mrg files in WSJ section folder .*02"):
        load_wsj(tmp_path / "tb", ["02"])
    with pytest.raises(ValueError, match="unknown split"):
        load_split(FIXTURES / "wsj", "validation")


@pytest.mark.parametrize("split", ["train", "dev", "test"])
@pytest.mark.parametrize("content", ["", "\n\n", " \t\n  "])
def test_a_treebank_file_without_trees_is_refused_with_its_split_and_the_trees_read(
    treebank, tmp_path, split, content
):
    """An emptied (or cut-short) .mrg file inside any split is refused, naming the file, its section and
    split, and the trees read before it: never a split that shrinks without a word."""
    import shutil

    from ablate.data.treebank.wsj import SPLITS, section_files

    copy = tmp_path / "wsj"
    shutil.copytree(treebank, copy)
    section = SPLITS[split][-1]
    files = section_files(copy, section)
    files[-1].write_text(content)
    before = len(load_wsj(treebank, SPLITS[split][:-1])) + len([t for f in files[:-1] for t in read_mrg(f)])
    with pytest.raises(ValueError) as e:
        load_split(copy, split)
    assert str(e.value) == (
        f"{files[-1]}: no trees in this file (section {section} of the {split} split; {before:,} trees read "
        "before it): restore it or remove it from the treebank"
    )


def test_load_silver(tmp_path):
    trees = load_silver(FIXTURES / "silver.txt")
    assert [to_string(t) for t in trees] == [
        "(S (NP (PRP We)) (VP (VBD left)) (. .))",
        "(S (NP (DT The) (NN deal)) (VP (VBD closed)))",
        "(S (NP (NNS Bonds)) (VP (VBD fell) (ADVP (RB sharply))) (. .))",
    ]
    bad = tmp_path / "bad.txt"
    bad.write_text("(S (NN a))\n\n(S (NN b)\n")
    with pytest.raises(ValueError, match=r"bad\.txt:3: bracket opened here is never closed"):
        load_silver(bad)
    bad.write_text("(S (NN a)) (S (NN b))\n")
    with pytest.raises(ValueError, match=r"bad\.txt:1: expected one tree per line, found 2"):
        load_silver(bad)
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        load_silver(tmp_path / "missing.txt")
