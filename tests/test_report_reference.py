"""A study's reference row: every Δ of the report, the metrics table, the plots and the W&B panels compare
against it (study.yaml's `reference`, or --reference), each checked against the records' own figures by
hand; --missing-command proposes the study's own rows; and what the report cannot read is a line (or exit
2 with one line), never silence and never a traceback."""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, replace
from pathlib import Path

import pytest
from test_report_table3 import ARGS, TODAY, _write_run, make_fixture

from ablate.records import evaluations, staleness
from ablate.report.__main__ import main

USER_MODEL = Path(__file__).parent / "user_model"
USER_TASK2 = Path(__file__).parent / "user_task2"
DIGITS = "digits_task:DigitsTask"


@pytest.fixture(autouse=True)
def _a_users_shell(monkeypatch):
    """A user's shell in the package's own study: no ABLATE_RESULTS, no ABLATE_STUDY."""
    monkeypatch.delenv("ABLATE_RESULTS", raising=False)
    monkeypatch.delenv("ABLATE_STUDY", raising=False)
    monkeypatch.setattr(staleness, "code_hash", lambda task: TODAY)


@pytest.fixture
def table(tmp_path, monkeypatch):
    make_fixture(tmp_path)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _recorded(root: Path, row: str, key: str = "dev_bleu") -> dict[int, float]:
    """A row's finished figures by seed, read from its record files (not through the report)."""
    out = {}
    for path in (root / "results" / row).glob("*/record.json"):
        try:
            rec = json.loads(path.read_text())
        except json.JSONDecodeError:
            continue
        if rec["status"] == "finished" and rec["config"]["scale"]["name"] == "tiny":
            out[rec["seed"]] = rec["metrics"][key]
    return out


def _mean(values: dict[int, float]) -> float:
    return sum(values.values()) / len(values)


def _md_table(text: str, first_column: str) -> dict[str, dict[str, str]]:
    """{row: {column: cell}} of the first Markdown table whose header starts with `first_column`."""
    lines = text.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith(f"| {first_column} |"))
    cols = [c.strip() for c in lines[at].split("|")[1:-1]]
    out = {}
    for ln in lines[at + 2 :]:
        if not ln.startswith("| "):
            break
        cells = [c.strip() for c in ln.split("|")[1:-1]]
        out[cells[0]] = dict(zip(cols, cells, strict=True))
    return out


@pytest.mark.parametrize("how", ["--reference", "study.yaml"])
def test_every_difference_is_against_the_reference_row(how, table):
    """Reference D3 (3 seeds, as base and A1): each row's Δ is its mean less D3's, by hand from the
    records; the summary, the statistics, the plots and the JSON name D3; D3 itself is compared with
    nothing."""
    extra = ["--reference", "D3"] if how == "--reference" else []
    if how == "study.yaml":
        (table / "study.yaml").write_text("reference: D3\n")
    assert main(["table3", *ARGS[:4], "--out", "r.json", "--format", "json", "--quiet", *extra]) == 0
    data = json.loads((table / "r.json").read_text())
    rows = {r["row"]: r for r in data["rows"]}
    d3 = _recorded(table, "D3")
    assert data["reference"] == "D3" and "vs_reference" not in rows["D3"]["bleu"]
    for row in ("base", "A1"):  # the same seeds 1-3 as D3
        mine = _recorded(table, row)
        assert sorted(mine) == sorted(d3) == [1, 2, 3]
        got = rows[row]["bleu"]["vs_reference"]["diff"]
        assert got == pytest.approx(_mean(mine) - _mean(d3), abs=1e-9), row
    ppl_base, ppl_d3 = _recorded(table, "base", "dev_ppl"), _recorded(table, "D3", "dev_ppl")
    assert rows["base"]["ppl"]["vs_reference"]["diff"] == pytest.approx(_mean(ppl_base) - _mean(ppl_d3))
    # the paper's Δ is against the paper's D3 too: base 4.92 against D3's 4.67 in dev PPL (Table 3)
    assert rows["base"]["ppl"]["vs_reference"]["paper_diff"] == pytest.approx(4.92 - 4.67)

    assert main(["table3", *ARGS[:4], "--out", "r.md", "--quiet", "--plots", "plots", *extra]) == 0
    text = (table / "r.md").read_text()
    summary = _md_table(text, "row")
    assert summary["base"]["Δ D3"] == f"{_mean(_recorded(table, 'base', 'dev_ppl')) - _mean(ppl_d3):+.2f}"
    assert summary["D3"]["Δ D3"] == "" and "Δ base" not in summary["base"]
    assert "Reference row: D3 (every Δ" in text and "### BLEU (dev): difference to our D3" in text
    assert "![BLEU difference to D3 per row](plots/forest_bleu.png)" in text


