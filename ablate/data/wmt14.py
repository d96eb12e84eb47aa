"""Downloadable sources: WMT14 English-German (the paper's ~4.5M-pair training set) and Multi30k task 1.

WMT14 En-De, as used by the paper and tensor2tensor (translate_ende), fairseq (prepare-wmt14en2de.sh) and
TFDS (wmt14_translate):

    train  Europarl v7            training/europarl-v7.de-en.{de,en}          1,920,209 lines
           Common Crawl           commoncrawl.de-en.{de,en}                   2,399,123 lines
           News Commentary v9     training/news-commentary-v9.de-en.{de,en}     201,288 lines
                                                                      total  4,520,620 pairs
    dev    newstest2013           test/newstest2013-src.{en,de}.sgm (wmt13/test.tgz)      3,000 segments
    test   newstest2014 (full)    test-full/newstest2014-deen-{src,ref}.*.sgm             3,003 segments

Archive sizes and sha256 are TFDS's recorded checksums; the md5 of the two test archives are sacrebleu's
(its wmt13 and wmt14/full test sets), so dev/test text matches `sacrebleu -t wmt14/full -l en-de`.

Every step can be interrupted and rerun: downloads go to `<name>.part` and resume with an HTTP Range
request; an archive is renamed into place only after its size and checksum match; an extracted file is
written to a temporary name and renamed once its line count matches. What exists under its final name has
been verified.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.error import HTTPError, URLError
from urllib.request import Request, urlopen

from ablate.data.sources import DataError

Log = Callable[[str], None]


def _quiet(msg: str) -> None:
    pass


@dataclass(frozen=True)
class Archive:
    name: str  # file name in the raw folder
    url: str
    size: int | None = None
    sha256: str | None = None
    md5: str | None = None


@dataclass(frozen=True)
class Part:
    """One line-aligned text pair inside an archive. Member paths may use {src} and {tgt}."""

    split: str  # train | dev | test
    archive: str  # Archive.name
    src: str
    tgt: str
    lines: int  # expected lines (plain) or <seg> elements (sgm)
    sgm: bool = False

    def members(self, src_lang: str, tgt_lang: str) -> tuple[str, str]:
        fmt = {"src": src_lang, "tgt": tgt_lang}
        return self.src.format(**fmt), self.tgt.format(**fmt)


@dataclass(frozen=True)
class Spec:
    name: str
    archives: tuple[Archive, ...]
    parts: tuple[Part, ...]
    langs: tuple[str, str] = ("en", "de")

    def archive(self, name: str) -> Archive:
        return next(a for a in self.archives if a.name == name)

    def key(self, src_lang: str, tgt_lang: str) -> str:
        """Identity of the verified content: archives, checksums, members, counts and direction."""
        blob = json.dumps(
            [self.name, src_lang, tgt_lang, [vars(a) for a in self.archives], [vars(p) for p in self.parts]],
            sort_keys=True,
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


WMT14_EN_DE = Spec(
    name="wmt14_en_de",
    archives=(
        Archive(
            "training-parallel-europarl-v7.tgz",
            "https://www.statmt.org/wmt13/training-parallel-europarl-v7.tgz",
            size=657_632_379,
            sha256="0224c7c710c8a063dfd893b0cc0830202d61f4c75c17eb8e31836103d27d96e7",
        ),
        Archive(
            "training-parallel-commoncrawl.tgz",
            "https://www.statmt.org/wmt13/training-parallel-commoncrawl.tgz",
            size=918_311_367,
            sha256="c7a74e2ea01ac6c920123108627e35278d4ccb5701e15428ffa34de86fa3a9e5",
        ),
        Archive(
            "training-parallel-nc-v9.tgz",
            "https://www.statmt.org/wmt14/training-parallel-nc-v9.tgz",
            size=80_418_416,
            sha256="cb8953f292298e6877ae433c98912b927cb0766b303f4540512ddd286c748485",
        ),
        Archive(
            "wmt13-test.tgz", "https://www.statmt.org/wmt13/test.tgz", md5="48eca5d02f637af44e85186847141f67"
        ),
        Archive(
            "wmt14-test-full.tgz",
            "https://www.statmt.org/wmt14/test-full.tgz",
            md5="a8cd784e006feb32ac6f3d9ec7eb389a",
        ),
    ),
    parts=(
        Part(
            "train",
            "training-parallel-europarl-v7.tgz",
            "training/europarl-v7.de-en.{src}",
            "training/europarl-v7.de-en.{tgt}",
            1_920_209,
        ),
        Part(
            "train",
            "training-parallel-commoncrawl.tgz",
            "commoncrawl.de-en.{src}",
            "commoncrawl.de-en.{tgt}",
            2_399_123,
        ),
        Part(
            "train",
            "training-parallel-nc-v9.tgz",
            "training/news-commentary-v9.de-en.{src}",
            "training/news-commentary-v9.de-en.{tgt}",
            201_288,
        ),
        Part(
            "dev",
            "wmt13-test.tgz",
            "test/newstest2013-src.{src}.sgm",
            "test/newstest2013-src.{tgt}.sgm",
            3000,
            True,
        ),
        Part(
            "test",
            "wmt14-test-full.tgz",
            "test-full/newstest2014-deen-src.{src}.sgm",
            "test-full/newstest2014-deen-ref.{tgt}.sgm",
            3003,
            True,
        ),
    ),
)

MULTI30K_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/{name}"
MULTI30K_LINES = {"train": 29_000, "val": 1_014, "test_2016_flickr": 1_000}


# ----------------------------------------------------------------------------------------------------------
# Verification


def digest(path: Path, algo: str) -> str:
    h = hashlib.new(algo)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def _stamp(path: Path) -> Path:
    return path.parent / f".{path.name}.verified"


def verify_archive(path: Path, archive: Archive, shown: str | None = None, stamp: bool = True) -> None:
    """Size and checksum, or a DataError naming the file. A verified file gets a stamp (size, mtime) so a
    later run does not hash it again."""
    shown = shown or str(path)
    st = path.stat()
    tag = _tag(path, archive)
    if _stamp(path).is_file() and _stamp(path).read_text() == tag:
        return
    if archive.size is not None and st.st_size != archive.size:
        raise DataError(f"{shown}: {st.st_size} bytes, expected {archive.size} ({archive.url})")
    for algo in ("sha256", "md5"):
        want = getattr(archive, algo)
        if want:
            got = digest(path, algo)
            if got != want:
                raise DataError(f"{shown}: {algo} {got} does not match the expected {want} ({archive.url})")
    if stamp:
        _stamp(path).write_text(tag)


def _tag(path: Path, archive: Archive) -> str:
    st = path.stat()
    return f"{st.st_size} {st.st_mtime_ns} {archive.sha256 or archive.md5 or ''}"


def count_lines(chunks: Iterable[bytes]) -> int:
    n, last = 0, b"\n"
    for chunk in chunks:
        if chunk:
            n += chunk.count(b"\n")
            last = chunk[-1:]
    return n + (last != b"\n")


def count_file_lines(path: Path) -> int:
    try:
        with open(path, "rb") as f:
            opener = gzip.open if f.read(2) == b"\x1f\x8b" else open  # by content: a .gz.part is gzip too
        with opener(path, "rb") as f:
            return count_lines(iter(lambda: f.read(1 << 22), b""))
    except (OSError, EOFError) as e:
        raise DataError(f"{path}: cannot read ({e})") from None


# ----------------------------------------------------------------------------------------------------------
# Download


def download(
    url: str,
    dest: Path,
    archive: Archive | None = None,
    check: Callable[[Path], None] | None = None,
    log: Log = _quiet,
    retries: int = 3,
    timeout: float = 60.0,
) -> Path:
    """Fetch url to dest, resuming a previous partial download (dest.part) where the server allows it. One
    piece: the retry loop and its resume bookkeeping share every local.
    The file is verified (archive: size and checksum; check: any callable raising DataError) before it is
    renamed to dest. A corrupt download is deleted and reported with its name."""
    dest = Path(dest)
    if dest.is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.parent / (dest.name + ".part")
    size = archive.size if archive else None
    for attempt in range(1, retries + 1):
        have = part.stat().st_size if part.is_file() else 0
        if size is not None and have > size:
            part.unlink()
            have = 0
        if size is not None and have == size:
            break
        headers = {"User-Agent": "ablate-prepare/1"}
        if have:
            headers["Range"] = f"bytes={have}-"
        try:
            with urlopen(Request(url, headers=headers), timeout=timeout) as r:
                code = r.getcode()
                append = bool(have) and code == 206
                total = r.headers.get("Content-Length") if hasattr(r, "headers") else None
                total = (int(total) + (have if append else 0)) if total else size
                log(f"download {url} -> {dest}" + (f" (resuming at {have:,} bytes)" if append else ""))
                with open(part, "ab" if append else "wb") as f:
                    _copy(r, f, have if append else 0, total, log)
            break
        except HTTPError as e:
            if e.code == 416 and have:  # nothing left to fetch
                break
            if attempt == retries:
                raise DataError(f"{url}: download failed (HTTP {e.code}); rerun to resume") from None
        except (URLError, OSError, TimeoutError) as e:
            if attempt == retries:
                raise DataError(f"{url}: download failed ({e}); rerun to resume from {part}") from None
        log(f"download {url}: attempt {attempt} failed, retrying")
        time.sleep(min(30, 2**attempt))
    try:
        if archive is not None:
            verify_archive(part, archive, shown=f"{dest} (downloaded from {url})", stamp=False)
        if check is not None:
            check(part)
    except DataError as e:
        part.unlink(missing_ok=True)
        raise DataError(f"{e}; the download was deleted, rerun to fetch it again") from None
    os.replace(part, dest)
    if archive is not None:
        _stamp(dest).write_text(_tag(dest, archive))  # verified above; a later run need not hash it again
    return dest


def _copy(r, f, done: int, total: int | None, log: Log) -> None:
    step = max(total // 10, 1) if total else None
    next_report = (done // step + 1) * step if step else None
    while True:
        chunk = r.read(1 << 20)
        if not chunk:
            break
        f.write(chunk)
        done += len(chunk)
        if next_report is not None and total and done >= next_report:
            log(f"  {done / 1e6:,.0f} / {total / 1e6:,.0f} MB")
            next_report += step


# ----------------------------------------------------------------------------------------------------------
# sgm (the WMT test sets)

_SEG = re.compile(r"<seg\b[^>]*>(.*)</seg>", re.IGNORECASE)


def parse_sgm(lines: Iterable[bytes], name: str) -> list[str]:
    """The text of each <seg id=...>...</seg> in file order, whitespace collapsed and nothing unescaped
    (the same text sacrebleu scores against). One segment a line, as in every WMT release."""
    out = []
    for lineno, raw in enumerate(lines, start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise DataError(f"{name}:{lineno}: invalid UTF-8 ({e.reason} at byte {e.start})") from None
        if "<seg" not in line.lower():
            continue
        m = _SEG.search(line)
        if m is None:
            raise DataError(f"{name}:{lineno}: <seg> without a closing </seg> on the same line")
        out.append(" ".join(m.group(1).split()))
    return out


def parse_sgm_file(path: str | os.PathLike) -> list[str]:
    with open(path, "rb") as f:
        return parse_sgm(f, str(path))


# ----------------------------------------------------------------------------------------------------------
# Extraction


@dataclass
class Fetched:
    """Plain, verified, line-aligned text files per split, in concatenation order."""

    files: dict[str, list[tuple[Path, Path, int]]] = field(default_factory=dict)  # split -> (src, tgt, lines)


def plain_name(member: str, sgm: bool) -> str:
    base = Path(member).name
    return (base[: -len(".sgm")] + ".txt") if sgm else base


def fetch(spec: Spec, raw: Path, src_lang: str, tgt_lang: str, log: Log = print) -> Fetched:
    """Download (or find in `raw`), verify and extract what `spec` lists; return the plain text files.

    A file already in `raw` under its plain name is used as is (its line count is checked when it is read);
    an archive already in `raw` is verified instead of downloaded."""
    raw = Path(raw)
    raw.mkdir(parents=True, exist_ok=True)
    if {src_lang, tgt_lang} != set(spec.langs):
        raise DataError(
            f"{spec.name} has languages {spec.langs}, not data.src_lang={src_lang}/tgt_lang={tgt_lang}"
        )
    out = Fetched()
    by_archive: dict[str, list[Part]] = {}
    for part in spec.parts:
        by_archive.setdefault(part.archive, []).append(part)
    for name, parts in by_archive.items():
        wanted: dict[str, tuple[Path, Part]] = {}
        for part in parts:
            for member in part.members(src_lang, tgt_lang):
                target = raw / plain_name(member, part.sgm)
                if not target.is_file():
                    wanted[member] = (target, part)
        if wanted:
            archive = spec.archive(name)
            path = raw / archive.name
            if path.is_file():
                verify_archive(path, archive)
            else:
                download(archive.url, path, archive, log=log)
            _extract(path, wanted, log)
    for part in spec.parts:
        s, t = (raw / plain_name(m, part.sgm) for m in part.members(src_lang, tgt_lang))
        out.files.setdefault(part.split, []).append((s, t, part.lines))
    return out


def _extract(path: Path, wanted: dict[str, tuple[Path, Part]], log: Log) -> None:
    """One sequential pass through the archive, writing only the wanted members (verified, atomically)."""
    log(f"extract {path.name}: {', '.join(sorted(wanted))}")
    left = dict(wanted)
    try:
        with tarfile.open(path, "r|*") as tf:
            for info in tf:
                name = info.name.removeprefix("./")
                if name not in left or not info.isfile():
                    continue
                target, part = left.pop(name)
                f = tf.extractfile(info)
                assert f is not None
                _write_member(f, target, part, f"{path.name}:{name}")
                if not left:
                    break
    except (tarfile.TarError, OSError, EOFError) as e:
        raise DataError(f"{path}: cannot read the archive ({e}); delete it to download it again") from None
    if left:
        raise DataError(f"{path}: has no member {', '.join(sorted(left))}")


def _write_member(f, target: Path, part: Part, shown: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        with os.fdopen(fd, "wb") as out:
            if part.sgm:
                segs = parse_sgm(f, shown)
                n = len(segs)
                out.write("".join(s + "\n" for s in segs).encode("utf-8"))
            else:
                n, last = 0, b"\n"
                for chunk in iter(lambda: f.read(1 << 22), b""):
                    out.write(chunk)
                    n += chunk.count(b"\n")
                    last = chunk[-1:]
                n += last != b"\n"
        if n != part.lines:
            what = "segments" if part.sgm else "lines"
            raise DataError(
                f"{shown}: {n} {what}, expected {part.lines}: the archive is not the expected release"
            )
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


# ----------------------------------------------------------------------------------------------------------
# Multi30k


def multi30k_complete(root: Path, langs: tuple[str, str]) -> bool:
    return all((Path(root) / f"{stem}.{lang}.gz").is_file() for stem in MULTI30K_LINES for lang in langs)


def fetch_multi30k(
    root: Path, langs: tuple[str, str] = ("en", "de"), log: Log = print, base: str = MULTI30K_URL
) -> Path:
    """Download the raw Multi30k task-1 files into root (those missing), each verified by its line count
    before it is renamed into place; check the counts of files already there."""
    root = Path(root)
    for stem, n in MULTI30K_LINES.items():
        for lang in langs:
            name = f"{stem}.{lang}.gz"
            dest = root / name
            if dest.is_file():
                _check_lines(dest, n, str(dest))
                continue

            def check(p: Path, n=n, shown=str(dest)) -> None:
                _check_lines(p, n, shown)

            download(base.format(name=name), dest, check=check, log=log)
    return root


def _check_lines(path: Path, n: int, shown: str) -> None:
    got = count_file_lines(path)
    if got != n:
        raise DataError(f"{shown}: {got} lines, expected {n}")
