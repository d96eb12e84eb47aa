"""The one builder of a prepared corpus, streaming, for every data source (ablate.data.corpora): spm.model,
{split}.npz (Encoded: int32 tokens + int64 offsets), {split}.{src,tgt}.txt, meta.json.

Memory stays bounded by the chunk size and the vocabulary sample, not by the corpus (WMT14: 4.5M pairs):

  pass 1  clean each split into temporary text, one pair a line: file pairs are read in lockstep and
          cleaned (sources.clean_pairs); pairs held in memory (built-in corpus, treebank) are written as
          they are
  vocab   learn the shared sentencepiece model on the training sentences, or on a sample of
          spm_sentences of them (tokenizer.load_or_train: cached, locked)
  pass 2  encode the cleaned text in chunks; drop training pairs over max_len; append tokens and lengths to
          raw temporary files and the kept text to the final text files
  npz     write each split's arrays into an uncompressed .npz by copying the raw files in chunks

Everything is written inside a temporary folder next to the destination; meta.json is written last (listing
every other file with its size, so that a file lost later is noticed: corpora.incomplete) and the folder is
renamed into place, so a crash leaves nothing a later call trusts.
"""

from __future__ import annotations

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
from functools import partial
from pathlib import Path

import numpy as np

from ablate.data import degenerate
from ablate.data.sources import MAX_CHARS, SPLITS, DataError, PairSource, Split, clean_pairs
from ablate.data.tokenizer import VocabError, load_or_train, model_path, vocab_key

Log = Callable[[str], None]


@dataclass
class Settings:
    cache_dir: str
    vocab_size: int
    model_type: str = "bpe"
    spm_sentences: int = 1_000_000
    max_len: int = 256  # wordpieces, either side (training only)
    max_len_ratio: float = 9.0  # word-length ratio (training only)
    max_chars: int = MAX_CHARS  # characters, either side
    src_lang: str = "en"
    tgt_lang: str = "de"
    seed: int = 0  # of the vocabulary sample
    chunk: int = 50_000  # pairs encoded at a time
    threads: int = field(default_factory=lambda: os.cpu_count() or 1)


@dataclass
class Inputs:
    """What a data source hands the builder."""

    splits: dict[str, list[PairSource] | Split]  # train and dev required; file pairs are concatenated
    corpus_key: str  # names the content: the vocabulary is cached under it
    meta: dict = field(default_factory=dict)  # more meta.json entries (where the text came from)
    write_extras: Callable[[Path], None] | None = None  # more files for the folder (parsing: gold trees)
    vocab: tuple[str, int] | None = None  # a vocabulary of the source's own: (sentencepiece model type, size)


# ----------------------------------------------------------------------------------------------------------
# Pass 1: clean


@dataclass
class Cleaned:
    src: Path
    tgt: Path
    lines: int = 0  # pairs read
    pairs: int = 0  # pairs kept
    dropped: Counter = field(default_factory=Counter)


def clean_split(given: list[PairSource] | Split, work: Path, name: str, st: Settings) -> Cleaned:
    """Pass 1 for one split: its kept pairs into work/{name}.src and work/{name}.tgt, one a line."""
    res = Cleaned(work / f"{name}.src", work / f"{name}.tgt")
    if isinstance(given, Split):
        pairs: Iterator[tuple[str, str]] = zip(given.src, given.tgt)
        res.dropped.update(given.dropped)
    else:
        heldout = name != "train"
        read = (clean_pairs(p, heldout, res.dropped, st.max_chars, st.max_len_ratio) for p in given)
        pairs = itertools.chain.from_iterable(read)
    kw = {"encoding": "utf-8", "newline": "\n", "buffering": 1 << 20}
    with open(res.src, "w", **kw) as fs, open(res.tgt, "w", **kw) as ft:
        for s, t in pairs:
            fs.write(_one_line(s))
            ft.write(_one_line(t))
            res.pairs += 1
    res.lines = res.pairs + sum(res.dropped.values())
    if res.pairs == 0:
        where = given[0].src if isinstance(given, list) and given else f"the {name} split"
        raise DataError(f"{where}: no usable sentence pairs in the {name} split")
    return res


def _one_line(s: str) -> str:
    # A lone CR inside a line would split it where the text is read back with universal newlines.
    return (s.replace("\r", " ") if "\r" in s else s) + "\n"


# ----------------------------------------------------------------------------------------------------------
# Vocabulary sample


def vocab_sentences(train: Cleaned, k: int, seed: int) -> list[str]:
    """The sentences the vocabulary is learned on: every training sentence, sources then targets, or when
    there are more than k, random.Random(seed).sample(k) of that list. The sample is drawn by index (the
    same indices sample() takes from the list itself) so that only the k chosen sentences are read into
    memory."""
    n = 2 * train.pairs
    lines = _read_text((train.src, train.tgt))
    if n <= k:
        return list(lines)
    chosen = np.array(random.Random(seed).sample(range(n), k))
    order = np.argsort(chosen)
    wanted = chosen[order].tolist() + [n]  # ascending, with a sentinel
    out: list[str] = [""] * k
    j = 0
    for i, line in enumerate(lines):
        if i == wanted[j]:
            out[order[j]] = line
            j += 1
    return out


def _read_text(paths: tuple[Path, ...]) -> Iterator[str]:
    for path in paths:
        with open(path, encoding="utf-8", newline="\n") as f:
            for line in f:
                yield line[:-1]


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


