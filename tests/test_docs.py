"""The README and docs/ say what is true: every relative link points at a file that exists, and the README's
first screen gives exactly the two commands that .ci/run and the first-run test use."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), ROOT / "reports" / "README.md"]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _relative_links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # links, not code
    out = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        out.append(target.split("#")[0])
    return out


@pytest.mark.parametrize("page", [p for p in PAGES if p.is_file()], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_at_a_file(page):
    missing = [t for t in _relative_links(page) if not (page.parent / t).exists()]
    assert not missing, f"{page.relative_to(ROOT)} links to missing files: {missing}"


def first_screen_commands() -> list[str]:
    """The shell commands of the README's first code block (comments left out)."""
    block = re.search(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S).group(1)
    return [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_the_first_screen_gives_exactly_the_two_commands_ci_and_the_first_run_test_use():
    run_cmd, test_cmd = first_screen_commands()
    assert test_cmd in (ROOT / ".ci" / "run").read_text().splitlines()  # .ci/run runs it as written
    install = "python3 -m venv .venv && .venv/bin/pip install torch==2.13.0 -e "
    assert run_cmd == install + ". && .venv/bin/python -m ablate.run"  # the defaults, nothing added
    assert test_cmd == install + "'.[dev]' && .venv/bin/python -m pytest -q"
    # the first-run test runs `python -m ablate.run` with only size and output overrides
    smoke = (ROOT / "tests" / "test_run_smoke.py").read_text()
    assert '"-m",\n        "ablate.run",\n        "scale=tiny",\n        "recipe=tiny",' in smoke


def test_readme_is_a_manual_not_a_notebook():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) < 200
    for word in ("session", "trial", "issue "):
        assert word not in text.lower(), word


def test_the_readme_quotes_the_multi30k_table_as_its_report_states_it():
    """The README's Table 3 summary is the summary of the report it names ("The summary of [..](path)"),
    cell for cell, and its agreement count is that report's."""
    readme = (ROOT / "README.md").read_text()
    source = re.search(r"[Tt]he summary of \[[^\]]*\]\(([^)]+)\)", readme).group(1)
    report = (ROOT / source).read_text()
    block = report.split("## Summary\n")[1].split("## Table\n")[0]
    table = "\n".join(line for line in block.splitlines() if line.startswith("|"))
    assert table in readme
    count = re.search(r"\*\*Against the paper: (\d+) of the 15 rows", report).group(1)
    assert (
        re.search(rf"\*\*{count} of the \d+ measured rows", readme) or f"**{count} of the 15 rows" in readme
    )


def test_reliability_gives_the_limits_the_code_uses():
    """docs/reliability.md states each limit as the code has it: read from the code, not copied."""
    from ablate.config import MIN_VOCAB, DataConfig
    from ablate.data.sources import MAX_CHARS

    text = " ".join((ROOT / "docs" / "reliability.md").read_text().split())
    assert f"more than {MAX_CHARS:,} characters" in text and f"(at most {MAX_CHARS:,})" in text
    assert f"over {MAX_CHARS:,} characters" in text
    assert f"a length ratio over `data.max_len_ratio`, {DataConfig().max_len_ratio:g} by default" in text
    assert f"(at least {MIN_VOCAB})" in text
    assert "100,000" not in text


def test_the_readme_quotes_the_glu_study_as_its_report_states_it():
    """The README's GLU-variants table (one column a row) is the summary of studies/glu_variants/report.md:
    each row's dev PPL mean, its Δ relu and the paper's Δ, and the agreement count."""
    readme = (ROOT / "README.md").read_text()
    report = (ROOT / "studies" / "glu_variants" / "report.md").read_text()
    block = readme.split("## A second paper")[1].split("\n## ")[0]
    rows = [ln for ln in block.splitlines() if ln.startswith("| ")]
    lines = [[c.strip() for c in ln.strip("|").split("|")] for ln in rows]
    header, quoted = lines[0][1:], {ln[0]: ln[1:] for ln in lines[1:]}
    summary = report.split("## Summary\n")[1].split("## Table\n")[0]
    seen = []
    for ln in summary.splitlines():
        cells = [c.strip() for c in ln.strip("|").split("|")]
        if cells[0] not in header:
            continue
        i = header.index(cells[0])
        seen.append(cells[0])
        assert quoted["dev PPL"][i] == cells[2].split(" ± ")[0], cells
        assert (quoted["Δ relu"][i], quoted["paper Δ"][i]) == (cells[3], cells[4]), cells
    assert seen == header  # every row of the report, in its order
    count = re.search(r"\*\*Against the paper: (\d+) of the (\d+) rows", report).groups()
    assert f"{count[0]} of the {count[1]} rows" in block
