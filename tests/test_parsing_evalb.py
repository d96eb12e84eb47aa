"""EVALB / COLLINS.prm scoring, against figures worked out by hand (arithmetic in comments).

Spans below are (start, end) over the words left after EVALB deletes punctuation, end exclusive.
"""

from __future__ import annotations

import pytest

from ablate.data.treebank.linearize import linearize
from ablate.data.treebank.tree import Tree, parse_bracketed, words
from ablate.tasks.parsing.evalb import ERROR, OK, SKIP, evalb
from ablate.tasks.parsing.score import score_predictions


def _t(text: str) -> Tree:
    return parse_bracketed(text)[0]


# Wrong PP attachment.  Words: I0 saw1 the2 man3 with4 a5 telescope6 (the final "." is deleted).
# Gold: S(0,7) NP(0,1) VP(1,7) NP(2,7) NP(2,4) PP(4,7) NP(5,7)  -> 7 brackets
# Test: S(0,7) NP(0,1) VP(1,7)         NP(2,4) PP(4,7) NP(5,7)  -> 6 brackets, all in gold
ATTACH_GOLD = _t(
    "(S (NP (PRP I)) (VP (VBD saw) (NP (NP (DT the) (NN man)) (PP (IN with) (NP (DT a) (NN telescope)))))"
    " (. .))"
)
ATTACH_TEST = _t(
    "(S (NP (PRP I)) (VP (VBD saw) (NP (DT the) (NN man)) (PP (IN with) (NP (DT a) (NN telescope)))) (. .))"
)

# Crossing.  Words a0 b1 c2 d3.  Gold: S(0,4) X(0,2) Y(2,4).  Test: S(0,4) W(0,1) Z(1,3).
# Z(1,3) crosses X (0<1<2<3) and Y (1<2<3<4) but counts once; W(0,1) lies inside X.
# Matched: S only -> 1/3 recall, 1/3 precision, crossing 1.
CROSS_GOLD = _t("(S (X (DT a) (NN b)) (Y (VBD c) (NN d)))")
CROSS_TEST = _t("(S (W (DT a)) (Z (NN b) (VBD c)) (NN d))")

# ADVP ~ PRT.  Words He0 gave1 up2.  Brackets S(0,3) NP(0,1) VP(1,3) PRT/ADVP(2,3): 4/4 matched.
# Tags: PRP=PRP, VBD=VBD, RP!=RB -> 2 of 3 correct.
PRT_GOLD = _t("(S (NP (PRP He)) (VP (VBD gave) (PRT (RP up))))")
PRT_TEST = _t("(S (NP (PRP He)) (VP (VBD gave) (ADVP (RB up))))")


def test_wrong_attachment():
    [s] = evalb([ATTACH_GOLD], [ATTACH_TEST]).sentences
    assert (s.status, s.matched, s.gold_brackets, s.test_brackets, s.crossing) == (OK, 6, 7, 6, 0)
    assert (s.length, s.words, s.correct_tags) == (8, 7, 7)  # length counts ".", words do not
    summary = evalb([ATTACH_GOLD], [ATTACH_TEST]).summary()
    assert summary.recall == pytest.approx(100 * 6 / 7)  # 85.714
    assert summary.precision == pytest.approx(100.0)
    assert summary.fmeasure == pytest.approx(100 * 2 * 6 / (7 + 6))  # F = 2M/(G+T) = 92.308
    assert summary.complete_match == 0.0


def test_crossing_counts_test_brackets_once():
    [s] = evalb([CROSS_GOLD], [CROSS_TEST]).sentences
    assert (s.matched, s.gold_brackets, s.test_brackets, s.crossing) == (1, 3, 3, 1)


def test_advp_prt_equivalence_and_tagging():
    [s] = evalb([PRT_GOLD], [PRT_TEST]).sentences
    assert (s.matched, s.gold_brackets, s.test_brackets, s.correct_tags, s.words) == (4, 4, 4, 2, 3)
    # Without the equivalence (ADJP instead of ADVP): 3 of 4 match.
    [s] = evalb([PRT_GOLD], [_t("(S (NP (PRP He)) (VP (VBD gave) (ADJP (RB up))))")]).sentences
    assert s.matched == 3


