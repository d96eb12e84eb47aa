"""The Table 3 report end to end on fixed records: golden Markdown, other formats, missing-command, stale and
corrupted records, plots, Tables 2 and 4."""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest

from ablate.records import staleness
from ablate.records.folder import run_lock
from ablate.report import stats
from ablate.report.__main__ import main
from ablate.report.stats import corpus_bleu

GOLDEN = Path(__file__).parent / "golden" / "table3.md"
TODAY = "c0dec0dec0de"
N_SENT = 40

ROW_YAML = {
    "base": "name: base\ngroup: base\n",
    "A1": "defaults:\n  - base\n  - _self_\n\nname: A1\ngroup: A\nn_heads: 1\nd_k: 512\nd_v: 512\n",
    "A2": "defaults:\n  - base\n  - _self_\n\nname: A2\ngroup: A\nn_heads: 4\nd_k: 128\nd_v: 128\n",
    "B1": "defaults:\n  - base\n  - _self_\n\nname: B1\ngroup: B\nd_k: 16\n",
    "C1": "defaults:\n  - base\n  - _self_\n\nname: C1\ngroup: C\nn_layers: 2\n",
    "D3": "defaults:\n  - base\n  - _self_\n\nname: D3\ngroup: D\nlabel_smoothing: 0.0\n",
    "E": "defaults:\n  - base\n  - _self_\n\nname: E\ngroup: E\npositional: learned\n",
    "big": (
        "defaults:\n  - base\n  - _self_\n\nname: big\ngroup: big\nd_model: 1024\nd_ff: 4096\nn_heads: 16\n"
        "dropout: 0.3\ntrain_steps: 300000\n"
    ),
    "pre_ln": "defaults:\n  - base\n  - _self_\n\nname: pre_ln\ngroup: extra\nnorm: pre\n",
}

# row -> (quality shift for BLEU's n-gram match rate, NLL shift per token)
QUALITY = {
    "base": (0.0, 0.0),
    "A1": (-0.06, 0.08),
    "A2": (0.0, 0.0),
    "B1": (-0.02, 0.03),
    "D3": (0.05, -0.05),
    "E": (0.0, 0.01),
    "pre_ln": (0.01, -0.01),
    "big": (0.08, -0.1),
}
BASE_MODEL = {
    "name": "base",
    "group": "base",
    "n_layers": 6,
    "d_model": 512,
    "d_ff": 2048,
    "n_heads": 8,
    "d_k": 64,
    "d_v": 64,
    "dropout": 0.1,
    "label_smoothing": 0.1,
    "train_steps": 100000,
    "positional": "sinusoidal",
    "norm": "post",
    "attn_dropout": 0.0,
    "relu_dropout": 0.0,
    "max_positions": 1024,
}
ROW_MODEL = {
    "A1": {"n_heads": 1, "d_k": 512, "d_v": 512},
    "A2": {"n_heads": 4, "d_k": 128, "d_v": 128},
    "B1": {"d_k": 16},
    "C1": {"n_layers": 2},
    "D3": {"label_smoothing": 0.0},
    "E": {"positional": "learned"},
    "pre_ln": {"norm": "pre"},
    "big": {"d_model": 1024, "d_ff": 4096, "n_heads": 16, "dropout": 0.3, "train_steps": 300000},
}
PAPER_PARAMS = {
    "base": 63082496,
    "A1": 63082496,
    "A2": 63082496,
    "B1": 55991296,
    "C1": 33656832,
    "D3": 63082496,
    "E": 64131072,
    "pre_ln": 63084544,
    "big": 214245376,
}


@pytest.fixture(autouse=True)
def _a_users_shell(monkeypatch):
    """These tests read and name results/ in their own folder, as a user's shell without ABLATE_RESULTS
    does (tests/conftest.py sets it for every command the other tests run)."""
    monkeypatch.delenv("ABLATE_RESULTS", raising=False)


def _sentences(row: str, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1000 * seed + sum(map(ord, row)))
    ref_rng = np.random.default_rng(7)  # the dev set: same references for every run
    ref_len = ref_rng.integers(8, 30, N_SENT)
    dq, dnll = QUALITY.get(row, (0.0, 0.0))
    hyp_len = np.maximum(3, ref_len + rng.integers(-3, 3, N_SENT))
    stats = np.zeros((N_SENT, 10), dtype=np.int64)
    stats[:, 0], stats[:, 1] = hyp_len, ref_len
    for n in range(1, 5):
        total = np.maximum(hyp_len - n + 1, 0)
        p = np.clip(0.62 * 0.62 ** (n - 1) + dq + rng.normal(0, 0.02), 0.01, 0.99)
        stats[:, 5 + n] = total
        stats[:, 1 + n] = rng.binomial(total, p)
    tokens = ref_len + 1
    nll = tokens * (1.6 + dnll + rng.normal(0, 0.05, N_SENT))
    return {"nll": nll.astype(np.float64), "tokens": tokens.astype(np.int64), "bleu_stats": stats}


