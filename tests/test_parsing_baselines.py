"""The Table 4 baselines (branching trees, the treebank PCFG) and the bootstrap interval on F1, against
figures worked out by hand (arithmetic in comments) and against an independent path (a parse's
log-probability recomputed rule by rule from the tree)."""

from __future__ import annotations

import json
import math
from itertools import product

import pytest

from ablate.data.treebank.tree import Tree, parse_bracketed, to_string, words
from ablate.data.treebank.wsj import load_split
from ablate.tasks.parsing import score
from ablate.tasks.parsing.baselines import branching, labels_of, make_parser
from ablate.tasks.parsing.evalb import SentenceResult
from ablate.tasks.parsing.interval import f1_interval
from ablate.tasks.parsing.pcfg import Grammar, Markov, annotate, signature, tree_logprob, unannotate


def _t(text: str) -> Tree:
    return parse_bracketed(text)[0]


# Words: The0 cat1 sat2 on3 the4 mat5.  Gold: S(0,6) NP(0,2) VP(2,6) PP(3,6) NP(4,6).
CAT = _t("(S (NP (DT The) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat)))))")
# Words: He0 left1 (the final "." is deleted by EVALB).  Gold: S(0,2) NP(0,1) VP(1,2).
LEFT = _t("(S (NP (PRP He)) (VP (VBD left)) (. .))")


def _f1(gold: list[Tree], trees: list[Tree]) -> float:
    return score.score_parsed(gold, trees)["f1"]


def test_the_branching_labels_are_the_most_frequent_root_and_phrase_labels():
    labels = labels_of([CAT, LEFT])  # roots S, S; below them NP x3, VP x2, PP x1
    assert (labels.root, labels.inner) == ("S", "NP")


def test_right_branching_f1_equals_the_hand_computation():
    labels = labels_of([CAT])
    right = branching(list(_preterminals(CAT)), "right", labels)
    assert to_string(right) == "(S (DT The) (NP (NN cat) (NP (VBD sat) (NP (IN on) (NP (DT the) (NN mat))))))"
    # Test: S(0,6) NP(1,6) NP(2,6) NP(3,6) NP(4,6); matched S(0,6) and NP(4,6): P = R = 2/5, F1 40.
    assert _f1([CAT], [right]) == pytest.approx(40.0)
    # After "." is deleted: test S(0,2) NP(1,2); gold S(0,2) NP(0,1) VP(1,2): matched S only.
    # P = 1/2, R = 1/3, F1 = 2 * 1/6 / (5/6) = 40.  Both sentences: 3 matched, 7 test, 8 gold -> 6/15 = 40.
    right2 = branching(list(_preterminals(LEFT)), "right", labels)
    assert _f1([LEFT], [right2]) == pytest.approx(40.0)
    assert _f1([CAT, LEFT], [right, right2]) == pytest.approx(40.0)


def test_left_branching_f1_equals_the_hand_computation():
    left = branching(list(_preterminals(CAT)), "left", labels_of([CAT]))
    # Test: NP(0,2) NP(0,3) NP(0,4) NP(0,5) S(0,6); matched NP(0,2) and S(0,6): F1 40.
    assert to_string(left) == "(S (NP (NP (NP (NP (DT The) (NN cat)) (VBD sat)) (IN on)) (DT the)) (NN mat))"
    assert _f1([CAT], [left]) == pytest.approx(40.0)
    # "(S (NP He left) .)": after "." goes, NP(0,2) and S(0,2) - gold has S(0,2): P 1/2, R 1/3, F1 40.
    assert _f1([LEFT], [branching(list(_preterminals(LEFT)), "left", labels_of([CAT]))]) == pytest.approx(40)


def _preterminals(t: Tree):
    from ablate.data.treebank.tree import preterminals

    return preterminals(t)


def test_annotation_writes_parents_and_markovized_intermediates():
    t = _t("(S (NP (DT a) (JJ b) (JJ c) (NN d)) (VP (VBD e)))")
    assert to_string(annotate(t, Markov(2, 1))) == (
        "(ROOT (S^ROOT (NP^S (DT a) (@NP^S|DT (JJ b) (@NP^S|JJ (JJ c) (NN d)))) (VP^S (VBD e))))"
    )
    assert to_string(annotate(t, Markov(1, 2))) == (
        "(ROOT (S (NP (DT a) (@NP|DT (JJ b) (@NP|DT,JJ (JJ c) (NN d)))) (VP (VBD e))))"
    )
    assert (
        to_string(annotate(t, Markov(1, 0)))
        == "(ROOT (S (NP (DT a) (@NP| (JJ b) (@NP| (JJ c) (NN d)))) (VP (VBD e))))"
    )


TOY = [
    _t("(S (NP (DT the) (NN dog)) (VP (VBD barked)))"),
    _t("(S (NP (DT the) (NN cat)) (VP (VBD saw) (NP (DT the) (NN dog))))"),
    _t("(S (NP (NNP Kim)) (VP (VBD slept)))"),
]