def test_punctuation_is_deleted_before_spans_are_computed():
    # Words Smith , the chief , resigned .  -> kept: Smith0 the1 chief2 resigned3; length 7.
    # Gold: S(0,4) NP(0,3) NP(0,1) NP(1,3) VP(3,4) = 5 brackets.
    gold = _t("(S (NP (NP (NNP Smith)) (, ,) (NP (DT the) (NN chief)) (, ,)) (VP (VBD resigned)) (. .))")
    # The test puts the second comma outside the subject NP and adds a bracket over "." only:
    # with the punctuation deleted the spans are the same 5 (the FRAG spans no word: dropped).
    # Without deletion its NP would be (0,4) against gold (0,5): not a match.
    test = _t(
        "(S (NP (NP (NNP Smith)) (, ,) (NP (DT the) (NN chief))) (, ,) (VP (VBD resigned)) (FRAG (. .)))"
    )
    [s] = evalb([gold], [test]).sentences
    assert (s.length, s.words, s.matched, s.gold_brackets, s.test_brackets) == (7, 4, 5, 5, 5)
    assert evalb([gold], [test]).summary().complete_match == 100.0


def test_xx_tagged_output_uses_gold_tags_for_deletion():
    gold = _t("(S (NP (NP (NNP Smith)) (, ,) (NP (DT the) (NN chief)) (, ,)) (VP (VBD resigned)) (. .))")
    test = _t("(S (NP (NP (XX Smith)) (XX ,) (NP (XX the) (XX chief))) (XX ,) (VP (XX resigned)) (XX .))")
    # Gold tags copied onto the test tree: same 5 brackets as above, all matched.
    [s] = evalb([gold], [test]).sentences
    assert (s.status, s.matched, s.gold_brackets, s.test_brackets) == (OK, 5, 5, 5)
    assert s.correct_tags is None and evalb([gold], [test]).summary().tagging_accuracy is None
    # Literal EVALB keeps XX-tagged punctuation: 7 test words against 4 gold words.
    [s] = evalb([gold], [test], test_tags="own").sentences
    assert (s.status, s.message) == (ERROR, "Length unmatch (4|7)")


def test_duplicate_unary_brackets_are_a_multiset():
    # Gold S(0,3) NP(0,2) NP(0,2) VP(2,3) = 4; test S(0,3) NP(0,2) VP(2,3) = 3; NP matched once.
    gold = _t("(S (NP (NP (DT the) (NN cat))) (VP (VBD slept)))")
    test = _t("(S (NP (DT the) (NN cat)) (VP (VBD slept)))")
    [s] = evalb([gold], [test]).sentences
    assert (s.matched, s.gold_brackets, s.test_brackets) == (3, 4, 3)  # recall 75, precision 100
    [s] = evalb([test], [gold]).sentences
    assert (s.matched, s.gold_brackets, s.test_brackets) == (3, 3, 4)  # recall 100, precision 75
    [s] = evalb([gold], [gold]).sentences
    assert (s.matched, s.gold_brackets, s.test_brackets) == (4, 4, 4)


def test_top_deleted_function_tags_cut_and_traces_ignored():
    # Raw gold: TOP is deleted, NP-SBJ-1 is cut to NP, the trace and its NP span no word.
    gold = _t("(TOP (S (NP-SBJ-1 (PRP It)) (VP (VBD was) (VP (VBN sold) (NP (-NONE- *-1))))))")
    test = _t("(S (NP (PRP It)) (VP (VBD was) (VP (VBN sold))))")
    [s] = evalb([gold], [test]).sentences
    assert (s.status, s.matched, s.gold_brackets, s.test_brackets, s.length) == (OK, 4, 4, 4, 3)


def _long(n_words: int, extra: str) -> Tree:
    leaves = " ".join(f"(NN w{i})" for i in range(n_words))
    return _t(f"(S (NP {leaves}) {extra})")


def test_length_cutoff_counts_punctuation_but_not_traces():
    # A: 40 words + "." -> length 41 (punctuation counts): only in the "all" summary.
    #    Gold S(0,40) NP(0,40); test is flat S(0,40): matched 1, gold 2, test 1.
    gold_a = _long(40, "(. .)")
    test_a = _t("(S " + " ".join(f"(NN w{i})" for i in range(40)) + " (. .))")
    # B: 40 words + a trace -> length 40 (-NONE- does not count): in both summaries.
    #    Gold S(0,40) NP(0,40) (the trace's NP spans nothing); test identical: 2/2/2.
    gold_b = _long(40, "(NP (-NONE- *))")
    test_b = _long(40, "")
    result = evalb([gold_a, gold_b], [test_a, test_b])
    assert [s.length for s in result.sentences] == [41, 40]
    everything, short = result.summary(), result.summary(40)
    every = (everything.n_sentences, everything.matched, everything.gold_brackets, everything.test_brackets)
    assert every == (2, 3, 4, 3)
    assert everything.recall == pytest.approx(75.0) and everything.precision == pytest.approx(100.0)
    assert (short.n_sentences, short.matched, short.gold_brackets, short.test_brackets) == (1, 2, 2, 2)
    assert short.fmeasure == pytest.approx(100.0)