def _write_run(
    results: Path,
    row: str,
    seed: int,
    status: str = "finished",
    reason: str | None = None,
    scale: str = "tiny",
    code: str = TODAY,
    model_over: dict | None = None,
    npz: bool = True,
    curves: bool = True,
    task: str = "translation",
    extra_metrics: dict | None = None,
) -> Path:
    model = dict(
        BASE_MODEL,
        name=row,
        group={"pre_ln": "extra"}.get(row, row.rstrip("0123456789") or row),
        **ROW_MODEL.get(row, {}),
        **(model_over or {}),
    )
    scale_cfg = {
        "tiny": {"name": "tiny", "width": 0.25, "depth": 0.5, "steps": 0.004},
        "paper": {"name": "paper", "width": 1.0, "depth": 1.0, "steps": 1.0},
    }[scale]
    run_id = f"{row}-{hashlib.sha256((row + scale).encode()).hexdigest()[:12]}-s{seed}"
    folder = results / row / run_id
    folder.mkdir(parents=True)
    rec = {
        "schema_version": 1,
        "run_id": run_id,
        "row": row,
        "group": model["group"],
        "seed": seed,
        "status": status,
        "reason": reason,
        "task": task,
        "sweep": "golden",
        "config": {
            "model": model,
            "scale": scale_cfg,
            "seed": seed,
            "data": {"name": "builtin", "src_lang": "en", "tgt_lang": "de", "vocab_size": 8000},
            "train": {"max_tokens": 4096, "batch_tokens": 2000, "warmup_steps": 4000},
            "decode": {"beam": 4},
            "trainer": {"accelerator": "cpu"},
        },
        "model_effective": {
            "n_layers": 3,
            "d_model": 128,
            "d_ff": 512,
            "n_heads": 8,
            "d_k": 16,
            "d_v": 16,
            "positional": model["positional"],
            "norm": model["norm"],
        },
        "params": PAPER_PARAMS.get(row, 63082496) // 40,
        "params_paper_scale": PAPER_PARAMS.get(row),
        "code_hash": code,
        "started": f"2025-01-0{seed}T10:00:00+0000",
        "files": {"curves": "curves.jsonl", "dev_sentences": "dev_sentences.npz"},
    }
    if status == "finished":
        s = _sentences(row, seed)
        bleu = float(corpus_bleu(s["bleu_stats"].sum(0)))
        nll, tok = float(s["nll"].sum()), int(s["tokens"].sum())
        rec["metrics"] = {
            "dev_ppl": math.exp(nll / tok),
            "dev_bleu": bleu,
            "dev_nll_sum": nll,
            "dev_tokens": tok,
            "train_loss": 2.0,
            "dev_bleu_signature": "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0",
            **(extra_metrics or {}),
        }
        rec.update(
            {
                "steps": 400,
                "target_tokens": 800000,
                "wall_time_s": 180.0 + seed,
                "train_time_s": 150.0,
                "tokens_per_s": 5000.0 + 10 * seed,
                "flops_estimate": 1.2e15,
                "device": "cpu",
                "finished": f"2025-01-0{seed}T11:00:00+0000",
            }
        )
        if npz:
            np.savez(folder / "dev_sentences.npz", **s)
        if curves:
            final = rec["metrics"]["dev_ppl"]
            lines = [
                {"step": st, "train_loss": 3.0 - st / 400, "dev_ppl": final * (1 + 2.0 * (400 - st) / 400)}
                for st in (100, 200, 300, 400)
            ]
            (folder / "curves.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    elif status == "failed":
        rec["reason"] = reason
    (folder / "record.json").write_text(json.dumps(rec, indent=1))
    return folder


def make_fixture(root: Path) -> None:
    conf = root / "conf" / "model"
    conf.mkdir(parents=True)
    for row, text in ROW_YAML.items():
        (conf / f"{row}.yaml").write_text(text)
    res = root / "results"
    for s in (1, 2, 3):
        _write_run(res, "base", s)
        _write_run(res, "A1", s, model_over={"dropout": 0.2} if s == 3 else None)  # s3: config changed since
        _write_run(res, "D3", s)
    _write_run(res, "B1", 1)
    _write_run(res, "B1", 2)
    _write_run(res, "B1", 3, status="failed", reason="CUDA out of memory\nTraceback ...")
    c1 = _write_run(res, "C1", 1, status="running")  # 250 of its 400 steps (100K x 0.004) done
    (c1 / "curves.jsonl").write_text(
        "".join(json.dumps({"step": s, "train_loss": 3.0}) + "\n" for s in (10, 250))
    )
    _write_run(res, "A2", 4)  # seeds the base does not have: Welch
    _write_run(res, "A2", 5)
    _write_run(res, "E", 1, code="0ldc0de0ldc0")  # one seed, stale code
    _write_run(res, "pre_ln", 1)
    _write_run(res, "pre_ln", 2)
    _write_run(res, "base", 1, scale="paper")  # another scale: excluded
    bad = res / "A3" / "A3-000000000000-s1"
    bad.mkdir(parents=True)
    (bad / "record.json").write_text("{not json")


@pytest.fixture
def fixture_dir(tmp_path, monkeypatch):
    make_fixture(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(staleness, "code_hash", lambda task: TODAY)
    running = next((tmp_path / "results" / "C1").glob("*-s1"))
    with run_lock(running) as held:  # C1 s1 is being run by a live process (this one)
        assert held
        yield tmp_path


def test_a_running_record_whose_process_is_gone_is_interrupted(tmp_path, monkeypatch, capsys):
    """A record left `running` by a killed process (nobody holds its run's lock) does not hide its cell:
    the table says interrupted and --missing-command runs it again (the run resumes from its checkpoint)."""
    make_fixture(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(staleness, "code_hash", lambda task: TODAY)
    main(["table3", *ARGS, "--no-plots"])
    c1 = [ln for ln in (tmp_path / "reports" / "table3.md").read_text().splitlines() if "| (C) C1 |" in ln]
    assert "interrupted s1 (step 250 of 400) (its process is gone; rerun to resume) |" in c1[0]
    capsys.readouterr()
    assert main(["table3", *ARGS, "--missing-command", "--rows", "C1", "--seeds", "1"]) == 0
    assert capsys.readouterr().out.strip().startswith("python -m ablate.run -m model=C1 seed=1 ")


ARGS = [
    "--results",
    "results",
    "--conf",
    "conf/model",
    "--out",
    "reports/table3.md",
    "--quiet",
    "--n-boot",
    "400",
]


def test_golden_table3(fixture_dir):
    assert main(["table3", *ARGS, "--plots", "reports/plots"]) == 0
    text = (fixture_dir / "reports" / "table3.md").read_text()
    if os.environ.get("ABLATE_REGEN_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()
    pngs = sorted(p.name for p in (fixture_dir / "reports" / "plots").glob("*.png"))
    assert {"forest_bleu.png", "forest_ppl.png", "ppl_curves_A.png"} <= set(pngs)
    for name in pngs:  # linked with paths relative to the Markdown
        assert f"](plots/{name})" in text


def test_the_summary_says_what_each_row_varies_and_reads_it_as_the_agreement_line_counts(fixture_dir):
    main(["table3", *ARGS, "--no-plots"])
    text = (fixture_dir / "reports" / "table3.md").read_text()
    block = text.split("## Summary\n")[1].split("## Table\n")[0]
    rows = [[c.strip() for c in ln.split("|")[1:-1]] for ln in block.splitlines() if ln.startswith("| ")]
    cells = {r[0]: r for r in rows[1:]}  # after the header
    assert cells["A1"][1] == "h 1, d_k 512, d_v 512" and cells["E"][1] == "learned positions"
    assert cells["big"][1] == "d_model 1024, d_ff 4096, h 16, P_drop 0.3, train steps 300K"
    assert cells["base"][1] == "" and cells["pre_ln"][1] == "norm=pre"
    reading = {row: r[5] for row, r in cells.items() if r[5]}
    # the agreement line: 4 of 15 agree (A1, A2, B1, D3), 2 of them with both intervals (A1, D3); E's paper
    # Δ is 0 and pre_ln has none, so neither is read
    assert reading == {
        "A1": "agrees, both intervals",
        "A2": "agrees",
        "B1": "agrees",
        "D3": "agrees, both intervals",
    }
    assert "4 of the 15 rows" in text and "excluding zero (A1, D3)" in text


def test_corrupted_record_is_a_warning_naming_the_file(fixture_dir, capsys):
    assert main(["table3", *ARGS, "--no-plots"]) == 0
    err = capsys.readouterr().err
    assert "results/A3/A3-000000000000-s1/record.json" in err and "unreadable" in err


def test_rows_are_never_dropped(fixture_dir):
    main(["table3", *ARGS, "--no-plots"])
    text = (fixture_dir / "reports" / "table3.md").read_text().split("## Table\n")[1]  # after the summary
    main_rows = [ln for ln in text.splitlines() if ln.startswith("| ") and "seeds / status" not in ln]
    labels = [ln.split(" | ")[0][2:] for ln in main_rows[:21]]
    assert labels[0] == "base" and labels[19] == "big" and labels[20] == "pre_ln"
    assert "not run" in main_rows[3] and "(A) A3" in main_rows[3]  # A3: only a corrupted record
    assert "| running (step 250 of 400) |" in main_rows[7]  # C1
    assert "failed s3: CUDA out of memory |" in main_rows[5]  # B1


def test_json_and_csv_and_latex(fixture_dir):
    assert (
        main(["table3", *ARGS[:4], "--out", "t.json", "--format", "json", "--quiet", "--n-boot", "200"]) == 0
    )
    d = json.loads(Path("t.json").read_text())
    rows = {r["row"]: r for r in d["rows"]}
    a1 = rows["A1"]["bleu"]["vs_reference"]
    assert a1["ttest"]["kind"] == "paired t" and a1["direction"] == "agree"
    assert rows["A2"]["bleu"]["vs_reference"]["ttest"]["kind"] == "Welch t"
    assert rows["E"]["bleu"]["vs_reference"]["bootstrap"]["kind"] == "paired bootstrap over sentences"
    assert rows["D3"]["bleu"]["vs_reference"]["direction"] == "opposite"
    assert rows["E"]["stale"] == {"1": ["code 0ldc0de0ldc0 != c0dec0dec0de (the record names no revision)"]}
    assert main(["table3", *ARGS[:4], "--out", "t.csv", "--format", "csv", "--quiet", "--n-boot", "50"]) == 0
    assert Path("t.csv").read_text().splitlines()[0].startswith("row,N,d_model")
    assert (
        main(["table3", *ARGS[:4], "--out", "t.tex", "--format", "latex", "--quiet", "--n-boot", "50"]) == 0
    )
    assert "\\begin{tabular}" in Path("t.tex").read_text()


def test_missing_command(fixture_dir, capsys):
    assert main(["table3", *ARGS, "--missing-command", "--rows", "base,A1,A3,B1,C1,E"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    # Seeds seen: 1..5. Missing cells grouped by seed set; B1 s3 failed; C1 s1 running (left alone);
    # A1 s3 (config changed) and E s1 (old code) are stale: rerun with resume=false.
    # the records name no recipe (the default, cpu, then composes): each value that differs from it is given,
    # the schedule's too (the records' warmup 4000 and, as they say no lr_scale, the paper's 1.0: not the
    # cpu recipe's 100 and 0.3)
    over = (
        "scale=tiny data.vocab_size=8000 train.max_tokens=4096 train.batch_tokens=2000 "
        "trainer.accelerator=cpu schedule.warmup_steps=4000 schedule.scale=1.0"
    )
    assert out == [
        f"python -m ablate.run -m model=base,A1 seed=4,5 {over}",
        f"python -m ablate.run -m model=A3 seed=1,2,3,4,5 {over}",
        f"python -m ablate.run -m model=B1 seed=3,4,5 {over}",
        f"python -m ablate.run -m model=C1,E seed=2,3,4,5 {over}",
        f"python -m ablate.run -m model=A1 seed=3 {over} resume=false",
        f"python -m ablate.run -m model=E seed=1 {over} resume=false",
    ]
    assert main(["table3", *ARGS, "--missing-command", "--rows", "base,D3", "--seeds", "1,2,3"]) == 0
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines()[-1].startswith("nothing to run")


def test_tables_2_and_4(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(staleness, "code_hash", lambda task: TODAY)
    res = tmp_path / "results"
    _write_run(res, "base", 1, extra_metrics={"test_bleu": 26.1, "test_bleu_tok": 26.9})
    _write_run(res, "base", 2, extra_metrics={"test_bleu": 26.5, "test_bleu_tok": 27.1})
    parse4 = _write_run(
        res, "parse4", 1, task="parsing",
        extra_metrics={"f1": 90.0, "test_f1": 91.0, "test_n_error": 2, "test_n_repaired": 5, "test_n": 118,
                       "test_f1_flat": 9.147, "test_f1_lo": 88.5, "test_f1_hi": 93.2},
    )  # fmt: skip
    rec = json.loads((parse4 / "record.json").read_text())  # trained with constituent pairs
    rec["config"]["data"]["constituent_pairs"] = True
    rec["config"]["decode"] = {"beam": 21, "well_formed": True}
    rec["data"] = {"splits": {"train": {"pairs": 59006}}}
    (parse4 / "record.json").write_text(json.dumps(rec))
    extra = {"f1": 89.5, "n_repaired": 3, "n": 127, "f1_flat": 9.95}
    _write_run(res, "parse5", 1, task="parsing", extra_metrics=extra)  # not yet decoded on 23
    assert main(["table2", "--results", "results", "--out", "t2.md", "--quiet"]) == 0
    t2 = Path("t2.md").read_text()
    assert "| ours: base | 26.30 ± 0.28 |  | 27.00 ± 0.14 | 1.2e15 | 27.3 | -1.00 |" in t2
    assert "| Transformer (big) | 28.4 | 41.8 |" in t2
    assert main(["table4", "--results", "results", "--out", "t4.md", "--quiet"]) == 0
    t4 = Path("t4.md").read_text()
    assert (
        "| ours: parse4 | WSJ only discriminative (data=builtin) |  | 91.00 | [88.50, 93.20] |  |  | 5/118 "
        "| 9.15 |" in t4
    )  # the paper's column left empty: its WSJ 23 is not our test split, and no difference is computed
    assert "| Transformer (4 layers) | WSJ only discriminative | 91.3 |  |" in t4 and "Δ paper" not in t4
    assert "our test split: the test section (23) of the treebank at data.name=builtin, 118 sentences" in t4
    assert "EVALB errors 2, over 200 brackets 0" in t4
    assert (
        "| ours: parse5 | WSJ only discriminative (data=builtin) |  | 89.50 (dev) |  |  |  | 3/127 | 9.95 |"
        in t4
    )
    # the runs it chose, named, with what decides their F1 beyond the row
    assert "ours: parse4 (test split): parse4-" in t4 and "ours: parse5 (dev split): parse5-" in t4
    assert "beam 4, tgt_lang" in t4  # parse5: a free search
    assert "beam 21, well-formed search, tgt_lang" in t4  # parse4's: no output it writes needs a repair
    assert "59,006 training pairs (trees and their constituents)" in t4  # not 59,006 trees
    assert "| Dyer et al. (2016) [8] | generative | 93.3 |" in t4


def test_wandb_source_reads_offline_run_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(staleness, "code_hash", lambda task: TODAY)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    folder = _write_run(tmp_path / "wandb", "base", 1)
    files = tmp_path / "wandb" / "offline-run-20250101_000000-abc" / "files"
    files.parent.mkdir(parents=True)
    folder.rename(files)
    assert (
        main(["table3", "--source", "wandb", "--out", "w.md", "--no-plots", "--quiet", "--n-boot", "20"]) == 0
    )
    assert "1 run(s) read from `wandb`" in Path("w.md").read_text()


@pytest.mark.slow
def test_wandb_logging_offline(fixture_dir, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_DIR", str(fixture_dir))
    assert main(["table3", *ARGS, "--plots", "reports/plots", "--wandb", "--wandb-group", "golden"]) == 0
    assert list((fixture_dir / "wandb").glob("offline-run-*"))


def test_test_bleu_column_with_its_difference_to_base(tmp_path, monkeypatch, capsys):
    conf = tmp_path / "conf" / "model"
    conf.mkdir(parents=True)
    for row, text in ROW_YAML.items():
        (conf / f"{row}.yaml").write_text(text)
    res = tmp_path / "results"
    for row in ("base", "D3"):
        for seed, bleu in ((1, 30.0), (2, 31.0)):
            _write_run(res, row, seed, extra_metrics={"test_bleu": bleu + (2.5 if row == "D3" else 0.0)})
    _write_run(res, "A1", 1)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(staleness, "code_hash", lambda task: TODAY)
    assert main(["--out", "-", "--no-plots", "--conf", "conf/model"]) == 0
    out = capsys.readouterr().out.splitlines()
    head = next(i for i, ln in enumerate(out) if "| BLEU test |" in ln)  # the main table
    cols = [c.strip() for c in out[head].split("|")[1:-1]]
    at = cols.index("BLEU test")
    rows = [[c.strip() for c in ln.split("|")[1:-1]] for ln in out[head + 2 :] if ln.startswith("| ")]
    cells = {r[0]: r for r in rows if len(r) == len(cols)}
    # base: 30 and 31 -> 30.50 ± 0.71 (sample sd); D3: 32.5 and 33.5 -> +2.50
    assert cells["base"][at : at + 2] == ["30.50 ± 0.71", ""]
    assert cells["(D) D3"][at : at + 2] == ["33.00 ± 0.71", "+2.50"]
    assert cells["(A) A1"][at : at + 2] == ["", ""]  # no test BLEU in its record


@pytest.mark.parametrize("recipe,scale", [("paper", "paper"), ("multi30k_table3", "paper"), ("cpu", "cpu")])
def test_a_missing_command_composes_the_record_s_recipe_and_scale(recipe, scale):
    # the defaults are recipe=cpu scale=cpu: a command that leaves either out would run another preset
    from hydra import compose, initialize_config_dir

    from ablate.config import register_configs
    from ablate.report.collect import Run
    from ablate.report.missing import run_overrides

    register_configs()
    root = Path(__file__).resolve().parents[1]
    with initialize_config_dir(str(root / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=[f"recipe={recipe}", f"scale={scale}", "logger=none"])
        keys = ("recipe", "scale", "base", "data", "train", "decode", "trainer")
        rec = {"config": {k: cfg[k] for k in keys}}
        again = compose("config", overrides=[*run_overrides(Run(rec)), "logger=none"])
    assert (again.recipe, again.scale.name) == (recipe, scale)
    assert again.base == cfg.base and again.train == cfg.train


def test_fit_finds_where_the_dev_curve_bottomed_and_the_late_training_loss(tmp_path):
    from ablate.report.analysis import _fit
    from ablate.report.collect import Run

    lines = [{"step": s, "train_loss": s / 100} for s in range(10, 1001, 10)]  # last 10%: steps 910..1000
    lines += [{"step": 200, "dev_ppl": 9.0}, {"step": 400, "dev_ppl": 7.5}, {"step": 1000, "dev_ppl": 8.0}]
    (tmp_path / "curves.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    f = _fit(Run({"_path": str(tmp_path / "record.json"), "metrics": {"dev_ppl": 8.0}}))
    assert f.train_loss == pytest.approx(9.55)  # mean of 9.1, 9.2, ..., 10.0
    assert (f.end_ppl, f.best_ppl, f.best_steps, f.last_step) == (8.0, 7.5, [400], 1000)
    assert f.late == pytest.approx(8.0 / 7.5 - 1)  # the last dev point at or before step 900 is step 400's
    assert f.overfits  # 8.0 is 6.7% above the best


def test_each_row_against_the_paper_gets_the_evidence_of_its_curves(tmp_path, monkeypatch, capsys):
    # C1 (paper: PPL up by 1.19) and D3 (paper: down by 0.25) measured the other way round; A1 agrees
    monkeypatch.setitem(QUALITY, "C1", (0.0, -0.1))
    monkeypatch.setitem(QUALITY, "D3", (0.0, +0.1))
    conf = tmp_path / "conf" / "model"
    conf.mkdir(parents=True)
    for row, text in ROW_YAML.items():
        (conf / f"{row}.yaml").write_text(text)
    # row -> (train loss over the last 10%, dev PPL at steps 500, 900, 1000 as multiples of the final one)
    shapes = {"base": (2.0, 1.2, 1.03), "C1": (2.1, 0.95, 0.97), "D3": (1.5, 1.1, 1.005)}
    shapes["A1"] = shapes["base"]
    for row, (train, at500, at900) in shapes.items():
        for seed in (1, 2):
            folder = _write_run(tmp_path / "results", row, seed)
            final = json.loads((folder / "record.json").read_text())["metrics"]["dev_ppl"]
            lines = [{"step": s, "train_loss": train} for s in range(910, 1001, 10)]
            lines += [{"step": s, "dev_ppl": final * f} for s, f in ((500, at500), (900, at900), (1000, 1.0))]
            (folder / "curves.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(staleness, "code_hash", lambda task: TODAY)
    assert main(["--out", "-", "--no-plots", "--conf", "conf/model", "--n-boot", "50"]) == 0
    out = capsys.readouterr().out
    evidence = {ln.split("**")[1]: ln for ln in out.splitlines() if ln.startswith("- **")}
    assert sorted(evidence) == ["C1", "D3"]
    c1, d3 = evidence["C1"], evidence["D3"]
    assert "paper Δ +1.19, 2/2 seeds" in c1 and "paper Δ -0.25, 2/2 seeds" in d3
    # C1: lower dev PPL with a higher training loss; its curve bottomed at step 500 and ended 1/0.95 above
    assert "training loss over the last 10% of steps 2.100 against base's 2.000" in c1
    assert "moves against dev PPL: a difference of generalisation" in c1
    assert "best dev PPL at step 500, 500 of 1000, ending +5.3% above it: it overfits" in c1
    # D3 trains at another eps_ls; it ends level (-0.5%) where base still falls (1/1.03 - 1 = -2.9%)
    assert "its training loss does not compare with base's (another eps_ls)" in d3
    assert "level at the end (-0.5% over the last 10% of steps against base's -2.9%)" in d3
    # C1 lies below base and D3 above it at steps 500, 900 and 1000 of both seeds
    assert "below base's dev curve at 6 of 6 evaluations in the second half of training" in c1
    assert "above base's dev curve at 6 of 6 evaluations in the second half of training" in d3


def test_side_of_base_counts_the_evaluations_where_a_row_lies_on_its_final_side(tmp_path):
    from ablate.report.analysis import Compare, RowResult, gap_to_base, side_of_base
    from ablate.report.collect import Run

    def run(name: str, dev: dict[int, float]) -> Run:
        (tmp_path / name).mkdir()
        lines = "".join(json.dumps({"step": s, "dev_ppl": p}) + "\n" for s, p in dev.items())
        (tmp_path / name / "curves.jsonl").write_text(lines)
        return Run({"_path": str(tmp_path / name / "record.json")})

    # seed 1: steps 500..1000 compare (250 is in the first half); the row is below base at 500, 750 and
    # 1000 and above at 600; step 900 exists in the row's curve only. Seed 2 has no base run.
    base = {1: run("b1", {250: 9.0, 500: 8.0, 600: 7.0, 750: 6.5, 1000: 6.0})}
    mine = {
        1: run("x1", {250: 10.0, 500: 7.9, 600: 7.5, 750: 6.4, 900: 5.0, 1000: 5.8}),
        2: run("x2", {500: 1.0, 1000: 1.0}),
    }
    base = RowResult("base", "", {}, runs=base, finished=base, values={})
    row = RowResult("X", "", {}, runs=mine, finished=mine, values={}, cmp={"ppl": Compare("ppl", diff=-0.2)})
    gaps = gap_to_base(row, base)  # what the curve figures' right panel draws
    assert list(gaps) == [1] and [s for s, _ in gaps[1]] == [500, 600, 750, 1000]
    assert [g for _, g in gaps[1]] == pytest.approx([-0.1, 0.5, -0.1, -0.2])
    assert side_of_base(row, base) == (3, 4)
    row.cmp["ppl"].diff = +0.2  # a row ending above base: the same evaluations read the other way
    assert side_of_base(row, base) == (1, 4)


def test_a_resumed_run_s_cost_counts_every_process_by_its_training_clock(tmp_path, monkeypatch, capsys):
    # the record times its last process only (150 s); the run's clock, restored from its checkpoint, read
    # 400 s at its last step; 800,000 target tokens over 400 s
    folder = _write_run(tmp_path / "results", "base", 1)
    rows = [{"step": 10, "time_s": 12.5}, {"step": 390, "time_s": 400.0}, {"step": 400, "dev_ppl": 5.0}]
    (folder / "curves.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(staleness, "code_hash", lambda task: TODAY)
    assert main(["--format", "json", "--out", "-", "--n-boot", "20"]) == 0
    base = next(r for r in json.loads(capsys.readouterr().out)["rows"] if r["row"] == "base")
    assert base["cost"]["train_time_s"] == 400.0 and base["cost"]["tokens_per_s"] == 2000.0
    (folder / "curves.jsonl").write_text("")  # no clock readings: the record's own figures
    assert main(["--format", "json", "--out", "-", "--n-boot", "20"]) == 0
    base = next(r for r in json.loads(capsys.readouterr().out)["rows"] if r["row"] == "base")
    assert base["cost"]["train_time_s"] == 150.0 and base["cost"]["tokens_per_s"] == 800000 / 150


def test_the_cost_table_names_the_cpu_each_row_ran_on(tmp_path, monkeypatch, capsys):
    # speeds compare only on one CPU: each record's machine goes beside its device, one entry per CPU seen
    cpus = ("AMD EPYC (family 23, model 1)", "Intel Xeon (family 6, model 167)")
    for seed, cpu in enumerate(cpus, start=1):
        folder = _write_run(tmp_path / "results", "base", seed)
        rec = json.loads((folder / "record.json").read_text())
        rec["machine"] = {"cpu": cpu, "cpus": 2}
        (folder / "record.json").write_text(json.dumps(rec))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(staleness, "code_hash", lambda task: TODAY)
    assert main(["--out", "-", "--no-plots", "--n-boot", "20"]) == 0
    cost = capsys.readouterr().out.split("### Cost")[1]
    (line,) = [ln for ln in cost.splitlines() if ln.startswith("| base ")]
    assert line.endswith(f"| cpu, {cpus[0]}; cpu, {cpus[1]} |")


def test_an_evaluation_is_a_fact_of_its_own_and_a_cell_says_which_figure_it_shows(tmp_path, monkeypatch):
    """`ablate.evaluate --split dev --average 2` never replaces a run's own dev figure: the cell shows the
    run's own unless --average 2 asks for that protocol; two protocols stay readable side by side, a
    second evaluation under one protocol is kept beside the first, and Table 2 keeps each its own line."""
    from ablate.records import evaluations
    from ablate.records.evaluations import Protocol

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(staleness, "code_hash", lambda task: TODAY)
    res = tmp_path / "results"
    runs = {s: _write_run(res, "base", s) for s in (1, 2)}
    own = {s: json.loads((f / "record.json").read_text())["metrics"]["dev_bleu"] for s, f in runs.items()}
    for s, f in runs.items():
        rid = f.name
        evaluations.write(f, rid, Protocol("dev", 2, None, (300, 400)), {"dev_bleu": 40.0 + s}, {})
        evaluations.write(f, rid, Protocol("test", 2, None, (300, 400)), {"test_bleu": 30.0 + s}, {})
        evaluations.write(f, rid, Protocol("test", 0, None, (400,)), {"test_bleu": 20.0 + s}, {})
    again = evaluations.write(runs[1], runs[1].name, Protocol("dev", 2), {"dev_bleu": 43.0}, {})
    assert again.name == "dev.avg2-2.json" and (runs[1] / "evaluations" / "dev.avg2.json").is_file()
    kept = evaluations.read(runs[1], runs[1].name)
    assert [(e.protocol.tag, e.metrics) for e in kept if e.protocol.split == "dev"] == [
        ("dev.avg2", {"dev_bleu": 41.0}),
        ("dev.avg2", {"dev_bleu": 43.0}),
    ]

    def base_bleu(text: str) -> str:
        return next(line for line in text.splitlines() if line.startswith("| base |")).split("|")[7]

    assert main(["--results", "results", "--out", "own.md", "--no-plots", "--quiet"]) == 0
    mean = (own[1] + own[2]) / 2
    assert f"{mean:.2f}" in base_bleu(Path("own.md").read_text())
    assert "Dev figures:" not in Path("own.md").read_text()
    assert main(["--results", "results", "--out", "avg.md", "--no-plots", "--quiet", "--average", "2"]) == 0
    avg = Path("avg.md").read_text()
    assert "42.50 ± 0.71" in base_bleu(avg)  # seed 1's newest (43.0) and seed 2's 42.0
    assert "averaged its last 2 checkpoints" in avg
    assert main(["table2", "--results", "results", "--out", "t2.md", "--quiet"]) == 0
    t2 = Path("t2.md").read_text()
    assert "| ours: base | 21.50 ± 0.71 |" in t2 and "last.ckpt" in t2
    assert "| ours: base | 31.50 ± 0.71 |" in t2 and "checkpoint average 2" in t2
    assert main(["table2", "--results", "results", "--out", "t2a.md", "--quiet", "--average", "2"]) == 0
    assert "21.50" not in Path("t2a.md").read_text()


def test_an_older_merged_evaluations_file_is_read_as_it_is(tmp_path):
    """evaluations.json (one mapping of every split) is read with its protocol from its own fields, and
    nothing rewrites it; one that is not an evaluation of this run is refused by name."""
    from ablate.records import evaluations
    from ablate.records.evaluations import Protocol
    from ablate.records.store import RecordError

    merged = {
        "files": {"dev_hyp": "dev.avg5.hyp.txt", "test_hyp": "test.hyp.txt"},
        "metrics": {"dev_averaged_checkpoints": 5, "dev_f1": 63.7, "test_averaged_checkpoints": 1,
                    "test_f1": 68.1},
    }  # fmt: skip
    path = tmp_path / "evaluations.json"
    path.write_text(json.dumps(merged))
    before = path.read_bytes()
    dev, test = evaluations.read(tmp_path, "r1")
    assert dev.protocol == Protocol("dev", 5)
    assert dev.metrics == {"dev_averaged_checkpoints": 5, "dev_f1": 63.7}
    assert test.protocol == Protocol("test", 0) and test.files == {"test_hyp": "test.hyp.txt"}
    assert path.read_bytes() == before
    path.write_text(json.dumps({**merged, "run_id": "r2"}))
    with pytest.raises(RecordError, match=r"evaluations.json: an evaluation of run r2, not of r1"):
        evaluations.read(tmp_path, "r1")
    path.write_text(json.dumps({**merged, "schema_version": 2}))
    with pytest.raises(RecordError, match=r"evaluations.json: not an evaluation of a run \(.*schema"):
        evaluations.read(tmp_path, "r1")


def test_table4_puts_a_recipes_seeds_in_one_row_with_their_t_interval_and_paired_differences(
    tmp_path, monkeypatch
):
    """Three seeds of one recipe are one row of Table 4: their mean ± sd, Student's t over the seeds, and
    the paired differences to the PCFG (the committed PCFG record and the counts beside its trees) from
    every seed's counts, on the test split and on dev; a second recipe of the same model row is named by
    its experiment."""
    import shutil

    from ablate.records import evaluations
    from ablate.records.evaluations import Protocol
    from ablate.tasks.parsing.interval import paired_counts_difference

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(staleness, "code_hash", lambda task: TODAY)
    res = tmp_path / "results"
    committed = Path(__file__).resolve().parents[1] / "reports/table4_ptb_sample/runs/pcfg"
    shutil.copytree(committed, res / "pcfg")
    (pcfg_dir,) = (res / "pcfg").iterdir()
    pcfg = {s: json.loads((pcfg_dir / f"{s}.evalb.json").read_text()) for s in ("test", "dev")}
    treebank = json.loads((pcfg_dir / "record.json").read_text())["config"]["data"]["treebank_dir"]

    def worse(counts: dict, by: int) -> dict:  # every by-th sentence loses a matched bracket
        matched = [m - (i % by == 0 and m > 0) for i, m in enumerate(counts["matched"])]
        return dict(counts, matched=matched)

    def f1(c: dict) -> float:
        return 200 * sum(c["matched"]) / (sum(c["gold"]) + sum(c["test"]))

    mine: dict[str, list[dict]] = {"test": [], "dev": []}
    for seed, by in ((1, 2), (2, 3), (3, 5)):
        folder = _write_run(res, "parse", seed, task="parsing", scale="paper")
        rec = json.loads((folder / "record.json").read_text())
        rec["sweep"] = "wsj_steps train.max_steps=9"
        rec["config"]["data"]["treebank_dir"] = treebank  # the PCFG of the same treebank
        (folder / "record.json").write_text(json.dumps(rec))
        for split in ("test", "dev"):  # ablate.evaluate --split <split> --average 5 of each seed
            counts = worse(pcfg[split], by)
            mine[split].append(counts)
            (folder / f"{split}.avg5.evalb.json").write_text(json.dumps(counts))
            metrics = {f"{split}_f1": f1(counts), f"{split}_n": len(counts["matched"])}
            files = {f"{split}_hyp": f"{split}.avg5.hyp.txt"}  # the counts are found beside it
            protocol = Protocol(split, 5, None, (360, 380, 400))
            evaluations.write(folder, rec["run_id"], protocol, metrics, files)
    other = _write_run(tmp_path / "o", "parse", 1, task="parsing", scale="paper", extra_metrics={"f1": 50.0})
    rec = json.loads((other / "record.json").read_text())
    rec["sweep"], rec["run_id"] = "wsj_time train.budget_minutes=9", "parse-0123456789ab-s1"
    (other / "record.json").write_text(json.dumps(rec))
    other.rename(res / "parse" / rec["run_id"])

    assert main(["table4", "--results", "results", "--out", "t4.md", "--quiet"]) == 0
    t4 = Path("t4.md").read_text()
    row = next(line for line in t4.splitlines() if line.startswith("| ours: wsj_steps |"))
    values = [f1(c) for c in mine["test"]]
    mean, sd, _ = stats.mean_sd(values)
    lo, hi = stats.t_interval(values)
    assert f"| {mean:.2f} ± {sd:.2f} | [{lo:.2f}, {hi:.2f}] t, 3 seeds |" in row
    for split in ("test", "dev"):
        d, dlo, dhi, p = paired_counts_difference(pcfg[split], mine[split])
        assert d == pytest.approx(np.mean([f1(c) for c in mine[split]]) - f1(pcfg[split]))
        assert f"| {d:+.2f} [{dlo:+.2f}, {dhi:+.2f}], p {p:.3f} |" in row
    assert "3 seeds" in row
    assert "| ours: wsj_time | WSJ only discriminative (data=builtin) |  | 50.00 (dev) |" in t4
    # a newer dev evaluation of other checkpoints is no dev figure of the test one's weights: none shown
    later = next(res.glob("parse/parse-*-s3"))
    evaluations.write(later, later.name, Protocol("dev", 5, None, (460, 480, 500)), {"dev_f1": 1.0}, {})
    assert main(["table4", "--results", "results", "--out", "t4.md", "--quiet"]) == 0
    row = next(
        line for line in Path("t4.md").read_text().splitlines() if line.startswith("| ours: wsj_steps |")
    )
    d, dlo, dhi, p = paired_counts_difference(pcfg["test"], mine["test"])
    assert f"t, 3 seeds | {d:+.2f} [{dlo:+.2f}, {dhi:+.2f}], p {p:.3f} |  |" in row
    # the three searched as one (ablate.evaluate --ensemble): a row of its own, trained as long as all three
    firsts = sorted(res.glob("parse/parse-*-s1"))
    first, ids = firsts[-1], [p.name for p in sorted(res.glob("parse/parse-*-s[23]"))]
    assert first.name.endswith("s1") and "0123456789ab" not in first.name
    best = {s: dict(pcfg[s], matched=[m + 1 for m in pcfg[s]["matched"]]) for s in ("test", "dev")}
    for split in ("test", "dev"):
        (first / f"{split}.ens.evalb.json").write_text(json.dumps(best[split]))
        metrics = {f"{split}_f1": f1(best[split]), f"{split}_n": len(best[split]["matched"])}
        files = {f"{split}_hyp": f"{split}.ens.hyp.txt"}
        evaluations.write(first, first.name, Protocol(split, 0, None, None, tuple(ids)), metrics, files)
    assert main(["table4", "--results", "results", "--out", "t4.md", "--quiet"]) == 0
    t4 = Path("t4.md").read_text()
    row = next(line for line in t4.splitlines() if line.startswith("| ours: wsj_steps, an ensemble of 3 |"))
    d, dlo, dhi, p = paired_counts_difference(pcfg["test"], best["test"])
    assert f"| {f1(best['test']):.2f} |" in row and f"| {d:+.2f} [{dlo:+.2f}, {dhi:+.2f}], p {p:.3f} |" in row
    assert "| 7.5 min | 3 runs searched as one" in row  # 3 x 150 s
    seeds = next(line for line in t4.splitlines() if line.startswith("| ours: wsj_steps |"))
    assert "| 3 seeds," in seeds  # the ensemble kept with seed 1 is beside its own figure, not in its place
    assert f"an ensemble with {', '.join(ids)}" in t4
