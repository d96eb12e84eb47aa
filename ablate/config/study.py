"""Which study a command is in, and what that study declares.

A study is a folder of its own (or an installed package) with its rows, experiments, task, model, paper and
claims; this repository's Table 3 and Table 4 make up the package's own study. The rule, one for every
command: `$ABLATE_STUDY` names the study's folder where it is set; otherwise the study is the nearest of the
current folder and its parents that holds a `study.yaml`; with neither, the command is in the package's own
study (reference row `base`).

`study.yaml` (every key optional):

    name: kernels            # how reports and W&B name the study (default: the folder's name)
    reference: conv          # the row every Δ, Decision, claim, plot and planned seed compares against

Torch-free: the sweeper's plugin scan and the report import it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ablate.config.schema import ConfigError

STUDY_FILE = "study.yaml"
STUDY_ENV = "ABLATE_STUDY"
DEFAULT_REFERENCE = "base"  # the paper's base model, Table 3's first row
KEYS = ("name", "reference")


@dataclass(frozen=True)
class Study:
    """A study: its folder (None for the package's own) and the row it compares against."""

    root: Path | None = None
    name: str = "ablate"
    reference: str = DEFAULT_REFERENCE

    @property
    def conf(self) -> Path | None:
        """The study's config folder (rows under model/, experiments under experiment/), if it has one."""
        if self.root is None or not (self.root / "conf").is_dir():
            return None
        return self.root / "conf"


def study_root(start: Path | None = None) -> Path | None:
    """The folder of the study a command started in `start` (default: the current folder) is in."""
    if env := os.environ.get(STUDY_ENV):
        root = Path(env).expanduser().resolve()
        if not (root / STUDY_FILE).is_file():
            raise ConfigError(f"{STUDY_ENV}={env}: no {STUDY_FILE} in that folder")
        return root
    here = (start or Path.cwd()).resolve()
    return next((d for d in (here, *here.parents) if (d / STUDY_FILE).is_file()), None)


def read_study(root: Path | None) -> Study:
    """The study of folder `root` (None: the package's own); a bad key is one line naming the file."""
    if root is None:
        return Study()
    return _read(root.resolve())


@cache
def _read(root: Path) -> Study:
    import yaml

    path = root / STUDY_FILE
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a mapping of {', '.join(KEYS)} expected")
    if unknown := sorted(set(data) - set(KEYS)):
        raise ConfigError(f"{path}: unknown key {unknown[0]!r} (keys: {', '.join(KEYS)})")
    for key, value in data.items():
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{path}: {key} must be a non-empty string, got {value!r}")
    reference = data.get("reference", DEFAULT_REFERENCE)
    return Study(root=root, name=data.get("name", root.name), reference=reference)


def current_study(start: Path | None = None) -> Study:
    """The study a command started in `start` (default: the current folder) is in, by the rule above."""
    return read_study(study_root(start))