def test_rule_and_word_probabilities_are_relative_frequencies():
    g = Grammar(TOY, Markov(2, 1))
    # NP^S: DT NN twice, NNP once; VP^S: VBD twice, VBD NP^VP once.
    s = g.symbols
    rules = zip(g.b_parent, g.b_left, g.b_right, g.b_logp, strict=True)
    binary = {(s[a], s[b], s[c]): math.exp(p) for a, b, c, p in rules}
    unary = {(s[a], s[b]): math.exp(p) for a, b, p in zip(g.u_parent, g.u_child, g.u_logp, strict=True)}
    assert binary[("NP^S", "DT", "NN")] == pytest.approx(2 / 3)
    assert unary[("NP^S", "NNP")] == pytest.approx(1 / 3)
    assert unary[("VP^S", "VBD")] == pytest.approx(2 / 3)
    assert binary[("VP^S", "VBD", "NP^VP")] == pytest.approx(1 / 3)
    assert binary[("S^ROOT", "NP^S", "VP^S")] == pytest.approx(1.0)
    # "dog" twice (known): P(dog | NN) = 2 of NN's 3. Words seen once are read as their signature:
    # cat, barked, saw, slept -> UNK; Kim (first, capital) -> UNK-INITC and is counted under UNK too.
    nn, vbd, nnp = g.index["NN"], g.index["VBD"], g.index["NNP"]
    assert math.exp(g.lexical("dog", False)[nn]) == pytest.approx(2 / 3)
    slept = {t: round(math.exp(p), 6) for t, p in g.lexical("slept", False).items()}
    assert slept == {nn: round(1 / 3, 6), vbd: 1.0, nnp: 1.0}  # UNK: cat | NN, 3 verbs, Kim | NNP
    assert g.lexical("Zed", True) == {nnp: 0.0}  # UNK-INITC: only Kim, an NNP, P = 1/1
    assert g.lexical("Xyzzy", False)[nnp] == 0.0  # UNK-CAPS unseen: read as UNK (NN 1, VBD 3, NNP 1)


def test_the_parse_is_the_hand_computed_best_tree():
    g = Grammar(TOY, Markov(2, 1))
    tree, logp = g.parse(["the", "dog", "slept"])
    assert to_string(tree) == "(S (NP (DT the) (NN dog)) (VP (VBD slept)))"
    # NP^S -> DT NN 2/3, VP^S -> VBD 2/3, dog | NN 2/3; every other factor 1.
    assert logp == pytest.approx(3 * math.log(2 / 3), abs=1e-5)
    assert g.parse(["dog", "the"]) is None  # no rule puts NN before DT


def test_signatures_read_shape():
    assert signature("Walking", first=True) == "UNK-INITC-ing"
    assert signature("walked", first=False) == "UNK-ed"
    assert signature("1,200-share", first=False) == "UNK-NUM-DASH"
    assert signature("IBM", first=False) == "UNK-CAPS"
    assert signature("iPod", first=False) == "UNK-MIXC"


def test_two_sentences_interval_is_the_two_sentences_f1():
    # A: 1 of 2 brackets right both ways (F1 50); B: all 3 (F1 100). Resamples AA, AB, BA, BB with
    # chances 1/4, 1/2, 1/4 give F1 50, 2*4/10 = 80, 100: the 2.5% and 97.5% points are 50 and 100, and
    # the 30% and 70% points both fall on AB's 80, whatever the seed.
    a = SentenceResult(1, 5, 0, matched=1, gold_brackets=2, test_brackets=2)
    b = SentenceResult(2, 5, 0, matched=3, gold_brackets=3, test_brackets=3)
    for seed in (0, 1, 2):
        assert f1_interval([a, b], seed=seed) == pytest.approx((50.0, 100.0))
        assert f1_interval([a, b], level=0.4, seed=seed) == pytest.approx((80.0, 80.0))
    assert f1_interval([a]) == (50.0, 50.0)


def test_a_hypothesis_file_gets_the_hand_checked_interval(tmp_path, capsys):
    """The scorer's command on a file of two linearized parses: the interval of the hand case above."""
    gold = tmp_path / "gold.mrg"
    gold.write_text(
        "(S (NP (DT a) (NN b)) (VP (VBD c) (NP (NN d))))\n(S (NP (NN x)) (VP (VBD y) (NP (NN z))))\n"
    )
    pred = tmp_path / "pred.txt"
    pred.write_text("(S (NP XX XX )NP XX (NP XX )NP )S\n(S (NP XX )NP (VP XX (NP XX )NP )VP )S\n")
    assert score.main([str(gold), str(pred)]) == 0
    m = json.loads(capsys.readouterr().out)
    # 1: gold S(0,4) NP(0,2) VP(2,4) NP(3,4); test S NP(0,2) NP(3,4): 3 matched, F1 2*3/7 = 85.71.
    # 2: all 4 brackets right: F1 100. Resamples: 11 -> 85.71, 12 -> 2*7/15 = 93.33, 22 -> 100.
    assert m["f1"] == pytest.approx(200 * 7 / 15)
    assert (m["f1_lo"], m["f1_hi"]) == pytest.approx((600 / 7, 100.0))


