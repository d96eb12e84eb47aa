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


def paper_delta(row: str, metric: str) -> float | None:
    """The paper's difference row - base for metric 'ppl' or 'bleu' (None for rows not in the paper)."""
    t = table3()
    if row not in t:
        return None
    return round(getattr(t[row], metric) - getattr(t["base"], metric), 6)


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
