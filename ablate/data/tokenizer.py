"""The shared source/target vocabulary (5.1): one sentencepiece model, learned once per (corpus, size, type)
and reused by every run that asks for the same, so the members of a sweep share it."""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import sentencepiece as spm

PAD, UNK, BOS, EOS = 0, 1, 2, 3


class VocabError(ValueError):
    pass


@contextmanager
def file_lock(path: Path):
    """An exclusive lock so that concurrent sweep members build a shared artefact once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def vocab_error(text: str, vocab_size: int) -> VocabError:
    """sentencepiece's training error in one line naming data.vocab_size, with the bound it states for
    the corpus ("Vocabulary size is smaller than required_chars. 300 vs 350." / "Vocabulary size too high
    (5000). Please set it to a value <= 159."), without its source location."""
    if m := re.search(r"smaller than required_chars\. \d+ vs (\d+)", text):
        return VocabError(
            f"data.vocab_size={vocab_size} is too small for this corpus: sentencepiece needs at least "
            f"{m[1]}, a piece for each distinct character and 4 special ones"
        )
    if m := re.search(r"Vocabulary size too high \(\d+\)\. Please set it to a value <= (\d+)", text):
        return VocabError(f"data.vocab_size={vocab_size} is larger than this corpus supports: at most {m[1]}")
    lines = [line for line in text.splitlines() if line.strip()]
    last = re.sub(r"^\w+: \S+\(\d+\) \[.*?\] ", "", lines[-1]) if lines else "no message"
    return VocabError(f"sentencepiece training failed (data.vocab_size={vocab_size}): {last}")


def vocab_key(corpus_key: str, vocab_size: int, model_type: str, n_sentences: int) -> str:
    return hashlib.sha256(f"{corpus_key}|{vocab_size}|{model_type}|{n_sentences}".encode()).hexdigest()[:16]


def model_path(cache_dir: str, key: str) -> Path:
    """Where the model of vocab_key `key` is cached."""
    return Path(cache_dir) / "spm" / key / "spm.model"


def load_or_train(
    cache_dir: str,
    corpus_key: str,
    sentences: Callable[[], list[str]],
    vocab_size: int,
    model_type: str = "bpe",
    max_sentences: int = 2_000_000,
) -> spm.SentencePieceProcessor:
    """Return the model at <cache>/spm/<key>/spm.model, learning it first if absent (atomically: learn in a
    temporary folder, then rename). `sentences` gives the (at most max_sentences) sentences to learn on;
    it is called only when the model is learned, since gathering them reads the training text."""
    key = vocab_key(corpus_key, vocab_size, model_type, max_sentences)
    path = model_path(cache_dir, key)
    with file_lock(Path(cache_dir) / "spm" / f".{key}.lock"):
        if not path.is_file():
            _train(path.parent, sentences(), vocab_size, model_type, max_sentences)
    return spm.SentencePieceProcessor(model_file=str(path))


def _train(final: Path, sentences: list[str], vocab_size: int, model_type: str, max_sentences: int) -> None:
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=".tmp-"))
    try:
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=iter(sentences),
                model_prefix=str(tmp / "spm"),
                vocab_size=vocab_size,
                model_type=model_type,
                character_coverage=1.0,
                pad_id=PAD,
                unk_id=UNK,
                bos_id=BOS,
                eos_id=EOS,
                input_sentence_size=max_sentences,
                shuffle_input_sentence=True,
                num_threads=os.cpu_count() or 1,
                minloglevel=2,
                train_extremely_large_corpus=False,
            )
        except RuntimeError as e:
            raise vocab_error(str(e), vocab_size) from None
        os.replace(tmp, final) if not final.exists() else None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