def test_the_metrics_table_is_against_the_reference(table):
    assert main(["metrics", *ARGS[:4], "--reference", "D3", "--out", "m.md", "--quiet"]) == 0
    rows = _md_table((table / "m.md").read_text(), "row")
    d3 = _recorded(table, "D3", "dev_ppl")
    for row in ("base", "A1 †"):
        mine = _recorded(table, row.split()[0], "dev_ppl")
        assert rows[row]["Δ D3"] == f"{_mean(mine) - _mean(d3):+.2f}", row  # PPL's, the last Δ column
    assert rows["D3"]["Δ D3"] == ""


def test_metrics_rows_prints_those_rows_only(table):
    assert main(["metrics", *ARGS[:4], "--rows", "A1,B1", "--out", "m.md", "--quiet"]) == 0
    text = (table / "m.md").read_text()
    assert list(_md_table(text, "row")) == ["A1 †", "B1"]
    assert "decision: D3" not in text and "stale: E" not in text  # nor the other rows' notes


def test_rows_of_a_table_without_rows_is_one_line(table, capsys):
    assert main(["table4", "--results", "results", "--rows", "base", "--out", "t.md"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --rows: the table table4 has no rows to choose (its rows are not rows x seeds)"]
    assert not (table / "t.md").exists()


def test_a_reference_without_records_is_one_line(table, capsys):
    """C2 is a row of the paper (and of the package's rows) that has no record here."""
    assert main(["table3", *ARGS[:4], "--reference", "C2", "--out", "r.md", "--quiet", "--no-plots"]) == 0
    text = (table / "r.md").read_text()
    line = "The reference row C2 has no finished records: no row is compared with it."
    assert text.count(line) == 1
    assert "warning: the reference row C2 has no finished records" in capsys.readouterr().err
    assert _md_table(text, "row")["base"]["Δ C2"] == ""
    assert main(["metrics", *ARGS[:4], "--reference", "C2", "--out", "m.md", "--quiet"]) == 0
    assert (table / "m.md").read_text().count("The reference row C2 has no finished records") == 1


def test_the_dashboard_compares_each_group_with_the_reference():
    from ablate.report import dashboard as db

    records = [
        {"run_id": f"{row}-s1", "row": row, "group": group, "seed": 1, "sweep": "sw", "task": "translation",
         "status": "finished", "config": {"logger": {}}, "metrics": {"dev_ppl": 5.0}}
        for row, group in (("gru", "gru"), ("gru_1layer", "gru"), ("base", "base"), ("A1", "A"))
    ]  # fmt: skip
    spec = db.report_spec(db.build_report(records, "", "ablate", "sw", "", reference="gru"))
    text = json.dumps(spec)
    assert "group A and gru" in text and "group base and gru" in text and "and base" not in text
    assert "BLEU difference to gru per row" in text and "dev PPL vs steps, group gru" in text
    assert "Rows against gru and the paper" in text


# ---- --missing-command: the study's own rows


def _gru_study(root: Path, seeds=(("gru", (1, 2)), ("gru_1layer", (1,)))) -> Path:
    """A model study (docs/models.md's GRU rows) with its own reference row, gru; by default gru has seeds
    1 and 2, gru_1layer seed 1."""
    from ablate.report.collect import load_row_model

    (root / "conf").mkdir(parents=True)
    shutil.copytree(USER_MODEL / "conf" / "model", root / "conf" / "model")
    (root / "study.yaml").write_text("reference: gru\n")
    for row, row_seeds in seeds:
        model = asdict(load_row_model(root / "conf" / "model" / f"{row}.yaml"))
        for s in row_seeds:
            path = _write_run(root / "results", row, s) / "record.json"
            rec = json.loads(path.read_text())
            rec["config"]["model"], rec["group"] = model, model["group"]  # as the row file composes it
            path.write_text(json.dumps(rec))
    return root


def test_the_missing_command_of_a_model_study_proposes_its_own_rows(tmp_path, monkeypatch, capsys):
    study = _gru_study(tmp_path / "kernels")
    monkeypatch.chdir(study)
    assert main(["table3", "--results", "results", "--missing-command"]) == 0
    out = capsys.readouterr().out.splitlines()
    proposed = {}
    for line in out:
        words = dict(w.split("=", 1) for w in line.split() if "=" in w)
        for row in words["model"].split(","):
            proposed[row] = words["seed"]
    assert proposed == {"gru_noattn": "1,2", "gru_1layer": "2"}, out


def test_a_paper_row_without_a_row_file_is_one_line(tmp_path, monkeypatch, capsys):
    """The digits study's paper has rows base and wide; the study has no row file of wide (the package
    has base's): wide is one line on stderr, and the command names base only."""
    monkeypatch.syspath_prepend(str(USER_TASK2))
    study = tmp_path / "digits"
    study.mkdir()
    (study / "study.yaml").write_text("name: digits\n")
    _write_run(study / "results", "base", 1, task=DIGITS)
    monkeypatch.chdir(study)
    args = ["table3", "--task", DIGITS, "--results", "results", "--missing-command", "--seeds", "1,2"]
    assert main(args) == 0
    out, err = capsys.readouterr()
    assert [ln.split()[4:6] for ln in out.splitlines()] == [["model=base", "seed=2"]], out
    lines = [ln for ln in err.splitlines() if "wide" in ln]
    assert lines == [
        "skipped wide: a row of the paper's table (paper_table.csv) with no row file (model/wide.yaml in the "
        "study's conf folder)"
    ]


# ---- what the report cannot read


def test_the_test_column_shows_what_ablate_evaluate_measured(table):
    """`python -m ablate.evaluate RUN --split test` on every seed of base and D3 (no test figure of their
    own): the summary's and the table's test columns show their mean and Δ, the note says whence."""
    test = {}
    for folder in sorted((table / "results" / row) for row in ("base", "D3")):
        for path in sorted(folder.glob("*/record.json")):
            rec = json.loads(path.read_text())
            if rec["config"]["scale"]["name"] == "tiny":
                v = 20.0 + rec["seed"] + (3.0 if rec["row"] == "D3" else 0.0)
                test[rec["row"], rec["seed"]] = v
                evaluations.write(
                    path.parent, rec["run_id"], evaluations.Protocol("test", 0), {"test_bleu": v}, {}
                )
    assert len(test) == 6
    assert main(["table3", *ARGS, "--no-plots"]) == 0
    text = (table / "reports" / "table3.md").read_text()
    assert _md_table(text, "row")["base"]["test BLEU"] == "22.00 ± 1.00"
    assert _md_table(text, "row")["D3"]["test BLEU"] == "25.00 ± 1.00"
    main_table = _md_table(text.split("## Table")[1], "row")
    assert main_table["(D) D3"]["BLEU test"] == "25.00 ± 1.00"
    assert "base s1, base s2, base s3, D3 s1, D3 s2, D3 s3: no test figure of the run's own" in text
    assert "(test split, last.ckpt)" in text


def _raising_table(coll):
    raise ValueError("no such column")


@pytest.mark.parametrize("where", ["no_such_module_of_tables:table", "test_report_reference:_raising_table"])
def test_a_task_table_that_fails_is_one_line_and_exit_2(where, table, monkeypatch, capsys):
    from ablate.tasks import task_of

    task = task_of("translation")
    monkeypatch.setattr(task, "tables", {**task.tables, "mine": where})
    assert main(["mine", "--task", "translation", "--results", "results", "--out", "t.md"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    if where.startswith("no_such"):
        assert err == [
            "error: task translation: table mine (no_such_module_of_tables:table) does not import: "
            "ModuleNotFoundError: No module named 'no_such_module_of_tables'"
        ]
    else:
        line = _raising_table.__code__.co_firstlineno + 1
        assert err[-1] == (
            f"error: task translation: table mine raised ValueError: no such column (at {__file__}:{line})"
        )
    assert not (table / "t.md").exists()


@pytest.fixture
def digits(tmp_path, monkeypatch):
    """The digits task's records (tests/test_report_variations.py), at a scaled-down preset."""
    from test_report_variations import _records

    monkeypatch.syspath_prepend(str(USER_TASK2))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "conf").mkdir()
    _records(tmp_path / "results")
    return tmp_path


def _digits_report(*extra: str) -> int:
    args = ["table3", "--task", DIGITS, "--results", "results", "--conf", "conf", "--quiet", "--no-plots"]
    return main([*args, "--n-boot", "50", *extra])


def test_a_reduce_that_raises_is_a_line_of_the_report(digits, monkeypatch):
    from ablate.tasks import task_of

    def reduce(sums):
        return sums["no_such_statistic"]

    task = task_of(DIGITS)
    monkeypatch.setattr(task, "metrics", tuple(replace(m, reduce=reduce) for m in task.metrics))
    assert _digits_report("--out", "r.md") == 0
    text = (digits / "r.md").read_text()
    line = reduce.__code__.co_firstlineno + 1
    assert (
        f"- unread: CER: no bootstrap interval for wide: KeyError: 'no_such_statistic' "
        f"(at test_report_reference.py:{line})"
    ) in text.splitlines()


def test_a_task_without_bleu_names_its_own_metrics(digits):
    assert _digits_report("--out", "r.md") == 0
    text = (digits / "r.md").read_text()
    assert "the measured PPL and CER come from the scaled models" in text
    assert "PPL and BLEU" not in text


def test_a_report_names_no_absolute_folder(table):
    assert main(["table3", *ARGS[4:], "--results", str(table / "results"), "--conf", "conf/model"]) == 0
    text = (table / "reports" / "table3.md").read_text()
    assert str(table) not in text and "read from `results`" in text
    outside = table.parent / f"{table.name}-elsewhere"
    shutil.copytree(table / "results", outside / "runs")
    assert main(["table3", *ARGS[4:], "--results", str(outside / "runs"), "--conf", "conf/model"]) == 0
    text = (table / "reports" / "table3.md").read_text()
    assert str(outside) not in text and f"read from `…/{outside.name}/runs`" in text


def test_a_model_studys_decisions_and_planned_seeds_are_against_its_own_reference(
    tmp_path, monkeypatch, capsys
):
    """docs/models.md's GRU study, reference gru: gru_noattn's dev PPL (+4.0, seeds spread 0.1) is decided
    worse than gru, gru_1layer's (+0.2) is not yet; the decide command brings gru_1layer and gru itself to
    the same seeds (the reference to the most any row asks) and names no Transformer row; the report reads
    no claim or paper figure of Table 3, which is not this study's paper."""
    ppl = {"gru": (5.0, 5.1, 4.9), "gru_1layer": (5.2, 5.3, 5.1), "gru_noattn": (9.0, 9.1, 8.9)}
    study = _gru_study(tmp_path / "kernels", [(row, (1, 2, 3)) for row in ppl])
    for row, values in ppl.items():
        for seed, value in enumerate(values, 1):
            (path,) = (study / "results" / row).glob(f"*-s{seed}/record.json")
            rec = json.loads(path.read_text())
            rec["metrics"]["dev_ppl"] = value
            path.write_text(json.dumps(rec))
    monkeypatch.chdir(study)
    assert main(["table3", "--results", "results", "--decide-command"]) == 0
    out, err = capsys.readouterr()
    (command,) = out.splitlines()
    words = dict(w.split("=", 1) for w in command.split() if "=" in w)
    assert words["model"] == "gru,gru_1layer" and words["seed"] == "4,5,6,7", command
    assert "seeds a side that decide them: gru 7, gru_1layer 7" in err
    assert main(["table3", "--results", "results", "--out", "r.md", "--no-plots"]) == 0
    text = (study / "r.md").read_text()
    decisions = [ln for ln in text.splitlines() if ln.startswith("- gru")]
    worse, undecided = "- gru_noattn against gru PPL: worse; Δ", "- gru_1layer against gru PPL: undecided; Δ"
    assert any(ln.startswith(f"{worse} of the means +4.00") for ln in decisions), decisions
    assert any(ln.startswith(f"{undecided} of the means +0.20") for ln in decisions), decisions
    assert "Each row against gru" in text and "section 6.2" not in text and "base" not in text
