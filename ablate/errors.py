"""How an error is told: one line, whatever raised it."""

from __future__ import annotations


def first_line(e: BaseException | str) -> str:
    """The first line of a message (an exception's, or a text), or the exception's type where it is empty."""
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__


def typed_line(e: BaseException) -> str:
    """'<type>: <first line>', at most 500 characters: a failure as a record's reason gives it."""
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0] if lines else ''}"[:500]
