"""Reading parallel text: line-aligned file pairs (gzip too), the cleaning rule, the built-in corpus.

Reading is strict and counted: mismatched line counts are an error naming both files; a training pair that
is empty, over-long or of extreme length ratio is dropped and counted; a dev/test line that training would
drop is an error naming its file and line, since dev/test sets are scored whole. Invalid UTF-8 is an error
naming file and line, except in sources that allow dropping it (PairSource.drop_bad_utf8). A UTF-8
byte-order mark at the start of a file is not text: it is removed (else a reference keeps it and BLEU
counts it).
"""

from __future__ import annotations

import gzip
import hashlib
import os
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

SPLITS = ("train", "dev", "test")
MAX_CHARS = 2000  # a side longer than this is dropped from training, and an error in dev/test
BOM = "\ufeff"


class DataError(ValueError):
    """Bad input data; the message names the file (and line)."""


@dataclass(frozen=True)
class PairSource:
    """A line-aligned pair of text files (.gz allowed); `lines` is the expected count when known.
    drop_bad_utf8: a training line that does not decode is dropped and counted instead of an error (a
    downloaded release such as WMT14's Common Crawl holds a few, and cannot be fixed by hand)."""

    src: Path
    tgt: Path
    lines: int | None = None
    drop_bad_utf8: bool = False


@dataclass
class Split:
    """Sentence pairs held in memory, already clean (a generated corpus, a treebank's text)."""

    src: list[str]
    tgt: list[str]
    dropped: Counter = field(default_factory=Counter)  # reason -> count

    def __len__(self) -> int:
        return len(self.src)


@dataclass
class Corpus:
    splits: dict[str, Split]  # train, dev, and test when there is one
    key: str  # content hash: the vocabulary is cached under it
    src_lang: str = "en"
    tgt_lang: str = "de"


def check_file(path: str | os.PathLike) -> Path:
    """The path of a data file, or a one-line DataError: no such file, or a folder in its place."""
    path = Path(path)
    if path.is_dir():
        raise DataError(f"{path}: no such file (a folder)")
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    return path


def open_binary(path: str | os.PathLike):
    path = check_file(path)
    try:
        return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")
    except OSError as e:
        raise DataError(f"{path}: cannot read ({e.strerror or e})") from None


def _raw_lines(path: str | os.PathLike) -> Iterator[bytes]:
    """The lines of a file, newline kept; a corrupt or truncated gzip is an error naming the file."""
    with open_binary(path) as f:
        try:
            yield from f
        except (OSError, EOFError, zlib.error) as e:
            raise DataError(f"{path}: cannot read ({e})") from None


def read_lines(path: str | os.PathLike) -> list[str]:
    """Lines without their newline, decoded one by one so that bad UTF-8 is reported with its line."""
    out = []
    for lineno, raw in enumerate(_raw_lines(path), start=1):
        try:
            out.append(_decode(raw, lineno).rstrip("\n").rstrip("\r"))
        except UnicodeDecodeError as e:
            raise _utf8_error(path, lineno, e) from None
    return out


def _decode(raw: bytes, lineno: int) -> str:
    """One line's text; a byte-order mark opening the file (line 1) is dropped."""
    s = raw.decode("utf-8")
    return s[1:] if lineno == 1 and s.startswith(BOM) else s


def _utf8_error(path, lineno: int, e: UnicodeDecodeError) -> DataError:
    return DataError(f"{path}:{lineno}: invalid UTF-8 ({e.reason} at byte {e.start})")


def read_pairs(source: PairSource) -> Iterator[tuple[bytes, bytes]]:
    """Raw line pairs in lockstep; a DataError names both files when their line counts differ, or when they
    differ from the expected count."""
    src, tgt = _raw_lines(source.src), _raw_lines(source.tgt)
    n = 0
    for sb in src:
        tb = next(tgt, None)
        if tb is None:
            raise _misaligned(source, n + 1 + sum(1 for _ in src), n)
        n += 1
        yield sb, tb
    rest = sum(1 for _ in tgt)
    if rest:
        raise _misaligned(source, n, n + rest)
    if source.lines is not None and n != source.lines:
        raise DataError(
            f"{source.src} and {source.tgt} have {n} lines, expected {source.lines}: incomplete or not the "
            "expected release (delete them to fetch them again)"
        )


def _misaligned(source: PairSource, n_src: int, n_tgt: int) -> DataError:
    return DataError(
        f"{source.src} has {n_src} lines but {source.tgt} has {n_tgt}: the files must be line-aligned"
    )


