"""BPE-dropout (data.bpe_dropout): each epoch's segmentation, checked against the deterministic one."""

import numpy as np
import pytest
import sentencepiece as spm

from ablate.config import ConfigError, DataConfig, RunConfig, validate
from ablate.data.batching import StepSampler
from ablate.data.datamodule import Seq2SeqData, corpus_cache_key, prepare_corpus
from ablate.data.dataset import Encoded
from ablate.data.subword import EpochSegmenter


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    cfg = DataConfig(builtin_train=400, builtin_dev=20, builtin_test=20, vocab_size=300, cache_dir=str(cache))
    return prepare_corpus(cfg)


def segmenter(prepared, p=0.1, sides="both", seed=1, limit=256) -> EpochSegmenter:
    base = Encoded.load(prepared.encoded("train"))
    texts = (prepared.text("train", "src"), prepared.text("train", "tgt"))
    return EpochSegmenter(base, prepared.spm_model, texts, p, sides, seed, limit, chunk=150)


def pieces(enc: Encoded, side: str, i: int) -> list[int]:
    tokens, offsets = getattr(enc, f"{side}_tokens"), getattr(enc, f"{side}_offsets")
    return tokens[offsets[i] : offsets[i + 1]].tolist()


def test_zero_dropout_is_the_prepared_arrays(prepared):
    seg = segmenter(prepared, p=0.0)
    assert seg(0) is seg.base and seg(3) is seg.base


def test_sampled_segmentations_spell_the_same_sentences(prepared):
    """Another segmentation of the same text: decoding each sampled sentence gives what decoding its
    deterministic encoding gives, while the pieces themselves differ (and are more)."""
    seg = segmenter(prepared, p=0.1)
    sp = spm.SentencePieceProcessor(model_file=str(prepared.spm_model))
    enc, base = seg(0), seg.base
    assert len(enc) == len(base)
    for side in ("src", "tgt"):
        for i in range(len(base)):
            assert sp.decode(pieces(enc, side, i)) == sp.decode(pieces(base, side, i))
        assert not np.array_equal(getattr(enc, f"{side}_lens"), getattr(base, f"{side}_lens"))
        assert getattr(enc, f"{side}_lens").sum() > getattr(base, f"{side}_lens").sum()


def test_each_epoch_is_reproducible_and_epochs_differ(prepared):
    a, b, other_seed = segmenter(prepared), segmenter(prepared), segmenter(prepared, seed=2)
    e1 = a(1)
    b(0)  # another epoch first: the result depends on (seed, epoch) only
    assert np.array_equal(b(1).src_tokens, e1.src_tokens) and np.array_equal(b(1).tgt_offsets, e1.tgt_offsets)
    assert not np.array_equal(a(2).src_offsets, e1.src_offsets)
    assert not np.array_equal(other_seed(1).src_offsets, e1.src_offsets)


def test_source_only_keeps_the_target_segmentation(prepared):
    seg = segmenter(prepared, sides="src")
    enc = seg(0)
    assert enc.tgt_tokens is seg.base.tgt_tokens and enc.tgt_offsets is seg.base.tgt_offsets
    assert enc.src_lens.sum() > seg.base.src_lens.sum()


def test_sampled_sentences_over_the_limit_fall_back_to_the_deterministic_segmentation(prepared):
    limit = int(np.percentile(segmenter(prepared, p=0.0).base.src_lens, 60))
    seg = segmenter(prepared, p=0.3, limit=limit)
    enc, base = seg(0), seg.base
    fell_back = 0
    for i in range(len(base)):
        got, det = pieces(enc, "src", i), pieces(base, "src", i)
        assert len(got) <= max(limit, len(det))
        fell_back += got == det and len(det) > 2
    assert fell_back > 0


