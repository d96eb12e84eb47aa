"""Content fingerprints of input files, cheap enough to take on every start.

A file's fingerprint is the sha256 of its bytes. Reading 4.5M pairs on every start would cost minutes, so the
hash is kept in this machine's cache ($ABLATE_CACHE, else ~/.cache/ablate: the files are this machine's,
whatever config, composed or recorded, names them), in <cache>/fingerprints/<sha256 of the real path>.json
holding {path, size, mtime_ns, sha256}, and read again only when the file's size or mtime differs from the
stored ones: an edited file is hashed again (and a changed hash names a new corpus and a new run), while
`touch` alone costs one read and changes nothing. A cache that cannot be written costs a read a process.
Within a process the answers are remembered by (path, size, mtime).

A path that cannot be read gets a marker instead of a hash ('missing', 'folder', 'unreadable'): the reader
reports it with its own one-line error when the corpus is built, and the run's identity stays computable.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path

from ablate.config.schema import default_cache

_memo: dict[tuple[str, int, int], str] = {}


def forget() -> None:
    """Drop what this process remembers (tests: as if a new process started)."""
    _memo.clear()


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def _cache_file(cache_dir: str, real: str) -> Path | None:
    if not cache_dir or "${" in cache_dir:  # an unresolved interpolation: remember in memory only
        return None
    return Path(cache_dir) / "fingerprints" / f"{hashlib.sha256(real.encode()).hexdigest()[:32]}.json"


def _stored(path: Path | None, real: str, size: int, mtime_ns: int) -> str | None:
    if path is None:
        return None
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
        if d.get("path") == real and d.get("size") == size and d.get("mtime_ns") == mtime_ns:
            return str(d["sha256"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass  # absent or damaged: hashed again and rewritten
    return None


def _store(path: Path | None, entry: dict) -> None:
    """Atomically (temporary file, rename); a cache that cannot be written only costs a later re-read."""
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(entry, f)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError:
        pass


def file_fingerprint(path: str | os.PathLike, cache_dir: str | None = None) -> str:
    """sha256 of the file's content, hashed again only when its size or mtime changed; a marker for a path
    that is not a readable file. Kept under `cache_dir` (default: this machine's cache)."""
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except FileNotFoundError:
        return "missing"
    except OSError:
        return "unreadable"
    if stat.S_ISDIR(st.st_mode):
        return "folder"
    memo_key = (real, st.st_size, st.st_mtime_ns)
    if memo_key in _memo:
        return _memo[memo_key]
    cache = _cache_file(default_cache() if cache_dir is None else cache_dir, real)
    digest = _stored(cache, real, st.st_size, st.st_mtime_ns)
    if digest is None:
        try:
            digest = sha256_file(real)
        except OSError:
            return "unreadable"
        after = os.stat(real)
        if (after.st_size, after.st_mtime_ns) != (st.st_size, st.st_mtime_ns):
            return digest  # written to while read: not stored, read again next time
        _store(cache, {"path": real, "size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": digest})
    _memo[memo_key] = digest
    return digest


def combine(named: Iterable[tuple[str, str]]) -> str:
    """One fingerprint of several (name, fingerprint) pairs, in the order given."""
    blob = json.dumps([list(x) for x in named])
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def files_fingerprint(named: Iterable[tuple[str, str | os.PathLike]], cache_dir: str | None = None) -> str:
    """One fingerprint of (name, path) pairs: the names and their files' content fingerprints."""
    return combine((name, file_fingerprint(p, cache_dir)) for name, p in named)
