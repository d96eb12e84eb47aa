"""Each study shipped under studies/ passes its own tests (its tiny form: every row trains from the
study's folder at the tiny preset and its report reads them beside its paper), as a researcher runs them
from the study's folder. A new study folder is covered without editing this file."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STUDIES = sorted(p.parent for p in (ROOT / "studies").glob("*/study.yaml"))


@pytest.mark.slow
@pytest.mark.parametrize("study", STUDIES, ids=[s.name for s in STUDIES])
def test_a_shipped_study_passes_its_own_tests(study):
    p = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=", "tests"],
        cwd=study, capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
