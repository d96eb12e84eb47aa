"""A small table model and its Markdown, CSV, LaTeX and JSON renderings; number formatting helpers."""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FORMATS = ("md", "csv", "json", "latex")


@dataclass
class Table:
    columns: list[str]
    rows: list[list[Any]]
    align: str = ""  # one of l/r per column; default left
    title: str = ""
    notes: list[str] = field(default_factory=list)  # printed under the table

    def cells(self) -> list[list[str]]:
        return [["" if v is None else str(v) for v in r] for r in self.rows]

    def records(self) -> list[dict[str, str]]:
        return [dict(zip(self.columns, r, strict=True)) for r in self.cells()]


def md_escape(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def to_markdown(t: Table) -> str:
    al = (t.align or "l" * len(t.columns)).ljust(len(t.columns), "l")
    out = []
    if t.title:
        out += [f"### {t.title}", ""]
    out.append("| " + " | ".join(md_escape(c) for c in t.columns) + " |")
    out.append("|" + "|".join("---:" if a == "r" else "---" for a in al) + "|")
    for r in t.cells():
        out.append("| " + " | ".join(md_escape(c) for c in r) + " |")
    if t.notes:
        out.append("")
        out += t.notes
    return "\n".join(out) + "\n"


def to_csv(t: Table) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(t.columns)
    w.writerows(t.cells())
    return buf.getvalue()


_LATEX_SPECIAL = {
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "\\": r"\textbackslash{}",
    "±": r"$\pm$",
    "Δ": r"$\Delta$",
    "ε": r"$\epsilon$",
    "×": r"$\times$",
    "−": "-",
    "†": r"$\dagger$",
}


def latex_escape(s: str) -> str:
    s = "".join(_LATEX_SPECIAL.get(ch, ch) for ch in s)
    # **bold** from the Markdown cells
    while s.count("**") >= 2:
        s = s.replace("**", r"\textbf{", 1).replace("**", "}", 1)
    return s


def to_latex(t: Table) -> str:
    al = (t.align or "l" * len(t.columns)).ljust(len(t.columns), "l")
    out = [
        r"\begin{tabular}{" + al + "}",
        r"\toprule",
        " & ".join(latex_escape(c) for c in t.columns) + r" \\",
        r"\midrule",
    ]
    out += [" & ".join(latex_escape(c) for c in r) + r" \\" for r in t.cells()]
    out += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(out) + "\n"


def to_json(obj: Any) -> str:
    return json.dumps(obj, indent=2, default=_json_default, allow_nan=False) + "\n"


def _json_default(o: Any) -> Any:
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, Table):
        return {"columns": o.columns, "rows": o.cells()}
    raise TypeError(type(o).__name__)


def clean_nan(obj: Any) -> Any:
    """nan/inf -> None, recursively, for strict JSON."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: clean_nan(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [clean_nan(v) for v in obj]
    return obj


def render(t: Table, fmt: str) -> str:
    if fmt == "md":
        return to_markdown(t)
    if fmt == "csv":
        return to_csv(t)
    if fmt == "latex":
        return to_latex(t)
    if fmt == "json":
        return to_json({"title": t.title, "rows": t.records(), "notes": t.notes})
    raise ValueError(f"unknown format {fmt!r} (one of {', '.join(FORMATS)})")


# ------------------------------------------------------------------------------------------------------------
# Numbers


def fnum(x: float | None, nd: int = 2, sign: bool = False) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ""
    return f"{x:+.{nd}f}" if sign else f"{x:.{nd}f}"


def fp(p: float | None) -> str:
    """p-values: 3 significant digits, '<0.001' below."""
    if p is None or math.isnan(p):
        return ""
    if p < 0.001:
        return "<0.001"
    return f"{p:.3f}"


def fsteps(n: int | None) -> str:
    if n is None:
        return ""
    return f"{n // 1000}K" if n >= 1000 and n % 1000 == 0 else str(n)


def fsi(x: float | None, nd: int = 1) -> str:
    """1.2e15 -> '1.2e15'."""
    if x is None:
        return ""
    if x == 0:
        return "0"
    e = int(math.floor(math.log10(abs(x))))
    m = x / 10**e
    if round(m, nd) >= 10:
        m, e = m / 10, e + 1
    return f"{m:.{nd}f}e{e}"


def fduration(s: float | None) -> str:
    if s is None:
        return ""
    s = float(s)
    if s < 120:
        return f"{s:.0f}s"
    if s < 7200:
        return f"{s / 60:.1f}min"
    return f"{s / 3600:.1f}h"


def raised_at(e: BaseException, whole: bool = False, ours: bool = True) -> str:
    """'<type>: <first line> (at <file>:<line>)': where a researcher's code raised it, the innermost frame
    outside the ablate package and Python's libraries (else, with `ours`, outside the libraries); a report
    names the file alone (`whole`: its path, for a line on the terminal), as it names no machine's
    folder."""
    import sysconfig
    import traceback

    from ablate.errors import typed_line

    if isinstance(e, SyntaxError) and e.filename:
        frames = [(e.filename, e.lineno)]
    else:
        frames = [(f.filename, f.lineno) for f in traceback.extract_tb(e.__traceback__)]
    paths = sysconfig.get_paths()
    libraries = tuple({paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")})
    package = str(Path(__file__).resolve().parents[1])
    theirs = [(f, n) for f, n in frames if not f.startswith(libraries) and not f.startswith("<")]
    own = [(f, n) for f, n in theirs if not str(Path(f).resolve()).startswith(package)]
    own = own or (theirs if ours else [])
    if not own:
        return typed_line(e)
    name, line = own[-1]
    return f"{typed_line(e)} (at {name if whole else Path(name).name}:{line})"