def test_errors_and_skips_are_counted_and_excluded():
    gold = _t("(S (NP (PRP It)) (VP (VBD rained)) (. .))")
    longer = _t("(S (NP (PRP It)) (VP (VBD rained) (ADVP (RB hard))) (. .))")
    other = _t("(S (NP (PRP It)) (VP (VBD snowed)) (. .))")
    only_punct = _t("(S (. .))")
    result = evalb([ATTACH_GOLD, gold, gold, gold], [ATTACH_TEST, longer, other, only_punct])
    assert [(s.status, s.message) for s in result.sentences[1:]] == [
        (ERROR, "Length unmatch (2|3)"),
        (ERROR, "Words unmatch (rained|snowed)"),
        (SKIP, "Skip (test tree has no word)"),
    ]
    summary = result.summary()
    assert (summary.n_sentences, summary.n_error, summary.n_skip, summary.n_valid) == (4, 2, 1, 1)
    # Only the first sentence counts: 6 matched, 7 gold, 6 test.
    assert (summary.matched, summary.gold_brackets, summary.test_brackets) == (6, 7, 6)


def test_corpus_summary():
    # Sentences: attachment (M6 G7 T6, 0 crossing), crossing (M1 G3 T3, 1), ADVP/PRT (M4 G4 T4, 0).
    # M = 11, G = 14, T = 13: recall 11/14 = 78.571, precision 11/13 = 84.615, F = 22/27 = 81.481.
    # Complete match 1/3 (only ADVP/PRT), average crossing 1/3, no crossing 2/3.
    # Tags: 7/7 + 4/4 + 2/3 = 13 of 14 words -> 92.857.
    result = evalb([ATTACH_GOLD, CROSS_GOLD, PRT_GOLD], [ATTACH_TEST, CROSS_TEST, PRT_TEST])
    s = result.summary()
    assert s.recall == pytest.approx(100 * 11 / 14)
    assert s.precision == pytest.approx(100 * 11 / 13)
    assert s.fmeasure == pytest.approx(100 * 22 / 27)
    assert s.complete_match == pytest.approx(100 / 3)
    assert s.average_crossing == pytest.approx(1 / 3)
    assert s.no_crossing == pytest.approx(200 / 3)
    assert s.two_or_less_crossing == pytest.approx(100.0)
    assert s.tagging_accuracy == pytest.approx(100 * 13 / 14)
    text = result.format()
    for line in [
        "Number of sentence        =      3",
        "Bracketing Recall         =  78.57",
        "Bracketing Precision      =  84.62",
        "Bracketing FMeasure       =  81.48",
        "Complete match            =  33.33",
        "Average crossing          =   0.33",
        "Tagging accuracy          =  92.86",
        "-- len<=40 --",
        # EVALB row for sentence 2: ID 2, length 4, status 0, recall = precision = 1/3.
        "   2    4    0   33.33  33.33     1      3    3      1      4     4   100.00",
    ]:
        assert line in text


def test_mismatched_list_lengths_raise():
    with pytest.raises(ValueError, match="2 gold trees but 1 test"):
        evalb([PRT_GOLD, PRT_GOLD], [PRT_TEST])


def test_score_predictions_from_linearized_outputs():
    sources = [" ".join(words(ATTACH_GOLD)), " ".join(words(PRT_GOLD))]
    # First: the wrong attachment, well-formed.  Second: gold structure but missing ")S" at the
    # end and one XX short, so "up" is attached to the root: test S(0,3) NP(0,1) VP(1,2),
    # and since PRT would be empty it is removed -> matched S, NP = 2 of gold 4, test 3.
    predictions = [linearize(ATTACH_TEST), "(S (NP XX )NP (VP XX (PRT )PRT )VP"]
    figures = score_predictions(sources, predictions, [ATTACH_GOLD, PRT_GOLD])
    # M = 6 + 2 = 8, G = 7 + 4 = 11, T = 6 + 3 = 9: recall 72.727, precision 88.889, F = 16/20 = 80.
    assert figures["recall"] == pytest.approx(100 * 8 / 11)
    assert figures["precision"] == pytest.approx(100 * 8 / 9)
    assert figures["f1"] == pytest.approx(80.0) and figures["f1_le40"] == pytest.approx(80.0)
    assert (figures["n"], figures["n_valid"], figures["n_repaired"]) == (2, 2, 1)


