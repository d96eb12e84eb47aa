import os
import sys
import tempfile
from pathlib import Path

import pytest

if os.environ.get("PYTEST_XDIST_WORKER"):
    # The suite runs in one worker a core (pytest-xdist, pyproject's addopts): a test's threads share the
    # cores with the other workers', so the threads that wait sleep instead of spinning, in this process
    # and the commands it starts (the same threads, the same sums). OpenMP reads it once: before torch.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
torch.set_num_threads(min(2, os.cpu_count() or 1))

SHARED = Path(__file__).resolve().parents[2] / "shared"
MULTI30K = Path(os.environ.get("ABLATE_MULTI30K", SHARED / "data" / "multi30k"))


@pytest.fixture
def multi30k_dir() -> Path:
    if not (MULTI30K / "train.en.gz").is_file():
        pytest.skip(f"Multi30k not found at {MULTI30K} (set ABLATE_MULTI30K)")
    return MULTI30K


PTB_SAMPLE = Path(os.environ.get("ABLATE_PTB_SAMPLE", SHARED / "data" / "ptb_sample"))


@pytest.fixture(scope="session")
def ptb_sample_dir() -> Path:
    if not (PTB_SAMPLE / "22").is_dir():
        pytest.skip(f"the Penn Treebank sample not found at {PTB_SAMPLE} (set ABLATE_PTB_SAMPLE)")
    return PTB_SAMPLE


# Every command a test runs keeps off the checkout's results/ and the user's cache (the README's command 1
# may have filled both): run folders and prepared corpora go to the test run's own folders, unless a test
# names its own (results_dir=, data.cache_dir=, --results).
_SCRATCH = Path(tempfile.mkdtemp(prefix="ablate-tests-"))
os.environ["ABLATE_RESULTS"] = str(_SCRATCH / "results")
os.environ["ABLATE_CACHE"] = str(_SCRATCH / "cache")


@pytest.fixture(autouse=True)
def _each_test_in_the_package_study(monkeypatch):
    """A command called in-process from a study's folder names its study for the processes it starts
    ($ABLATE_STUDY, $PYTHONPATH, sys.path: ablate.config.study.enter); the next test starts without it."""
    for name in ("ABLATE_STUDY", "PYTHONPATH"):
        monkeypatch.setenv(name, os.environ.get(name, ""))  # recorded, so restored (or unset) after
        if not os.environ[name]:
            monkeypatch.delenv(name)
    monkeypatch.setattr(sys, "path", list(sys.path))
