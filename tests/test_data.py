import gzip
from pathlib import Path

import numpy as np
import pytest

from ablate.data.batching import BatchingError, StepSampler, token_batches
from ablate.data.builtin import VERBS, builtin_splits
from ablate.data.dataset import Encoded, collate
from ablate.data.sources import DataError, read_parallel
from ablate.data.tokenizer import BOS, EOS, PAD


def lengths(n=500, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(1, 60, n), rng.integers(1, 60, n)


@pytest.mark.parametrize("max_tokens", [60, 200, 1000])
def test_token_batches_respect_the_budget_and_drop_nothing(max_tokens):
    s, t = lengths()
    batches = token_batches(s, t, max_tokens)
    for b in batches:
        assert len(b) * max(s[b].max(), t[b].max()) <= max_tokens
    all_idx = np.concatenate(batches)
    assert sorted(all_idx.tolist()) == list(range(len(s)))


def test_budget_below_longest_sentence_is_an_error():
    with pytest.raises(BatchingError, match="train.max_tokens=50"):
        token_batches(np.array([10, 70]), np.array([5, 5]), 50)


def test_batches_are_length_bucketed():
    rng = np.random.default_rng(0)
    s = rng.integers(1, 60, 2000)
    t = np.maximum(1, s + rng.integers(-3, 4, 2000))  # translations: correlated lengths
    batches = token_batches(s, t, 1000)
    padded = sum(len(b) * max(s[b].max(), t[b].max()) for b in batches)
    real = int(np.maximum(s, t).sum())
    assert real / padded > 0.9  # little padding when sorted by length


def test_step_sampler_covers_each_epoch_and_splits_devices():
    s, t = lengths(300)
    samplers = [StepSampler(s, t, 400, accumulate=2, world=2, rank=r, seed=3) for r in range(2)]
    plan = samplers[0].epoch_plan(0)
    other = samplers[1].epoch_plan(0)  # every device computes the same plan
    assert all(all(np.array_equal(a, b) for a, b in zip(p, q)) for p, q in zip(plan, other))
    seen = np.concatenate([b for step in plan for b in step])
    assert set(seen.tolist()) == set(range(300))  # every sentence, wrap-around may repeat a few
    it0, it1 = iter(samplers[0]), iter(samplers[1])
    for _ in range(4):  # two steps, two micro-batches per device
        a, b = next(it0), next(it1)
        assert (a.epoch, a.step, a.micro) == (b.epoch, b.step, b.micro)
        assert not set(a.indices.tolist()) & set(b.indices.tolist())
        step = plan[a.step]
        assert a.step_tokens == sum(int(t[m].sum()) for m in step)


def test_step_sampler_resumes_exactly():
    s, t = lengths(300)
    full = StepSampler(s, t, 400, accumulate=2, seed=5)
    stream = iter(full)
    items = [next(stream) for _ in range(40)]  # crosses into epoch 1
    cut = items[13]  # the last micro-batch of a step
    assert cut.micro == 1
    resumed = StepSampler(s, t, 400, accumulate=2, seed=5)
    resumed.resume_after(cut.epoch, cut.step)
    rest = iter(resumed)
    for expected in items[14:]:
        got = next(rest)
        assert (got.epoch, got.step, got.micro) == (expected.epoch, expected.step, expected.micro)
        assert (got.indices == expected.indices).all()


def test_epochs_differ():
    s, t = lengths(300)
    sm = StepSampler(s, t, 400, accumulate=1, seed=5)
    assert not all(np.array_equal(a[0], b[0]) for a, b in zip(sm.epoch_plan(0), sm.epoch_plan(1)))


def test_collate_shifts_the_target_right():
    enc = Encoded.from_ids([[10, 11], [12]], [[20, 21, 22], [23]])
    b = collate(enc, np.array([0, 1]))
    assert b.src.tolist() == [[10, 11, EOS], [12, EOS, PAD]]
    assert b.tgt_in.tolist() == [[BOS, 20, 21, 22], [BOS, 23, PAD, PAD]]
    assert b.tgt_out.tolist() == [[20, 21, 22, EOS], [23, EOS, PAD, PAD]]
    assert b.src_lengths.tolist() == [2, 1]


def test_builtin_corpus_is_deterministic_and_heldout_is_unseen():
    a = builtin_splits(300, 30, 30, seed=7)
    b = builtin_splits(300, 30, 30, seed=7)
    c = builtin_splits(300, 30, 30, seed=8)
    assert a == b and a != c
    train = {en for en, _ in a["train"]}
    assert not train & {en for en, _ in a["dev"]}
    assert not train & {en for en, _ in a["test"]}


FINITE = {v[3] for v in VERBS} | {v[4] for v in VERBS} | {"hat", "haben"}


def test_builtin_corpus_has_agreement_and_reordering():
    pairs = builtin_splits(3000, 10, 10, seed=1)["train"]
    lengths_ = [len(de.split()) for _, de in pairs]
    assert max(lengths_) >= 35 and min(lengths_) <= 5
    # Subordinate clauses put the finite verb last: "..., weil ... sieht." never "weil ... sieht den".
    weil = [de.split(", weil ")[1] for _, de in pairs if ", weil " in de]
    weil = [clause.rstrip(".") for clause in weil if "," not in clause]
    assert len(weil) > 20
    assert all(clause.split()[-1] in FINITE for clause in weil)
    # Masculine accusative: "sees the dog" -> "den Hund".
    assert any("den Hund" in de for en, de in pairs if "the dog." in en)


def write(path, lines, gz=False):
    data = "\n".join(lines) + "\n"
    if gz:
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(data)
    else:
        path.write_text(data, encoding="utf-8")


def test_read_parallel_gzip_and_counts(tmp_path):
    write(tmp_path / "a.en.gz", ["one", "", "two words", "x"], gz=True)
    write(tmp_path / "a.de.gz", ["eins", "leer", "zwei Wörter", "a b c d e f g h i j k l"], gz=True)
    split = read_parallel(str(tmp_path / "a.en.gz"), str(tmp_path / "a.de.gz"))
    assert split.src == ["one", "two words"] and split.tgt == ["eins", "zwei Wörter"]
    assert split.dropped == {"empty": 1, "length_ratio": 1}


def test_mismatched_line_counts_name_both_files(tmp_path):
    write(tmp_path / "a.en", ["one", "two"])
    write(tmp_path / "a.de", ["eins"])
    with pytest.raises(DataError, match=r"a\.en has 2 lines but .*a\.de has 1"):
        read_parallel(str(tmp_path / "a.en"), str(tmp_path / "a.de"))


def test_invalid_utf8_names_the_line(tmp_path):
    (tmp_path / "a.en").write_bytes(b"ok\nfine\nbad \xff byte\n")
    write(tmp_path / "a.de", ["a", "b", "c"])
    with pytest.raises(DataError, match=r"a\.en:3: invalid UTF-8"):
        read_parallel(str(tmp_path / "a.en"), str(tmp_path / "a.de"))


def test_length_order_by_longer_side_then_source():
    from ablate.data.batching import length_order

    s, t = np.array([3, 1, 2, 5, 4]), np.array([1, 4, 2, 1, 3])  # longer side: 3, 4, 2, 5, 4
    assert length_order(s, t).tolist() == [2, 0, 1, 4, 3]  # 4-4 tie broken by source: 1 before 4
    assert length_order(s, t, ties=np.array([0, 0, 0, 0, 0])).tolist() == [2, 0, 1, 4, 3]


def test_length_order_pads_less_than_target_then_source():
    # Correlated lengths like a parallel corpus: keying on the longer side keeps both sides tight, where
    # sorting by target then source leaves the source loose (the old order).
    rng = np.random.default_rng(0)
    t = rng.integers(3, 40, 20_000)
    s = np.maximum(1, (t * rng.normal(1.0, 0.2, t.size)).round().astype(int))

    def pad_share(batches):
        slots = sum(len(b) * (s[b].max() + t[b].max() + 2) for b in batches)
        return 1 - int((s + t + 2).sum()) / slots

    new = pad_share(token_batches(s, t, 4096))
    old = pad_share(token_batches(s, t, 4096, order=np.lexsort((s, t))))
    assert new < 0.75 * old


def test_a_dev_line_training_would_drop_is_an_error_naming_file_and_line(tmp_path):
    write(tmp_path / "d.en", ["one", "two", "three"])
    write(tmp_path / "d.de", ["eins", " ", "drei"])
    with pytest.raises(DataError, match=r"d\.de:2: empty line in a dev/test file"):
        read_parallel(str(tmp_path / "d.en"), str(tmp_path / "d.de"), keep_all=True)
    write(tmp_path / "d.de", ["eins", "zwei", "x" * 2001])
    with pytest.raises(DataError, match=r"d\.de:3: line of 2,001 characters in a dev/test file"):
        read_parallel(str(tmp_path / "d.en"), str(tmp_path / "d.de"), keep_all=True)
    write(tmp_path / "d.de", ["eins", "a b c d e f g h i j k l", "drei"])  # no ratio filter: scored whole
    assert len(read_parallel(str(tmp_path / "d.en"), str(tmp_path / "d.de"), keep_all=True)) == 3


def test_undecodable_training_lines_are_dropped_only_where_the_source_allows(tmp_path):
    from collections import Counter
    from pathlib import Path

    from ablate.data.sources import PairSource, clean_pairs

    (tmp_path / "a.en").write_bytes(b"one\ntw\xffo\nthree\n")
    write(tmp_path / "a.de", ["eins", "zwei", "drei"])
    dropped = Counter()
    lenient = PairSource(Path(tmp_path / "a.en"), Path(tmp_path / "a.de"), drop_bad_utf8=True)
    assert [s for s, _ in clean_pairs(lenient, False, dropped)] == ["one", "three"]
    assert dropped == {"invalid_utf8": 1}
    with pytest.raises(DataError, match=r"a\.en:2: invalid UTF-8"):  # dev/test: scored whole
        list(clean_pairs(lenient, True, Counter()))


def test_a_corrupt_gzip_names_its_file_only(tmp_path):
    write(tmp_path / "a.en", ["one", "two"])
    (tmp_path / "a.de.gz").write_bytes(gzip.compress(b"eins\nzwei\n")[:-12])
    with pytest.raises(DataError, match=r"^\S*a\.de\.gz: cannot read"):
        read_parallel(str(tmp_path / "a.en"), str(tmp_path / "a.de.gz"))


@pytest.mark.parametrize("n, k", [(10, 5), (10, 12), (10, 40), (200, 6)])  # (200, 6): sample's set branch
def test_vocabulary_sample_is_random_sample_of_sources_then_targets(tmp_path, n, k):
    """Drawn by index while streaming, the sample is the one random.sample takes from the whole list."""
    import random

    from ablate.data.binarize import Cleaned, vocab_sentences

    src, tgt = [f"s{i}" for i in range(n)], [f"t{i}" for i in range(n)]
    write(tmp_path / "train.src", src)
    write(tmp_path / "train.tgt", tgt)
    cleaned = Cleaned(tmp_path / "train.src", tmp_path / "train.tgt", lines=n, pairs=n)
    expected = random.Random(3).sample(src + tgt, k) if k < 2 * n else src + tgt
    assert vocab_sentences(cleaned, k, seed=3) == expected


def test_a_task_of_the_data_api_with_its_own_character_vocabulary_trains(tmp_path):
    """tests/user_task2 (docs/tasks.md's second example): its splits as plain pairs, its vocabulary one
    piece per character, sized before training (10 digits, '+', the space and 4 special pieces: 16), and a
    lower-is-better CER that the record holds as an independent count of its dev outputs gives it."""
    import json
    import os
    import subprocess
    import sys

    user = Path(__file__).resolve().parent / "user_task2"
    env = {**os.environ, "PYTHONPATH": str(user), "ABLATE_CACHE": str(tmp_path / "cache")}
    args = [f"hydra.searchpath=[file://{user}/conf]", "experiment=digits", "trainer=cpu", "trainer.threads=1",
            "logger=none", f"results_dir={tmp_path / 'results'}", "train.max_steps=6", "train.val_every=3",
            f"hydra.run.dir={tmp_path / 'out'}", "trainer.progress_bar=false"]  # fmt: skip
    p = subprocess.run([sys.executable, "-m", "ablate.run", *args], env=env, capture_output=True, text=True,
                       timeout=600)  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    assert "vocabulary: the task's own, char, 16 pieces" in p.stdout + p.stderr
    (rec_path,) = (tmp_path / "results").rglob("record.json")
    rec = json.loads(rec_path.read_text())
    assert rec["status"] == "finished" and rec["config"]["task_cfg"]["train_pairs"] == 300
    (meta,) = (tmp_path / "cache" / "data").glob("*/meta.json")
    assert json.loads(meta.read_text())["vocab_size"] == 16
    refs = (meta.parent / "dev.tgt.txt").read_text().splitlines()
    hyps = (rec_path.parent / "dev.hyp.txt").read_text().splitlines()
    edits = [_levenshtein(h.replace(" ", ""), r.replace(" ", "")) for h, r in zip(hyps, refs, strict=True)]
    expected = 100.0 * sum(edits) / sum(len(r.replace(" ", "")) for r in refs)
    assert abs(rec["metrics"]["dev_cer"] - expected) < 1e-9


def _levenshtein(a: str, b: str) -> int:
    """The edit distance by the full table (an independent path from the task's rolling row)."""
    d = [[i + j if i * j == 0 else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
    return d[len(a)][len(b)]