def drop_reason(s: str, t: str, max_chars: int = MAX_CHARS, max_ratio: float = 9.0) -> str | None:
    """Why a (stripped) training pair is dropped: 'empty', 'too_long', 'length_ratio', or None to keep it."""
    if not s or not t:
        return "empty"
    if len(s) > max_chars or len(t) > max_chars:
        return "too_long"
    ls, lt = len(s.split()), len(t.split())
    if max(ls, lt) > max_ratio * min(ls, lt):
        return "length_ratio"
    return None


def check_heldout(source: PairSource, lineno: int, s: str, t: str, max_chars: int = MAX_CHARS) -> None:
    """A dev/test pair is scored whole, so a side that training would drop (empty, or over max_chars) is
    an error naming its file and line. No length-ratio check: a scored pair is never dropped."""
    for path, line in ((source.src, s), (source.tgt, t)):
        if not line:
            raise DataError(f"{path}:{lineno}: empty line in a dev/test file (every line is scored)")
        if len(line) > max_chars:
            raise DataError(
                f"{path}:{lineno}: line of {len(line):,} characters in a dev/test file "
                f"(at most {max_chars:,})"
            )


def clean_pairs(
    source: PairSource,
    heldout: bool,
    dropped: Counter,
    max_chars: int = MAX_CHARS,
    max_ratio: float = 9.0,
) -> Iterator[tuple[str, str]]:
    """The kept pairs of one file pair, stripped, streamed. Training pairs that `drop_reason` rejects are
    counted in `dropped`; dev/test pairs (heldout) go through `check_heldout` instead."""
    for lineno, (sb, tb) in enumerate(read_pairs(source), start=1):
        try:
            s = _decode(sb, lineno).strip()
            t = _decode(tb, lineno).strip()
        except UnicodeDecodeError as e:
            if source.drop_bad_utf8 and not heldout:
                dropped["invalid_utf8"] += 1
                continue
            path = source.src if not _decodes(sb) else source.tgt
            raise _utf8_error(path, lineno, e) from None
        if heldout:
            check_heldout(source, lineno, s, t, max_chars)
        else:
            reason = drop_reason(s, t, max_chars, max_ratio)
            if reason:
                dropped[reason] += 1
                continue
        yield s, t


def _decodes(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def read_split(pairs: list[PairSource], heldout: bool, max_ratio: float = 9.0) -> Split:
    """File pairs read into memory, one after another, cleaned as the builder cleans them."""
    split = Split([], [])
    for pair in pairs:
        for s, t in clean_pairs(pair, heldout, split.dropped, max_ratio=max_ratio):
            split.src.append(s)
            split.tgt.append(t)
    return split


def read_parallel(src_path: str, tgt_path: str, keep_all: bool = False, max_ratio: float = 9.0) -> Split:
    """A line-aligned pair of files in memory: training data (the default) is filtered; dev/test sets
    (keep_all) keep every line, and a line that cannot be kept is an error."""
    split = read_split([PairSource(Path(src_path), Path(tgt_path))], keep_all, max_ratio)
    if not split.src:
        raise DataError(f"{src_path}: no usable sentence pairs (empty corpus)")
    return split


def file_digest(paths: list[str | os.PathLike]) -> str:
    """The content key of a file corpus: names and bytes of its files, in order."""
    h = hashlib.sha256()
    for p in paths:
        h.update(str(Path(p).name).encode())
        try:
            with open(check_file(p), "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
        except OSError as e:
            raise DataError(f"{p}: cannot read ({e.strerror or e})") from None
    return h.hexdigest()[:16]


def builtin_corpus(n_train: int, n_dev: int, n_test: int, seed: int) -> Corpus:
    """The generated corpus (ablate/data/builtin.py); its key covers the generator's code and sizes."""
    from ablate.data import builtin

    splits = builtin.builtin_splits(n_train, n_dev, n_test, seed)
    code = Path(builtin.__file__).read_bytes()
    key = hashlib.sha256(code + f"{n_train},{n_dev},{n_test},{seed}".encode()).hexdigest()[:16]
    return Corpus({k: Split([s for s, _ in v], [t for _, t in v]) for k, v in splits.items() if v}, key)


MULTI30K_FILES = {"train": "train", "dev": "val", "test": "test_2016_flickr"}


def multi30k_pairs(root: str, src_lang: str = "en", tgt_lang: str = "de") -> dict[str, PairSource]:
    """A local folder of the standard Multi30k task-1 raw files: train/val/test_2016_flickr.{en,de}[.gz]."""
    pairs = {}
    for split, stem in MULTI30K_FILES.items():
        found = []
        for lang in (src_lang, tgt_lang):
            cands = [Path(root) / f"{stem}.{lang}.gz", Path(root) / f"{stem}.{lang}"]
            path = next((c for c in cands if c.is_file()), None)
            if path is None:
                raise DataError(f"{cands[0]}: no such file (data.root should hold the Multi30k raw files)")
            found.append(path)
        pairs[split] = PairSource(*found)
    return pairs