def test_the_sample_trees_come_back_from_every_annotation(ptb_sample_dir):
    trees = load_split(ptb_sample_dir, "train")
    for vertical, horizontal in product((1, 2), (0, 1, 2)):
        m = Markov(vertical, horizontal)
        bad = [t for t in trees if unannotate(annotate(t, m)) != t]
        assert not bad, f"{m}: {len(bad)} trees change, e.g. {to_string(bad[0])[:120]}"


def test_the_search_finds_the_best_tree_of_the_grammar(ptb_sample_dir):
    """Exact search, checked by an independent path: the returned score is the tree's own probability
    recomputed rule by rule, and no gold tree the grammar derives scores higher."""
    g = Grammar(load_split(ptb_sample_dir, "train"))
    dev = [t for t in load_split(ptb_sample_dir, "dev") if len(words(t)) <= 20][:15]
    assert len(dev) >= 10
    beaten = 0
    for gold in dev:
        tree, logp = g.parse(words(gold))
        assert words(tree) == words(gold)
        assert tree_logprob(g, tree) == pytest.approx(logp, abs=1e-3)
        gold_logp = tree_logprob(g, gold)
        assert gold_logp <= logp + 1e-3
        beaten += gold_logp < logp - 1e-3
    assert beaten  # the grammar prefers another tree for some sentence: the check can fail


@pytest.mark.slow
def test_the_pcfg_command_parses_all_of_section_23_and_table4_shows_it(ptb_sample_dir, tmp_path):
    from ablate import baseline
    from ablate.report.__main__ import main as report

    for kind in ("pcfg", "right"):
        assert baseline.main([kind, "--treebank", str(ptb_sample_dir), "--results", str(tmp_path)]) == 0
    (path,) = tmp_path.glob("pcfg/*/record.json")
    rec = json.loads(path.read_text())
    m = rec["metrics"]
    assert rec["status"] == "finished" and rec["group"] == "baseline"
    assert (m["test_n"], m["test_n_valid"], m["test_n_fallback"]) == (118, 118, 0)
    assert m["test_f1_lo"] < m["test_f1"] < m["test_f1_hi"]
    assert m["test_f1"] > 60 and m["test_f1"] > m["test_f1_flat"] + 50
    assert rec["train_time_s"] > 0 and rec["peak_rss_mib"] > 0
    out = tmp_path / "t4.md"
    assert report(["table4", "--results", str(tmp_path), "--out", str(out)]) == 0
    text = out.read_text()
    assert f"| {m['test_f1']:.2f} | [{m['test_f1_lo']:.2f}, {m['test_f1_hi']:.2f}] |" in text
    assert "baseline: right-branching trees, gold tags" in text
    assert str(ptb_sample_dir.absolute()) not in text  # the treebank by its folder's name, no machine's path
    assert f"task_cfg.treebank_dir=<...>/{ptb_sample_dir.name}" in text
    # the paired difference to the PCFG from the counts each baseline wrote beside its trees equals the one
    # read from the trees themselves, scored again against the gold trees (ablate.tasks.parsing.paired)
    from ablate.data.treebank.corpus import read_trees
    from ablate.data.treebank.wsj import load_split
    from ablate.tasks.parsing.paired import compare

    gold = load_split(ptb_sample_dir, "test")
    (pcfg_trees,) = tmp_path.glob("pcfg/*/test.trees.txt")
    (right_trees,) = tmp_path.glob("right_branching/*/test.trees.txt")
    diff, lo, hi, p = compare(gold, read_trees(pcfg_trees), read_trees(right_trees))
    row = next(line for line in text.splitlines() if "baseline: right-branching" in line)
    assert f"| {diff:+.2f} [{lo:+.2f}, {hi:+.2f}], p {p:.3f} |" in row and diff < -50


def test_a_report_names_folders_without_the_machines_paths():
    from pathlib import Path

    from ablate.tasks.parsing.table4 import _without_machine_paths

    results = Path("reports/t4/runs")
    command = f"python -m ablate.baseline pcfg --treebank /data/x/ptb --results {results.absolute()}/a b=/c/d"
    assert _without_machine_paths(command, results) == (
        "python -m ablate.baseline pcfg --treebank <...>/ptb --results reports/t4/runs/a b=<...>/d"
    )
    assert _without_machine_paths("--treebank ../ptb --results r", results) == "--treebank ../ptb --results r"


def test_make_parser_refuses_an_unknown_kind():
    with pytest.raises(ValueError, match="unknown baseline 'middle'"):
        make_parser("middle", TOY)


def test_the_committed_table4_rebuilds_from_its_records(tmp_path):
    from pathlib import Path

    from ablate.report.__main__ import main as report

    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "table4.md"
    assert (
        report(["table4", "--results", str(root / "reports/table4_ptb_sample/runs"), "--out", str(out)]) == 0
    )
    assert out.read_text() == (root / "reports/table4_ptb_sample.md").read_text()