def test_details_table_is_evalbs_own_table_line_for_line(tmp_path):
    """The --details table against what EVALB itself printed for the trees the scorer wrote (fixture)."""
    import contextlib
    import io
    from pathlib import Path

    from ablate.tasks.parsing.score import main

    case = Path(__file__).parent / "fixtures" / "evalb"
    out, trees = io.StringIO(), tmp_path / "test.txt"
    with contextlib.redirect_stdout(out):
        assert main([str(case / "gold.txt"), str(case / "pred.txt"), "--details", "--trees", str(trees)]) == 0
    evalb_table = (case / "evalb_collins.txt").read_text()
    assert out.getvalue().startswith(evalb_table)
    # the totals line holds the total of crossing brackets (1), not the sentences without one (4)
    assert evalb_table.splitlines()[9].split()[5] == "1"
    # the written trees carry the gold POS tags, so that EVALB deletes the same punctuation
    assert "(. .)" in trees.read_text() and "XX" not in trees.read_text()


def test_the_paired_bootstrap_of_two_parsers_equals_a_hand_computation(tmp_path):
    """Two hand-made hypothesis files against three gold trees, bracket counts by hand (every labelled span
    but the preterminals): gold 1 (S (NP a b) (VP c (NP d))) has S, NP, VP and NP: A writes all 4, B only S
    and VP; gold 2 (S (NP e) (VP f)) has S, NP, VP: A and B write S only; gold 3 (S (NP g h) (VP i)) has S,
    NP, VP: A writes S and a wrong (NP h i), B all three. F1 = 2 M / (G + T): A 2*6/(10+7) = 70.59, B
    2*6/(10+6) = 75.00, a difference of +4.41. Its interval and two-sided p are recomputed from the same
    resamples of sentence indices (seed 0) by a plain loop."""
    import numpy as np

    from ablate.data.treebank.corpus import read_trees
    from ablate.tasks.parsing.interval import paired_f1_difference

    gold = [
        parse_bracketed("(S (NP (DT a) (NN b)) (VP (VB c) (NP (NN d))))")[0],
        parse_bracketed("(S (NP (NN e)) (VP (VB f)))")[0],
        parse_bracketed("(S (NP (DT g) (NN h)) (VP (VB i)))")[0],
    ]
    a_file, b_file = tmp_path / "a.trees.txt", tmp_path / "b.trees.txt"
    a_file.write_text(
        "(S (NP (DT a) (NN b)) (VP (VB c) (NP (NN d))))\n(S (NN e) (VB f))\n(S (DT g) (NP (NN h) (VB i)))\n"
    )
    b_file.write_text(
        "(S (DT a) (NN b) (VP (VB c) (NN d)))\n(S (NN e) (VB f))\n(S (NP (DT g) (NN h)) (VP (VB i)))\n"
    )
    a, b = evalb(gold, read_trees(a_file)).sentences, evalb(gold, read_trees(b_file)).sentences
    assert [(s.matched, s.gold_brackets, s.test_brackets) for s in a] == [(4, 4, 4), (1, 3, 1), (1, 3, 2)]
    assert [(s.matched, s.gold_brackets, s.test_brackets) for s in b] == [(2, 4, 2), (1, 3, 1), (3, 3, 3)]

    def f1(rows):  # corpus F1 = 2 M / (G + T)
        m, g, t = (sum(r[i] for r in rows) for i in range(3))
        return 200.0 * m / (g + t)

    ca, cb = [(4, 4, 4), (1, 3, 1), (1, 3, 2)], [(2, 4, 2), (1, 3, 1), (3, 3, 3)]
    diff = f1(cb) - f1(ca)
    assert diff == pytest.approx(75.0 - 1200 / 17) and round(diff, 2) == 4.41
    draws = np.random.default_rng(0).integers(0, 3, size=(200, 3))
    d = [f1([cb[i] for i in row]) - f1([ca[i] for i in row]) for row in draws]
    lo, hi = np.percentile(d, [2.5, 97.5])
    p = np.mean([abs(x - diff) >= abs(diff) for x in d])
    assert paired_f1_difference(a, b, 0.95, 200, 0) == pytest.approx((diff, lo, hi, p))


