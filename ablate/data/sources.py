"""Where parallel text comes from: the built-in corpus, line-aligned files (gzip too), Multi30k, WMT14.

Reading is strict and counted: mismatched line counts are an error naming both files; invalid UTF-8 is an
error naming file and line; empty pairs, over-long pairs and extreme length ratios are dropped and counted.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path


class DataError(ValueError):
    """Bad input data; the message names the file (and line)."""


@dataclass
class Split:
    src: list[str]
    tgt: list[str]
    dropped: Counter = field(default_factory=Counter)  # reason -> count

    def __len__(self) -> int:
        return len(self.src)


@dataclass
class Corpus:
    splits: dict[str, Split]  # train, dev, and test when there is one
    key: str  # content hash: the vocabulary and the binarized cache are keyed by it
    src_lang: str = "en"
    tgt_lang: str = "de"


def open_binary(path: str | os.PathLike):
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    try:
        return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")
    except OSError as e:
        raise DataError(f"{path}: cannot read ({e.strerror or e})") from None


def read_lines(path: str | os.PathLike) -> list[str]:
    """Lines without their newline, decoded one by one so that bad UTF-8 is reported with its line."""
    out = []
    with open_binary(path) as f:
        try:
            for lineno, raw in enumerate(f, start=1):
                try:
                    out.append(raw.decode("utf-8").rstrip("\n").rstrip("\r"))
                except UnicodeDecodeError as e:
                    raise DataError(
                        f"{path}:{lineno}: invalid UTF-8 ({e.reason} at byte {e.start})"
                    ) from None
        except (OSError, EOFError, zlib.error) as e:  # truncated or corrupt gzip
            raise DataError(f"{path}: cannot read ({e})") from None
    return out


MAX_CHARS = 2000  # a side longer than this is dropped from training, and an error in dev/test


def drop_reason(s: str, t: str, max_chars: int = MAX_CHARS, max_ratio: float = 9.0) -> str | None:
    """Why a (stripped) training pair is dropped: 'empty', 'too_long', 'length_ratio', or None to keep it.
    The one rule for the in-memory reader here and the streaming one (binarize.clean)."""
    if not s or not t:
        return "empty"
    if len(s) > max_chars or len(t) > max_chars:
        return "too_long"
    ls, lt = len(s.split()), len(t.split())
    if max(ls, lt) > max_ratio * min(ls, lt):
        return "length_ratio"
    return None


def clean_pairs(
    src: list[str],
    tgt: list[str],
    src_name: str,
    tgt_name: str,
    max_chars: int = MAX_CHARS,
    max_ratio: float = 9.0,
) -> Split:
    """Drop and count the pairs `drop_reason` rejects."""
    if len(src) != len(tgt):
        raise DataError(
            f"{src_name} has {len(src)} lines but {tgt_name} has {len(tgt)}: the files must be line-aligned"
        )
    split = Split([], [])
    for s, t in zip(src, tgt):
        s, t = s.strip(), t.strip()
        reason = drop_reason(s, t, max_chars, max_ratio)
        if reason:
            split.dropped[reason] += 1
        else:
            split.src.append(s)
            split.tgt.append(t)
    return split


def read_parallel(src_path: str, tgt_path: str, keep_all: bool = False, max_ratio: float = 9.0) -> Split:
    """A line-aligned pair of files. Dev/test sets keep every non-empty line (keep_all) so that scores
    cover the whole set; training data is filtered."""
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    ratio = float("inf") if keep_all else max_ratio
    max_chars = 10**9 if keep_all else MAX_CHARS
    split = clean_pairs(src, tgt, str(src_path), str(tgt_path), max_chars=max_chars, max_ratio=ratio)
    if not split.src:
        raise DataError(f"{src_path}: no usable sentence pairs (empty corpus)")
    return split


def file_digest(paths: list[str]) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(str(Path(p).name).encode())
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()[:16]


def builtin_corpus(n_train: int, n_dev: int, n_test: int, seed: int) -> Corpus:
    from ablate.data import builtin

    splits = builtin.builtin_splits(n_train, n_dev, n_test, seed)
    code = Path(builtin.__file__).read_bytes()
    key = hashlib.sha256(code + f"{n_train},{n_dev},{n_test},{seed}".encode()).hexdigest()[:16]
    return Corpus({k: Split([s for s, _ in v], [t for _, t in v]) for k, v in splits.items()}, key)


def files_corpus(
    paths: dict[str, tuple[str, str]], src_lang: str, tgt_lang: str, max_ratio: float = 9.0
) -> Corpus:
    """paths: split -> (source file, target file); 'train' and 'dev' are required."""
    for need in ("train", "dev"):
        if need not in paths:
            raise DataError(f"data.{need}_src / data.{need}_tgt must be given for data=files")
    splits = {
        name: read_parallel(s, t, keep_all=name != "train", max_ratio=max_ratio)
        for name, (s, t) in paths.items()
    }
    key = file_digest([p for pair in paths.values() for p in pair])
    return Corpus(splits, key, src_lang, tgt_lang)


MULTI30K_FILES = {"train": "train", "dev": "val", "test": "test_2016_flickr"}


def multi30k_corpus(root: str, src_lang: str = "en", tgt_lang: str = "de") -> Corpus:
    """A local folder of the standard Multi30k task-1 raw files: train/val/test_2016_flickr.{en,de}[.gz]."""
    paths = {}
    for split, stem in MULTI30K_FILES.items():
        pair = []
        for lang in (src_lang, tgt_lang):
            cands = [Path(root) / f"{stem}.{lang}.gz", Path(root) / f"{stem}.{lang}"]
            found = next((c for c in cands if c.is_file()), None)
            if found is None:
                raise DataError(f"{cands[0]}: no such file (data.root should hold the Multi30k raw files)")
            pair.append(str(found))
        paths[split] = tuple(pair)
    return files_corpus(paths, src_lang, tgt_lang)
