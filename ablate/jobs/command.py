"""Every command the package prints for a researcher to paste: `printed_command` builds it from its argv
words, each shell-quoted (shlex.join), so that pasted into a shell it runs those words and nothing else;
`run_command` is its `python -m ablate.run` with each override checked (`checked_override`).

An override word holds its value in Hydra's grammar (`override`, `hydra_value`): Hydra parses it back to
the value a record gave, whatever the value holds (quotes, `;`, `$(...)`, backticks, a newline, a leading
`-`, spaces, `${...}` read as text). A word that does not parse as Hydra's override, or that begins with
`-` (Hydra's parser would take it as an option), is never printed: CommandError says which and why.
A plain value stays as typed (`model=base,wide`, `train.lr=0.001`): shlex.join quotes only what needs it.
"""

from __future__ import annotations

import functools
import math
import re
import shlex
from collections.abc import Sequence
from typing import Any

_KEY = re.compile(r"[A-Za-z_][\w-]*(?:[./][A-Za-z_][\w-]*)*(?:@[A-Za-z_][\w.-]*)?")
_PREFIXES = ("", "+", "++", "~")


class CommandError(ValueError):
    """A command cannot be printed: a word of it would not run as given (one line: the word and why)."""


def printed_command(module: str, words: Sequence[str]) -> str:
    """`python -m <module> <words>` as a shell line that runs exactly these argv words."""
    return shlex.join(["python", "-m", module, *words])


def run_command(overrides: Sequence[str], multirun: bool = False) -> str:
    """`python -m ablate.run [-m] <overrides>`, each override checked as Hydra reads it (checked_override)."""
    return printed_command("ablate.run", [*(["-m"] if multirun else []), *map(checked_override, overrides)])


def checked_override(word: str) -> str:
    """`word` where it is one override as Hydra parses it (key=value, +key=value, ~key), never an option
    (a word beginning with '-'); else CommandError."""
    if not isinstance(word, str) or not word or word.startswith("-"):
        raise CommandError(f"{word!r} is not an override (an option, or nothing)")
    try:
        _parser().parse_override(word)
    except Exception as e:  # noqa: BLE001 - Hydra's parse error, whichever class
        raise CommandError(f"{word!r} is not an override Hydra parses ({str(e).splitlines()[0]})") from None
    return word


def override(key: str, value: Any, prefix: str = "") -> str:
    """`<prefix><key>=<value>`, the value in Hydra's grammar (hydra_value); CommandError where the key is
    not one Hydra reads as a key (a record's key holding a space, '=', a quote...)."""
    if prefix not in _PREFIXES or not isinstance(key, str) or not _KEY.fullmatch(key):
        raise CommandError(f"{prefix}{key!r} is not a config key an override can name")
    return f"{prefix}{key}={hydra_value(value)}"


def sweep(key: str, values: Sequence[Any]) -> str:
    """`key=v1,v2`: a sweep over `values` (`model=base,wide`), each in Hydra's grammar (hydra_value)."""
    return override(key, values[0]) + "".join("," + hydra_value(v) for v in values[1:])


def hydra_value(v: Any) -> str:
    """`v` (a record's value: None, a bool, a number, a string, a list or a dict of them) as an override
    writes it so that Hydra, and then OmegaConf, read back `v`: a string bare where Hydra reads it so,
    else quoted (Hydra's quoting; a `${` in it kept as text)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, list | tuple):
        return "[" + ",".join(hydra_value(x) for x in v) + "]"
    if isinstance(v, dict):
        if not all(isinstance(k, str) and re.fullmatch(r"[A-Za-z_][\w-]*", k) for k in v):
            raise CommandError(f"{v!r}: a dict whose keys an override cannot name")
        return "{" + ",".join(f"{k}:{hydra_value(x)}" for k, x in v.items()) + "}"
    s = str(v)
    if "${" not in s and _bare(s):
        return s
    return _quoted(s)


def _bare(s: str) -> bool:
    """Whether Hydra reads `s` unquoted as the string `s` (not a number, bool, null, list, sweep...)."""
    if not s or s != s.strip() or not re.fullmatch(r"[\w./:@+-][\w ./:@+-]*", s):
        return False
    try:
        got = _parser().parse_override(f"k={s}").value()
    except Exception:  # noqa: BLE001 - Hydra's parse error
        return False
    return isinstance(got, str) and got == s


def _quoted(s: str) -> str:
    """`s` in Hydra's single quotes: a quote escaped, the backslashes before a quote or the end doubled;
    a `${` escaped for OmegaConf (text, not an interpolation), the backslashes before it doubled."""
    s = re.sub(r"(\\*)\$\{", lambda m: m.group(1) * 2 + "\\${", s)
    s = re.sub(r"(\\*)('|\Z)", lambda m: m.group(1) * 2 + ("\\'" if m.group(2) else ""), s)
    return f"'{s}'"


@functools.cache
def _parser():
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create()


def override_value(word: str) -> Any:
    """The value Hydra reads from an override word (a sweep's as Hydra's sweep object; None for `~key`)."""
    return _parser().parse_override(checked_override(word)).value()
