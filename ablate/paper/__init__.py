"""The paper's numbers (Tables 2, 3 and 4), from the project's own CSV copies beside this file.

The CSVs start with '#' lines naming the source. Nothing here reads outside the package.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ablate.config.rows import TABLE3_GROUPS, TABLE3_ROWS

HERE = Path(__file__).parent

PAPER_ORDER = TABLE3_ROWS
GROUP_ORDER = TABLE3_GROUPS


@dataclass(frozen=True)
class PaperRow:
    """One Table 3 row, blanks filled with base values (params_printed: did the paper print params)."""

    row: str
    group: str
    n_layers: int
    d_model: int
    d_ff: int
    n_heads: int
    d_k: int
    d_v: int
    dropout: float
    label_smoothing: float
    train_steps: int
    ppl: float
    bleu: float
    params_m: float
    positional: str
    params_printed: bool

    def model_dict(self) -> dict:
        """The row in ModelConfig's field names."""
        return {
            "name": self.row,
            "group": self.group,
            "n_layers": self.n_layers,
            "d_model": self.d_model,
            "d_ff": self.d_ff,
            "n_heads": self.n_heads,
            "d_k": self.d_k,
            "d_v": self.d_v,
            "dropout": self.dropout,
            "label_smoothing": self.label_smoothing,
            "train_steps": self.train_steps,
            "positional": self.positional,
        }


def _read_csv(name: str) -> list[dict[str, str]]:
    lines = [ln for ln in (HERE / name).read_text(encoding="utf-8").splitlines() if not ln.startswith("#")]
    return list(csv.DictReader(lines))


def source_note(name: str = "paper_table3.csv") -> str:
    """The '#' header of a CSV, joined into one line."""
    lines = (HERE / name).read_text(encoding="utf-8").splitlines()
    return " ".join(ln.lstrip("# ").strip() for ln in lines if ln.startswith("#"))


@lru_cache(maxsize=1)
def table3() -> dict[str, PaperRow]:
    out = {}
    for r in _read_csv("paper_table3.csv"):
        out[r["row_id"]] = PaperRow(
            row=r["row_id"],
            group=r["group"],
            n_layers=int(r["N"]),
            d_model=int(r["d_model"]),
            d_ff=int(r["d_ff"]),
            n_heads=int(r["h"]),
            d_k=int(r["d_k"]),
            d_v=int(r["d_v"]),
            dropout=float(r["p_drop"]),
            label_smoothing=float(r["eps_ls"]),
            train_steps=int(r["train_steps"]),
            ppl=float(r["ppl_dev"]),
            bleu=float(r["bleu_dev"]),
            params_m=float(r["params_m"]),
            positional=r["positional"],
            params_printed=r["params_printed"] == "1",
        )
    assert tuple(out) == PAPER_ORDER, "paper_table3.csv rows out of the paper's order"
    return out


def _num(s: str) -> float | None:
    return float(s) if s.strip() else None


@lru_cache(maxsize=1)
def table2() -> list[dict]:
    return [
        {
            "model": r["model"],
            "bleu_en_de": _num(r["bleu_en_de"]),
            "bleu_en_fr": _num(r["bleu_en_fr"]),
            "flops_en_de": _num(r["flops_en_de"]),
            "flops_en_fr": _num(r["flops_en_fr"]),
            "ours_row": r["ours_row"] or None,
            "note": r["note"],
        }
        for r in _read_csv("paper_table2.csv")
    ]


@lru_cache(maxsize=1)
def table4() -> list[dict]:
    return [
        {"parser": r["parser"], "training": r["training"], "f1": float(r["f1"]), "ours": r["ours"] == "1"}
        for r in _read_csv("paper_table4.csv")
    ]


# ---- a paper's table of variations beside a task's results (Task.paper_table): the package's Table 3, or a
# researcher's own CSV in the same form (docs/tasks.md)


class PaperError(ValueError):
    """A paper's CSV or claims file that cannot be read: one line naming the file and line."""


@dataclass(frozen=True)
class PaperTable:
    """A paper's rows from a CSV: '#' lines naming its source, then a header with `row_id`, a column
    `<metric name>_dev` per metric it reports (ppl_dev, bleu_dev, cer_dev, ...), and optionally `group`,
    `params_m` and `params_printed` (0 where the paper left the cell blank). A blank figure is none."""

    path: Path
    figures: dict[str, dict[str, float | None]]  # row -> metric name -> the paper's figure, in its order
    decimals: dict[str, int]  # metric name -> the decimals the paper prints
    groups: dict[str, str]
    params: dict[str, float | None]  # row -> parameters (millions) where the paper prints them

    def delta(self, row: str, metric: str) -> float | None:
        """The paper's row minus the paper's base (None where either is missing)."""
        mine, base = self.figures.get(row, {}).get(metric), self.figures.get("base", {}).get(metric)
        return None if mine is None or base is None else round(mine - base, 6)

    def metrics(self) -> list[str]:
        return list(self.decimals)


@lru_cache(maxsize=16)
def paper_table(path: Path) -> PaperTable:
    """The PaperTable of a CSV file (PaperError in one line naming the file and line)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise PaperError(f"{path}: cannot read the paper's table ({e.strerror or e})") from None
    numbered = [(n, ln) for n, ln in enumerate(text.splitlines(), 1) if ln.strip() and not ln.startswith("#")]
    if not numbered:
        raise PaperError(f"{path}: no header line (row_id, <metric>_dev, ...)")
    header = next(csv.reader([numbered[0][1]]))
    if "row_id" not in header or not any(h.endswith("_dev") for h in header):
        raise PaperError(f"{path} line {numbered[0][0]}: the header needs row_id and a <metric>_dev column")
    metrics = [h.removesuffix("_dev") for h in header if h.endswith("_dev")]
    figures, decimals, groups, params = {}, dict.fromkeys(metrics, 0), {}, {}
    for n, line in numbered[1:]:
        r = dict(zip(header, next(csv.reader([line])), strict=False))
        row = r.get("row_id", "").strip()
        if not row or row in figures:
            raise PaperError(f"{path} line {n}: {'a repeated' if row else 'no'} row_id {row!r}")
        try:
            figures[row] = {m: _num(r.get(f"{m}_dev") or "") for m in metrics}
            printed = r.get("params_printed", "1") != "0"
            params[row] = _num(r.get("params_m") or "") if printed else None
        except ValueError as e:
            raise PaperError(f"{path} line {n}: not a number ({e})") from None
        for m in metrics:
            cell = (r.get(f"{m}_dev") or "").strip()
            decimals[m] = max(decimals[m], len(cell.partition(".")[2]))
        if r.get("group"):
            groups[row] = r["group"]
    return PaperTable(Path(path), figures, decimals, groups, params)
