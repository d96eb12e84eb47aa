"""Which study a command is in, and what that study declares.

A study is a folder of its own (or an installed package) with its rows, experiments, task, model, paper and
claims; this repository's Table 3 and Table 4 make up the package's own study. The rule, one for every
command: `$ABLATE_STUDY` names the study's folder where it is set; otherwise the study is the nearest of the
current folder and its parents that holds a `study.yaml`; with neither, the command is in the package's own
study (reference row `base`).

`study.yaml` (every key optional):

    name: kernels            # how reports and W&B name the study (default: the folder's name)
    reference: conv          # the row every Δ, Decision, claim, plot and planned seed compares against
    conf: conf               # its configs: a folder inside the study (default conf/), or pkg://<package>/<dir>

A command in a study (`enter`) puts the study's folder first on the module path, so its task, model and
criterion (`module:Class`) import by name from wherever in the study the command started, and names the study
in `$ABLATE_STUDY` and `$PYTHONPATH` for the processes it starts (DDP workers, joblib and SLURM members
start elsewhere). Hydra's search path gets the study's configs before the package's (the `ablate_study`
search path plugin), so its experiments and rows are found with no `hydra.searchpath` typed, and a row of the
study's shadows the package's row of the same name (a study's own `base`).

Torch-free: the sweeper's plugin scan and the report import it.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ablate.config.schema import ConfigError

STUDY_FILE = "study.yaml"
STUDY_ENV = "ABLATE_STUDY"
DEFAULT_REFERENCE = "base"  # the paper's base model, Table 3's first row
KEYS = ("name", "reference", "conf", "task", "paper_table", "paper_claims")
PACKAGE_SCHEME = "pkg://"
SEARCH_PROVIDER = "ablate-study"  # the provider of the study's entries of Hydra's search path


def package_conf() -> Path:
    """The package's own configs (config.yaml and its groups): conf/ inside the installed package, where a
    wheel carries it, else the checkout's conf/ at the repository's top level beside the package."""
    package = Path(__file__).resolve().parents[1]
    inside = package / "conf"
    return inside if (inside / "config.yaml").is_file() else package.parent / "conf"


@dataclass(frozen=True)
class Study:
    """A study: its folder (None for the package's own) and the row it compares against."""

    root: Path | None = None
    name: str = "ablate"
    reference: str = DEFAULT_REFERENCE
    conf_dir: str = "conf"  # study.yaml's `conf`: a folder inside the study, or pkg://<package>/<dir>
    declared_task: str | None = None  # study.yaml's `task`
    # study.yaml's `paper_table` and `paper_claims`: the paper this study reproduces (a CSV of its rows, its
    # claims), beside the study's records whatever task they are of; None: the task's own paper
    papers: tuple[tuple[str, str], ...] = ()

    def paper_file(self, which: str) -> Path | None:
        """The study's own `paper_table` or `paper_claims` file, where study.yaml names one."""
        given = dict(self.papers).get(which)
        return None if given is None or self.root is None else self.root / given

    @property
    def task(self) -> str | None:
        """The task whose records the study's report reads: study.yaml's `task`, else the one task its
        experiments name (None: the package's default, or several)."""
        if self.declared_task or self.conf is None:
            return self.declared_task
        import yaml

        named = set()
        for path in sorted((self.conf / "experiment").glob("*.yaml")):
            try:
                data = yaml.safe_load(path.read_text(encoding="utf-8"))
            except (OSError, yaml.YAMLError):
                continue  # an experiment that does not read is named where it is composed
            if isinstance(data, dict) and isinstance(data.get("task"), str):
                named.add(data["task"])
        return named.pop() if len(named) == 1 else None

    @property
    def conf(self) -> Path | None:
        """The study's config folder (rows under model/, experiments under experiment/), if it has one: a
        folder of the study, or the folder of the installed package its `pkg://` entry names."""
        if self.root is None:
            return None
        if self.conf_dir.startswith(PACKAGE_SCHEME):
            folder = package_folder(self.conf_dir)
        else:
            folder = self.root / self.conf_dir
        return folder if folder is not None and folder.is_dir() else None

    @property
    def searchpath(self) -> list[str]:
        """The study's entries of Hydra's search path (none for the package's own study)."""
        if self.root is not None and self.conf_dir.startswith(PACKAGE_SCHEME):
            return [self.conf_dir]
        return [f"file://{self.conf}"] if self.conf is not None else []


def package_folder(entry: str) -> Path | None:
    """The folder of a `pkg://<package>/<dir>` entry (Hydra's: `<package>.<dir>`, an importable package), or
    None where it cannot be imported or is not a folder on disk."""
    from importlib import resources

    try:
        found = Path(str(resources.files(entry.removeprefix(PACKAGE_SCHEME).replace("/", ".").rstrip("."))))
    except (ImportError, TypeError, ValueError):
        return None
    return found if found.is_dir() else None


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
    conf = data.get("conf", "conf")
    if "conf" in data and not conf.startswith(PACKAGE_SCHEME) and not (root / conf).is_dir():
        raise ConfigError(f"{path}: conf: {conf} is not a folder of the study (or pkg://<package>/<dir>)")
    name = data.get("name", root.name)
    papers = tuple((k, data[k]) for k in ("paper_table", "paper_claims") if k in data)
    for key, value in papers:
        if not (root / value).is_file():
            raise ConfigError(f"{path}: {key}: {value} is not a file of the study")
    return Study(
        root=root,
        name=name,
        reference=reference,
        conf_dir=conf,
        declared_task=data.get("task"),
        papers=papers,
    )


def current_study(start: Path | None = None) -> Study:
    """The study a command started in `start` (default: the current folder) is in, by the rule above."""
    return read_study(study_root(start))


def enter(start: Path | None = None) -> Study:
    """The study a command is in, made the command's: its folder first on the module path, and named in
    `$ABLATE_STUDY` and `$PYTHONPATH` for the processes the command starts, which may start in another
    folder (a DDP worker, a joblib or SLURM member). The package's own study changes nothing."""
    study = current_study(start)
    if study.root is None:
        return study
    root = str(study.root)
    if root not in sys.path:
        sys.path.insert(0, root)
    os.environ[STUDY_ENV] = root
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if root not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([root, *filter(None, paths)])
    return study
