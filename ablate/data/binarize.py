"""Streaming preparation of a large parallel corpus into the Prepared folder layout (ablate.data.datamodule):
spm.model, {split}.npz (Encoded: int32 tokens + int64 offsets), {split}.{src,tgt}.txt, meta.json.

Memory stays bounded by the chunk size and the vocabulary sample, not by the corpus:

  pass 1  read the line-aligned sources in lockstep; decode, clean and count; write the kept pairs to
          temporary text; reservoir-sample at most `spm_sentences` training sentences (both sides)
  vocab   learn the shared sentencepiece model on the sample (tokenizer.load_or_train: cached, locked)
  pass 2  encode the cleaned text in chunks; drop training pairs over max_len; append tokens and lengths to
          raw temporary files and the kept text to the final text files
  npz     write each split's arrays into an uncompressed .npz by copying the raw files in chunks

Everything is written inside a temporary folder next to the destination; meta.json is written last and the
folder is renamed into place, so a crash leaves nothing a later call trusts.

Bad data is counted, never fatal inside a corpus: invalid UTF-8 (either side), empty or whitespace-only
sides, sides over max_chars, word-length ratio over max_len_ratio, and (training only) pairs over max_len
wordpieces. Files whose line counts differ are an error naming both.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import random
import shutil
import struct
import tempfile
import time
import zipfile
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ablate.data.sources import MAX_CHARS, DataError, drop_reason, open_binary
from ablate.data.tokenizer import load_or_train, vocab_key

SPLITS = ("train", "dev", "test")
Log = Callable[[str], None]


@dataclass(frozen=True)
class PairSource:
    """A line-aligned pair of text files (.gz allowed); `lines` is the expected count when known."""

    src: Path
    tgt: Path
    lines: int | None = None


@dataclass
class Settings:
    cache_dir: str
    vocab_size: int
    model_type: str = "bpe"
    spm_sentences: int = 1_000_000
    max_len: int = 256  # wordpieces, either side (training only)
    max_len_ratio: float = 9.0  # word-length ratio (training only)
    max_chars: int = MAX_CHARS  # characters, either side (training only)
    src_lang: str = "en"
    tgt_lang: str = "de"
    seed: int = 0
    chunk: int = 50_000  # pairs encoded at a time
    threads: int = field(default_factory=lambda: os.cpu_count() or 1)


# ----------------------------------------------------------------------------------------------------------
# Sampling


class Reservoir:
    """A uniform sample of at most k items from a stream of unknown length (Li's algorithm L: O(k) memory,
    few random draws)."""

    def __init__(self, k: int, seed: int = 0):
        self.k, self.items, self.seen = k, [], 0
        self.rng = random.Random(seed)
        self._w = 1.0
        self._next = -1

    def _skip(self) -> None:
        self._w *= math.exp(math.log(1.0 - self.rng.random()) / self.k)
        gap = math.floor(math.log(1.0 - self.rng.random()) / math.log1p(-self._w)) if self._w < 1 else 0
        self._next += gap + 1

    def add(self, item) -> None:
        i = self.seen
        self.seen += 1
        if i < self.k:
            self.items.append(item)
            if i == self.k - 1:
                self._next = i
                self._skip()
        elif i == self._next:
            self.items[self.rng.randrange(self.k)] = item
            self._skip()


# ----------------------------------------------------------------------------------------------------------
# Pass 1: read, clean, count


def read_pairs(source: PairSource) -> Iterator[tuple[bytes, bytes]]:
    """Raw line pairs in lockstep; a DataError names both files when their line counts differ, or when they
    differ from the expected count."""
    n = 0
    try:
        with open_binary(source.src) as fs, open_binary(source.tgt) as ft:
            for sb in fs:
                tb = ft.readline()
                if not tb:
                    rest = sum(1 for _ in fs)
                    raise DataError(
                        f"{source.src} has {n + 1 + rest} lines but {source.tgt} has {n}: "
                        "the files must be line-aligned"
                    )
                n += 1
                yield sb, tb
            rest = sum(1 for _ in ft)
            if rest:
                raise DataError(
                    f"{source.src} has {n} lines but {source.tgt} has {n + rest}: "
                    "the files must be line-aligned"
                )
    except (OSError, EOFError) as e:  # truncated or corrupt gzip
        raise DataError(f"{source.src} / {source.tgt}: cannot read ({e})") from None
    if source.lines is not None and n != source.lines:
        raise DataError(
            f"{source.src} and {source.tgt} have {n} lines, expected {source.lines}: incomplete or not the "
            "expected release (delete them to fetch them again)"
        )


@dataclass
class Cleaned:
    src: Path
    tgt: Path
    lines: int = 0  # pairs read
    pairs: int = 0  # pairs kept
    dropped: Counter = field(default_factory=Counter)
    sha256: str = ""  # of the raw input bytes


def clean(
    sources: list[PairSource],
    out_src: Path,
    out_tgt: Path,
    filter_train: bool,
    st: Settings,
    sample: Reservoir | None = None,
) -> Cleaned:
    """Pass 1 for one split. Training pairs that fail a check are dropped and counted. Dev/test sets
    (filter_train False) are scored whole, so there a bad line (invalid UTF-8, empty, over max_chars) is an
    error naming its file and line, as datamodule.check_heldout_files does; no length-ratio filter."""
    res = Cleaned(out_src, out_tgt)
    h = hashlib.sha256()
    max_chars = st.max_chars
    ratio = st.max_len_ratio if filter_train else math.inf
    dropped = res.dropped
    kw = {"encoding": "utf-8", "newline": "\n", "buffering": 1 << 20}
    with open(out_src, "w", **kw) as fs, open(out_tgt, "w", **kw) as ft:
        for source in sources:
            for lineno, (sb, tb) in enumerate(read_pairs(source), start=1):
                h.update(sb)
                h.update(tb)
                res.lines += 1
                try:
                    s, t = sb.decode("utf-8").strip(), tb.decode("utf-8").strip()
                except UnicodeDecodeError:
                    if not filter_train:
                        raise _heldout_error(source, lineno, not _decodes(sb), "invalid UTF-8") from None
                    dropped["invalid_utf8"] += 1
                    continue
                reason = drop_reason(s, t, max_chars, ratio)
                if reason and not filter_train:  # dev/test: no ratio filter, so empty or too long
                    what = "empty line" if reason == "empty" else f"line over {max_chars:,} characters"
                    src_bad = not s if reason == "empty" else len(s) > max_chars
                    raise _heldout_error(source, lineno, src_bad, what)
                if reason:
                    dropped[reason] += 1
                    continue
                if "\r" in s:  # a lone CR inside a line would split it when the text is read back
                    s = s.replace("\r", " ")
                if "\r" in t:
                    t = t.replace("\r", " ")
                fs.write(s + "\n")
                ft.write(t + "\n")
                res.pairs += 1
                if sample is not None:
                    sample.add(s)
                    sample.add(t)
    res.sha256 = h.hexdigest()
    return res


def _heldout_error(source: PairSource, lineno: int, src_bad: bool, what: str) -> DataError:
    path = source.src if src_bad else source.tgt
    return DataError(f"{path}:{lineno}: {what} in a dev/test file (every line is scored)")


def _decodes(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


# ----------------------------------------------------------------------------------------------------------
# Pass 2: encode


def _encode_chunk(sp, lines: list[str], threads: int) -> list[list[int]]:
    return sp.encode(lines, num_threads=threads)


def _read_chunks(path_src: Path, path_tgt: Path, size: int) -> Iterator[tuple[list[bytes], list[bytes]]]:
    with open(path_src, "rb") as fs, open(path_tgt, "rb") as ft:
        while True:
            s = list(itertools.islice(fs, size))
            t = list(itertools.islice(ft, size))
            if not s:
                return
            yield s, t


@dataclass
class EncodedSplit:
    pairs: int
    over_max_len: int
    src_tokens: int
    tgt_tokens: int


def encode_split(sp, cleaned: Cleaned, work: Path, out: Path, name: str, st: Settings, max_len: int | None):
    """Pass 2 for one split: out/{name}.npz and out/{name}.{src,tgt}.txt."""
    raw = {side: (work / f"{name}.{side}.tok", work / f"{name}.{side}.len") for side in ("src", "tgt")}
    handles = {side: (open(raw[side][0], "wb"), open(raw[side][1], "wb")) for side in raw}
    texts = {side: open(out / f"{name}.{side}.txt", "wb", buffering=1 << 20) for side in ("src", "tgt")}
    kept = over = 0
    ntok = {"src": 0, "tgt": 0}
    try:
        for s_lines, t_lines in _read_chunks(cleaned.src, cleaned.tgt, st.chunk):
            ids = {
                "src": _encode_chunk(sp, [b[:-1].decode("utf-8") for b in s_lines], st.threads),
                "tgt": _encode_chunk(sp, [b[:-1].decode("utf-8") for b in t_lines], st.threads),
            }
            lens = {side: np.fromiter(map(len, v), dtype=np.int32, count=len(v)) for side, v in ids.items()}
            if max_len is not None:
                keep = np.flatnonzero((lens["src"] <= max_len) & (lens["tgt"] <= max_len))
            else:
                keep = np.arange(len(s_lines))
            all_kept = len(keep) == len(s_lines)
            over += len(s_lines) - len(keep)
            kept += len(keep)
            for side, lines in (("src", s_lines), ("tgt", t_lines)):
                seqs = ids[side] if all_kept else [ids[side][i] for i in keep]
                ln = lens[side] if all_kept else lens[side][keep]
                n = int(ln.sum())
                tok = np.fromiter(itertools.chain.from_iterable(seqs), dtype=np.int32, count=n)
                tok_f, len_f = handles[side]
                tok_f.write(tok.tobytes())
                len_f.write(ln.astype(np.int32).tobytes())
                ntok[side] += n
                texts[side].write(b"".join(lines) if all_kept else b"".join(lines[i] for i in keep))
    finally:
        for a, b in handles.values():
            a.close()
            b.close()
        for f in texts.values():
            f.close()
    arrays: dict[str, np.ndarray | RawArray] = {}
    for side in ("src", "tgt"):
        lens = np.fromfile(raw[side][1], dtype=np.int32)
        offsets = np.zeros(len(lens) + 1, dtype=np.int64)
        np.cumsum(lens, out=offsets[1:])
        arrays[f"{side}_tokens"] = RawArray(raw[side][0], np.dtype(np.int32), int(offsets[-1]))
        arrays[f"{side}_offsets"] = offsets
    ordered = {k: arrays[k] for k in ("src_tokens", "src_offsets", "tgt_tokens", "tgt_offsets")}
    write_npz(out / f"{name}.npz", ordered)
    for side in ("src", "tgt"):
        for p in raw[side]:
            p.unlink()
    return EncodedSplit(kept, over, ntok["src"], ntok["tgt"])


# ----------------------------------------------------------------------------------------------------------
# .npz written and read without holding arrays in memory


@dataclass(frozen=True)
class RawArray:
    """A 1-D array stored as raw bytes in a file (native little-endian), copied into the npz in chunks."""

    path: Path
    dtype: np.dtype
    count: int


def write_npz(path: Path, arrays: dict[str, np.ndarray | RawArray]) -> None:
    """Same format as np.savez (uncompressed zip of .npy members, loadable by np.load), streamed."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, a in arrays.items():
            if isinstance(a, RawArray):
                dtype, shape = a.dtype, (a.count,)
            else:
                a = np.ascontiguousarray(a)
                dtype, shape = a.dtype, a.shape
            header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape}
            with zf.open(name + ".npy", "w", force_zip64=True) as f:
                np.lib.format.write_array_header_1_0(f, header)
                if isinstance(a, RawArray):
                    with open(a.path, "rb") as src:
                        shutil.copyfileobj(src, f, 1 << 22)
                else:
                    f.write(memoryview(a).cast("B"))


