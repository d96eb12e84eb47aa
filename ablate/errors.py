"""How an error is told: one line, whatever raised it."""

from __future__ import annotations

import contextlib


def first_line(e: BaseException | str) -> str:
    """The first line of a message (an exception's, or a text), or the exception's type where it is empty."""
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__


def typed_line(e: BaseException) -> str:
    """'<type>: <first line>', at most 500 characters: a failure as a record's reason gives it."""
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0] if lines else ''}"[:500]


@contextlib.contextmanager
def doing(what: str):
    """Say what was being done in an OSError that names no file (a full disk's `[Errno 28] No space left
    on device` comes from a write that knows no name): the innermost `doing` such an error leaves says it,
    naming the folder whose disk is full. An error raised with a message only (errno None) names its
    path itself."""
    try:
        yield
    except OSError as e:
        if e.filename is None and e.errno is not None and not hasattr(e, "ablate_doing"):
            e.ablate_doing = what
        raise


def os_error_line(e: OSError) -> str:
    """An OSError in one line: its file where it names one, else what was being done where that is known."""
    what = getattr(e, "ablate_doing", None)
    return first_line(e) + (f" ({what})" if what else "")


def raised_at(e: BaseException, folders: list) -> str:
    """'<file>:<line>' of the innermost frame of `e`'s traceback inside `folders` (a researcher's code),
    or '' where none is."""
    import traceback
    from pathlib import Path

    roots = [Path(f).resolve() for f in folders]
    for frame in reversed(traceback.extract_tb(e.__traceback__)):
        if any(Path(frame.filename).resolve().is_relative_to(r) for r in roots):
            return f"{frame.filename}:{frame.lineno}"
    return ""