def test_the_paired_bootstrap_of_several_seeds_is_of_their_mean_on_the_same_sentences():
    """Two seeds C and D of one recipe against A (counts per sentence by hand, as above): the difference is
    mean(F1(C), F1(D)) - F1(A), and each resample recomputes both seeds' F1 on the same drawn sentences,
    the seeds held fixed; recomputed by a plain loop over the same draws (seed 0). One seed given as a
    list or alone gives the same figures."""
    import numpy as np

    from ablate.tasks.parsing.interval import paired_counts_difference

    ca, cc = [(4, 4, 4), (1, 3, 1), (1, 3, 2)], [(2, 4, 2), (1, 3, 1), (3, 3, 3)]
    cd = [(3, 4, 3), (2, 3, 2), (1, 3, 1)]

    def counts(rows):
        return {"matched": [r[0] for r in rows], "gold": [r[1] for r in rows],
                "test": [r[2] for r in rows], "valid": [True] * len(rows)}  # fmt: skip

    def f1(rows):
        m, g, t = (sum(r[i] for r in rows) for i in range(3))
        return 200.0 * m / (g + t)

    # C: 2*6/(10+6) = 75.00; D: 2*6/(10+6) = 75.00; A: 2*6/(10+7) = 70.59
    diff = (f1(cc) + f1(cd)) / 2 - f1(ca)
    assert diff == pytest.approx(75.0 - 1200 / 17)
    draws = np.random.default_rng(0).integers(0, 3, size=(300, 3))
    d = [
        (f1([cc[i] for i in row]) + f1([cd[i] for i in row])) / 2 - f1([ca[i] for i in row]) for row in draws
    ]
    lo, hi = np.percentile(d, [2.5, 97.5])
    p = np.mean([abs(x - diff) >= abs(diff) for x in d])
    got = paired_counts_difference(counts(ca), [counts(cc), counts(cd)], 0.95, 300, 0)
    assert got == pytest.approx((diff, lo, hi, p))
    one = paired_counts_difference(counts(ca), counts(cc), 0.95, 300, 0)
    assert paired_counts_difference(counts(ca), [counts(cc)], 0.95, 300, 0) == one
    assert one != got  # D's sentences move the interval: the seeds are not one parser counted twice
    with pytest.raises(ValueError, match="paired: 2 and 3 sentences"):
        paired_counts_difference(counts(ca), [counts(cc), counts(cd[:2])])


def test_counts_written_beside_older_trees_equal_the_ones_a_baseline_writes(tmp_path, capsys):
    """`paired --counts` scores a trees file as ablate.baseline scores its parses: the counts it writes
    beside the trees of a right-branching baseline equal the ones the baseline wrote itself; the same
    counts are kept, other counts are refused in one line and left as they were."""
    import shutil
    from pathlib import Path

    from ablate import baseline
    from ablate.data.treebank.wsj import TRAIN_SECTIONS
    from ablate.tasks.parsing.paired import main as paired

    tb = tmp_path / "tb"  # the fixture WSJ (02, 22, 23), 03-21 a copy of 02's first file
    shutil.copytree(Path(__file__).parent / "fixtures" / "ptb" / "wsj", tb)
    first = sorted((tb / "02").glob("*.mrg"))[0]
    for sec in TRAIN_SECTIONS[1:]:
        (tb / sec).mkdir()
        shutil.copy(first, tb / sec / f"wsj_{sec}00.mrg")
    assert baseline.main(["right", "--treebank", str(tb), "--results", str(tmp_path / "res")]) == 0
    (folder,) = {p.parent for p in (tmp_path / "res").glob("right_branching/*/record.json")}
    written = (folder / "test.evalb.json").read_text()
    copy = tmp_path / "older"
    copy.mkdir()
    (copy / "test.trees.txt").write_text((folder / "test.trees.txt").read_text())
    args = ["--treebank", str(tb), "--split", "test", "--counts", str(copy / "test.trees.txt")]
    assert paired(args) == 0
    assert (copy / "test.evalb.json").read_text() == written
    assert paired(args) == 0  # the same counts: kept
    (copy / "test.evalb.json").write_text('{"matched": [0]}\n')
    capsys.readouterr()
    assert paired(args) == 2
    assert capsys.readouterr().err.startswith(f"error: {copy / 'test.evalb.json'}: holds other counts")
    assert (copy / "test.evalb.json").read_text() == '{"matched": [0]}\n'