def build(out: Path, inputs: Inputs, st: Settings, log: Log = print) -> Path:
    """Prepare `inputs` into the folder `out`, atomically."""
    for need in ("train", "dev"):
        if not inputs.splits.get(need):
            raise DataError(f"no {need} data given")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".tmp-{out.name}-"))
    old = out.with_name(f".old-{out.name}-{os.getpid()}")
    try:
        _build_into(tmp, inputs, st, log)
        if out.exists():  # an incomplete folder (corpora.incomplete): set aside, removed once replaced
            os.replace(out, old)
        os.replace(tmp, out)
    finally:
        for left in (tmp, old):
            if left.exists():
                shutil.rmtree(left, ignore_errors=True)
    return out


def _build_into(tmp: Path, inputs: Inputs, st: Settings, log: Log) -> None:
    work = tmp / ".work"
    work.mkdir()
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    cleaned: dict[str, Cleaned] = {}
    for name in SPLITS:
        if name in inputs.splits:
            c = cleaned[name] = clean_split(inputs.splits[name], work, name, st)
            log(f"{name}: read {c.lines:,} pairs, kept {c.pairs:,}{_dropped_text(c.dropped)}")
    seconds["read_clean"] = time.perf_counter() - t0
    _check_sides(cleaned, inputs)

    t0 = time.perf_counter()
    key = inputs.corpus_key
    n_sample = min(st.spm_sentences, 2 * cleaned["train"].pairs)
    log(f"vocabulary: {st.model_type} {st.vocab_size} on {n_sample:,} training sentences")
    sample = partial(vocab_sentences, cleaned["train"], st.spm_sentences, st.seed)
    try:
        sp = load_or_train(st.cache_dir, key, sample, st.vocab_size, st.model_type, st.spm_sentences)
    except VocabError as e:  # which text it was learned on: a corpus of one pair says so
        n = cleaned["train"].pairs
        where = _describe(inputs.splits["train"])
        raise VocabError(f"{e} (training text {where}: {n:,} pair{'' if n == 1 else 's'} kept)") from None
    vkey = vocab_key(key, st.vocab_size, st.model_type, st.spm_sentences)
    shutil.copyfile(model_path(st.cache_dir, vkey), tmp / "spm.model")
    seconds["vocab"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    splits = {name: _encode(sp, c, work, tmp, name, st, log) for name, c in cleaned.items()}
    seconds["encode"] = time.perf_counter() - t0
    shutil.rmtree(work)
    if inputs.write_extras is not None:
        inputs.write_extras(tmp)
    files = {p.name: p.stat().st_size for p in sorted(tmp.iterdir()) if p.is_file()}
    meta = {
        "corpus_key": key,
        "vocab_size": sp.get_piece_size(),
        "src_lang": st.src_lang,
        "tgt_lang": st.tgt_lang,
        "vocab_key": vkey,
        "splits": splits,
        "sources": _sources_meta(inputs),
        "settings": _settings_meta(st, n_sample),
        "seconds": {k: round(v, 1) for k, v in seconds.items()},
        "files": files,  # name -> bytes: what a complete folder holds besides meta.json
        **inputs.meta,
    }
    (tmp / "meta.json").write_text(json.dumps(meta, indent=2))  # last: the folder is complete


def _check_sides(cleaned: dict[str, Cleaned], inputs: Inputs) -> None:
    """Held-out files given by the user must not hold their sides swapped (degenerate.SideWords): the
    training text's words are read once for dev and test."""
    given = [n for n in ("dev", "test") if n in cleaned and isinstance(inputs.splits[n], list)]
    if not given:
        return
    sides = degenerate.SideWords(cleaned["train"].src, cleaned["train"].tgt)
    for name in given:
        if why := sides.swapped(cleaned[name].src, cleaned[name].tgt):
            raise DataError(
                f"{_describe(inputs.splits[name])}: the {name} sides look swapped: {why}; swap "
                f"data.{name}_src and data.{name}_tgt"
            )


def _encode(sp, c: Cleaned, work: Path, tmp: Path, name: str, st: Settings, log: Log) -> dict:
    """Pass 2 for one split; its meta.json entry."""
    enc = encode_split(sp, c, work, tmp, name, st, st.max_len if name == "train" else None)
    dropped = dict(c.dropped)
    if enc.over_max_len:
        dropped["over_max_len"] = enc.over_max_len
        log(f"{name}: dropped {enc.over_max_len:,} pairs over {st.max_len} wordpieces")
    log(f"{name}: {enc.pairs:,} pairs, {enc.src_tokens:,} + {enc.tgt_tokens:,} wordpieces")
    c.src.unlink()
    c.tgt.unlink()
    return {
        "pairs": enc.pairs,
        "dropped": dropped,
        "src_tokens": enc.src_tokens,
        "tgt_tokens": enc.tgt_tokens,
        "lines": c.lines,
    }


def _describe(given: list[PairSource] | Split) -> str:
    if isinstance(given, Split):
        return "of the train split"
    more = f" (and {len(given) - 1} more file pairs)" if len(given) > 1 else ""
    return f"{given[0].src}{more}"


def _sources_meta(inputs: Inputs) -> dict:
    return {
        name: [{"src": str(p.src), "tgt": str(p.tgt), "lines": p.lines} for p in given]
        for name, given in inputs.splits.items()
        if isinstance(given, list)
    }


def _settings_meta(st: Settings, n_sample: int) -> dict:
    return {
        "vocab_size": st.vocab_size,
        "model_type": st.model_type,
        "spm_sentences": st.spm_sentences,
        "spm_sampled": n_sample,
        "max_len": st.max_len,
        "max_len_ratio": st.max_len_ratio,
        "max_chars": st.max_chars,
    }


def _dropped_text(dropped: Counter) -> str:
    if not dropped:
        return ""
    return "; dropped " + ", ".join(f"{k} {v:,}" for k, v in sorted(dropped.items()))