def load_npz_mmap(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Memory-map the arrays of an uncompressed .npz (np.load's mmap_mode ignores .npz files): each member's
    data is found from its zip local header and .npy header. Compressed members are read normally."""
    path = str(path)
    out: dict[str, np.ndarray] = {}
    with zipfile.ZipFile(path) as zf, open(path, "rb") as f:
        for info in zf.infolist():
            key = info.filename.removesuffix(".npy")
            if info.compress_type != zipfile.ZIP_STORED:
                with zf.open(info) as m:
                    out[key] = np.lib.format.read_array(m)
                continue
            f.seek(info.header_offset)
            local = f.read(30)
            if local[:4] != b"PK\x03\x04":
                raise DataError(f"{path}: corrupt zip member {info.filename}")
            name_len, extra_len = struct.unpack("<HH", local[26:30])
            f.seek(info.header_offset + 30 + name_len + extra_len)
            version = np.lib.format.read_magic(f)
            read_header = (
                np.lib.format.read_array_header_1_0
                if version == (1, 0)
                else np.lib.format.read_array_header_2_0
            )
            shape, fortran, dtype = read_header(f)
            if math.prod(shape) == 0:
                out[key] = np.empty(shape, dtype=dtype)
            else:
                out[key] = np.memmap(
                    path, dtype=dtype, mode="r", offset=f.tell(), shape=shape, order="F" if fortran else "C"
                )
    return out


# ----------------------------------------------------------------------------------------------------------
# The whole build


def build(
    out: Path,
    splits: dict[str, list[PairSource]],
    st: Settings,
    corpus_key: str | None = None,
    log: Log = print,
    extra_meta: dict | None = None,
) -> Path:
    """Prepare `splits` (train and dev required) into the folder `out`, atomically. corpus_key names the
    content for the shared vocabulary cache; by default the sha256 of all input bytes."""
    for need in ("train", "dev"):
        if not splits.get(need):
            raise DataError(f"no {need} files given")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".tmp-{out.name}-"))
    work = tmp / ".work"
    work.mkdir()
    seconds: dict[str, float] = {}
    try:
        t0 = time.perf_counter()
        sample = Reservoir(st.spm_sentences, st.seed)
        cleaned: dict[str, Cleaned] = {}
        for name in SPLITS:
            if name not in splits:
                continue
            c = clean(
                splits[name],
                work / f"{name}.src",
                work / f"{name}.tgt",
                filter_train=name == "train",
                st=st,
                sample=sample if name == "train" else None,
            )
            cleaned[name] = c
            log(f"{name}: read {c.lines:,} pairs, kept {c.pairs:,}{_dropped_text(c.dropped)}")
            if c.pairs == 0:
                raise DataError(f"{splits[name][0].src}: no usable sentence pairs in the {name} split")
        seconds["read_clean"] = time.perf_counter() - t0

        key = (
            corpus_key
            or hashlib.sha256("".join(c.sha256 for c in cleaned.values()).encode()).hexdigest()[:16]
        )
        t0 = time.perf_counter()
        log(f"vocabulary: {st.model_type} {st.vocab_size} on {len(sample.items):,} sampled sentences")
        sp = load_or_train(
            st.cache_dir, key, sample.items, st.vocab_size, st.model_type, st.spm_sentences, st.seed
        )
        n_sample = len(sample.items)
        del sample
        (tmp / "spm.model").write_bytes(sp.serialized_model_proto())
        seconds["vocab"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        meta = {
            "corpus_key": key,
            "vocab_size": sp.get_piece_size(),
            "src_lang": st.src_lang,
            "tgt_lang": st.tgt_lang,
            "vocab_key": vocab_key(key, st.vocab_size, st.model_type, st.spm_sentences),
            "splits": {},
        }
        for name, c in cleaned.items():
            enc = encode_split(sp, c, work, tmp, name, st, st.max_len if name == "train" else None)
            dropped = dict(c.dropped)
            if enc.over_max_len:
                dropped["over_max_len"] = enc.over_max_len
            meta["splits"][name] = {
                "pairs": enc.pairs,
                "dropped": dropped,
                "src_tokens": enc.src_tokens,
                "tgt_tokens": enc.tgt_tokens,
                "lines": c.lines,
            }
            if enc.over_max_len:
                log(f"{name}: dropped {enc.over_max_len:,} pairs over {st.max_len} wordpieces")
            log(f"{name}: {enc.pairs:,} pairs, {enc.src_tokens:,} + {enc.tgt_tokens:,} wordpieces")
            c.src.unlink()
            c.tgt.unlink()
        seconds["encode"] = time.perf_counter() - t0
        meta["sources"] = {
            name: [{"src": str(p.src), "tgt": str(p.tgt), "lines": p.lines} for p in splits[name]]
            for name in cleaned
        }
        meta["settings"] = {
            "vocab_size": st.vocab_size,
            "model_type": st.model_type,
            "spm_sentences": st.spm_sentences,
            "spm_sampled": n_sample,
            "max_len": st.max_len,
            "max_len_ratio": st.max_len_ratio,
            "max_chars": st.max_chars,
        }
        meta["seconds"] = {k: round(v, 1) for k, v in seconds.items()}
        meta["prepared_by"] = "ablate.prepare"
        meta.update(extra_meta or {})
        shutil.rmtree(work)
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2))  # last: the folder is complete
        if out.exists():  # an incomplete folder (no meta.json) from something else: never trusted
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def _dropped_text(dropped: Counter) -> str:
    if not dropped:
        return ""
    return "; dropped " + ", ".join(f"{k} {v:,}" for k, v in sorted(dropped.items()))