def test_step_sampler_plans_each_epoch_on_its_own_segmentation(prepared):
    seg = segmenter(prepared)
    base = seg.base
    sampler = StepSampler(base.src_lens + 1, base.tgt_lens + 1, 300, 1, seed=3, epoch_lengths=seg.widths)
    items = []
    stream = iter(sampler)
    while not items or items[-1].epoch < 2:
        items.append(next(stream))
    for epoch in (0, 1):
        src_w, tgt_w = seg.widths(epoch)
        mine = [m for m in items if m.epoch == epoch]
        assert sorted(np.concatenate([m.indices for m in mine]).tolist()) == list(range(len(base)))
        for m in mine:
            assert len(m.indices) * max(src_w[m.indices].max(), tgt_w[m.indices].max()) <= 300
            assert m.step_tokens == int(tgt_w[m.indices].sum())  # the loss divisor: this epoch's pieces
    # resumed in the middle of epoch 1: the same batches an uninterrupted run saw
    cut = next(i for i, m in enumerate(items) if m.epoch == 1) + 2
    fresh = segmenter(prepared)
    resumed = StepSampler(base.src_lens + 1, base.tgt_lens + 1, 300, 1, seed=3, epoch_lengths=fresh.widths)
    resumed.resume_after(items[cut].epoch, items[cut].step)
    for expected, got in zip(items[cut + 1 :], resumed):
        assert (got.epoch, got.step) == (expected.epoch, expected.step)
        assert np.array_equal(got.indices, expected.indices)


def test_the_training_stream_collates_the_epochs_segmentation(prepared, tmp_path):
    cfg = DataConfig(builtin_train=400, builtin_dev=20, builtin_test=20, vocab_size=300, bpe_dropout=0.1)
    dm = Seq2SeqData(cfg, prepared, max_tokens=300, accumulate=1, seed=4)
    dm.setup()
    seg = dm.segmenter()
    mb, batch = next(iter(dm.train_dataloader()))
    enc = seg(mb.epoch)
    for r, i in enumerate(mb.indices):
        n = int(enc.src_lens[i])
        assert batch.src[r, :n].tolist() == pieces(enc, "src", i)
        assert batch.tgt_out[r, : int(enc.tgt_lens[i])].tolist() == pieces(enc, "tgt", i)


def test_resume_position_given_to_the_constructor_or_set_later(prepared):
    cfg = DataConfig(builtin_train=400, builtin_dev=20, builtin_test=20, vocab_size=300)
    given = Seq2SeqData(cfg, prepared, max_tokens=300, accumulate=1, seed=4, resume_position=(0, 2))
    later = Seq2SeqData(cfg, prepared, max_tokens=300, accumulate=1, seed=4)
    later.resume_position = (0, 2)
    firsts = []
    for dm in (given, later):
        dm.setup()
        mb, _ = next(iter(dm.train_dataloader()))
        firsts.append((mb.epoch, mb.step, mb.indices.tolist()))
    assert firsts[0] == firsts[1] and firsts[0][:2] == (0, 3)


def test_the_option_leaves_the_prepared_corpus_alone():
    a = DataConfig(name="multi30k", root="/x", vocab_size=6000)
    b = DataConfig(name="multi30k", root="/x", vocab_size=6000, bpe_dropout=0.1, bpe_dropout_sides="src")
    assert corpus_cache_key(a) == corpus_cache_key(b)


@pytest.mark.parametrize(
    "settings, key",
    [
        ({"bpe_dropout": 1.0}, "data.bpe_dropout=1.0"),
        ({"bpe_dropout": 0.1, "spm_model_type": "unigram"}, "data.bpe_dropout=0.1 needs"),
        ({"bpe_dropout_sides": "tgt"}, "data.bpe_dropout_sides='tgt'"),
    ],
)
def test_bad_settings_name_their_key(settings, key):
    cfg = RunConfig()
    validate(cfg)
    for k, v in settings.items():
        setattr(cfg.data, k, v)
    with pytest.raises(ConfigError, match=key):
        validate(cfg)
