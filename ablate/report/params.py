"""Parameter counts of every Table 3 row at the paper's scale, beside the paper's params column; a
researcher's row of another model (`model.arch`) is counted from that model built at its own config's size.

Counted by building the model on torch's "meta" device (no memory is allocated) and calling
count_parameters; `closed_form` is the same count as a formula (tests check the two agree), used where
importing torch is not worth it.

The paper's column does not fit one vocabulary: base-family rows fit about 41k embedding rows, big about
35.8k, and big - C5 is 45M in the paper against 50.36M by any count (the project's facts, section 6). So both
numbers are shown and nothing is adjusted.
"""

from __future__ import annotations

from ablate import paper
from ablate.config import ModelConfig, RunConfig, paper_model
from ablate.config.arch import DEFAULT_ARCH, paper_scale_model
from ablate.nn.config import GATED_FFN, TransformerConfig
from ablate.report.render import Table


def closed_form(c: TransformerConfig) -> int:
    """Parameters of ablate.nn.model.Transformer: biased linears; an FFN of two matrices, or three for a
    gated kind (W, V and W2, each with its bias); a norm of 2 d_model parameters per unit (LayerNorm's gain
    and bias) or d_model (RMSNorm's gain); one tied embedding or three untied matrices (source, target,
    output; no output bias); learned positions as one table per stack (sinusoidal, rotary and none have
    no parameters); final norms for pre-LN."""
    d, h, dk, dv, f = c.d_model, c.n_heads, c.d_k, c.d_v, c.d_ff
    attn = d * h * (2 * dk + dv) + h * (2 * dk + dv) + h * dv * d + d
    ffn = (3 * d * f + 2 * f + d) if c.ffn in GATED_FFN else (2 * d * f + f + d)
    norm = 2 * d if c.norm_type == "layer" else d
    enc = attn + ffn + 2 * norm
    dec = 2 * attn + ffn + 3 * norm
    tables = 1 if c.tie_embeddings else 3
    total = c.n_layers * enc + c.n_dec_layers * dec + tables * c.vocab_size * d
    if c.positional == "learned":
        total += 2 * c.max_positions * d
    if c.norm == "pre":
        total += 2 * norm
    return total


def meta_count(c: TransformerConfig) -> int:
    """count_parameters of the model built on the meta device: no weights are allocated."""
    import torch

    from ablate.nn.model import Transformer, count_parameters

    with torch.device("meta"):
        model = Transformer(c)
    return count_parameters(model)


def row_params(model: ModelConfig, vocab: int = 37_000, exact: bool = True) -> int:
    """The row's parameters at the paper's scale; another model's always from the built model (meta)."""
    if model.arch != DEFAULT_ARCH:
        import torch

        from ablate.nn.model import count_parameters

        with torch.device("meta"):
            return count_parameters(paper_scale_model(RunConfig(model=model), vocab))
    c = paper_model(model, vocab)
    return meta_count(c) if exact else closed_form(c)


def params_rows(
    models: dict[str, ModelConfig], source: dict[str, str], vocab: int = 37_000, exact: bool = True
) -> list[dict]:
    t3 = paper.table3()
    out = []
    for row, m in models.items():
        n = row_params(m, vocab, exact)
        pr = t3.get(row) if m.arch == DEFAULT_ARCH else None
        printed = pr.params_m if pr else None
        if m.arch != DEFAULT_ARCH:  # its own keys are not the Transformer's columns
            out.append(_other_row(row, m, n, source))
            continue
        out.append(
            {
                "row": row,
                "group": m.group,
                "n_layers": m.n_layers,
                "d_model": m.d_model,
                "d_ff": m.d_ff,
                "n_heads": m.n_heads,
                "d_k": m.d_k,
                "d_v": m.d_v,
                "positional": m.positional,
                "norm": m.norm,
                "ffn": m.ffn,
                "norm_type": m.norm_type,
                "tie_embeddings": m.tie_embeddings,
                "params": n,
                "params_m": round(n / 1e6, 2),
                "paper_m": printed,
                "paper_printed": bool(pr and pr.params_printed),
                "diff_m": None if printed is None else round(n / 1e6 - printed, 2),
                "config_source": source.get(row, "yaml"),
            }
        )
    return out


def _other_row(row: str, m: ModelConfig, n: int, source: dict[str, str]) -> dict:
    blank = dict.fromkeys(("n_layers", "d_model", "d_ff", "n_heads", "d_k", "d_v"), "")
    return {
        "row": row, "group": m.group, **blank, "positional": m.arch, "norm": "", "args": dict(m.args),
        "params": n, "params_m": round(n / 1e6, 2), "paper_m": None, "paper_printed": False, "diff_m": None,
        "config_source": source.get(row, "yaml"),
    }  # fmt: skip


def _components(r: dict) -> str:
    """The pos cell: the positions, then each component that is not the paper's (pre-LN, RMSNorm, the FFN's
    kind, untied embeddings)."""
    rms = r.get("norm_type") == "rms"
    norm = {(True, False): "pre-LN", (True, True): "pre-RMSNorm", (False, True): "RMSNorm"}
    out = [r["positional"], norm.get((r["norm"] == "pre", rms), "")]
    out.append(f"{r['ffn']} FFN" if r.get("ffn", "relu") != "relu" else "")
    out.append("untied" if r.get("tie_embeddings") is False else "")
    return ", ".join(x for x in out if x)


def params_table(rows: list[dict], vocab: int) -> tuple[Table, list[str]]:
    cols = [
        "row",
        "N",
        "d_model",
        "d_ff",
        "h",
        "d_k",
        "d_v",
        "pos",
        f"ours @V={vocab} (M)",
        "paper (M)",
        "ours - paper (M)",
        "config",
    ]
    body = []
    for r in rows:
        paper_cell = (
            ""
            if r["paper_m"] is None
            else f"{r['paper_m']:g}" + ("" if r["paper_printed"] else " (blank=base)")
        )
        diff = "" if r["diff_m"] is None else f"{r['diff_m']:+.2f}"
        body.append(
            [
                r["row"],
                r["n_layers"],
                r["d_model"],
                r["d_ff"],
                r["n_heads"],
                r["d_k"],
                r["d_v"],
                _components(r),
                f"{r['params_m']:.2f}",
                paper_cell,
                diff,
                "conf/model" if r["config_source"] == "yaml" else "paper (no YAML)",
            ]
        )
    notes = [
        f"Parameters at the paper's scale, one shared vocabulary of V={vocab} tied three ways (source, "
        "target, pre-softmax), no output bias, sinusoidal positions free; counted on torch's meta device.",
        "The paper's column fits no single vocabulary: the base-family rows need about 41k embedding rows, "
        "big about 35.8k, and big - C5 is 45M in the paper against 50.36M by any count (12 layers x the d_ff "
        "change). Both numbers are shown as they are; rows A, D, E print no params in the paper (blank = "
        "base). Learned positions (E) add one max_positions x d_model table per stack.",
        "A row of another model (model.arch, in the pos column) is counted from that model built at its "
        "own config's size (its defaults and the row's model.args).",
    ]
    if any(r.get("ffn", "relu") != "relu" or r.get("norm_type") == "rms" or r.get("tie_embeddings") is False
           for r in rows):  # fmt: skip
        notes.append(
            "The pos column names a row's components where they are not the paper's: a gated FFN has three "
            "matrices (3 d_model d_ff + 2 d_ff + d_model a layer), RMSNorm d_model parameters a norm "
            "(LayerNorm's 2 d_model), untied embeddings three V x d_model matrices (docs/models.md)."
        )
    return Table(cols, body, align="lrrrrrrlrrrl"), notes
