"""Whether a record is current: decided each time a record is read, never written into it.

The rule: **a record is current while its code hash is today's, or is the hash of an anchor of its task
(`.result-anchors`) and no uncommitted change touches that task's code.**

- The code hash covers the code a task runs: every file under `ablate/` except the orchestration
  packages (`NOT_RESULT`) and other tasks' own folders (`Task.own_code`), and for a task outside the
  package the files of its module's folder, each Python file read
  as Python's tokenizer reads it, comments, docstrings and blank lines aside (`result_text`). So a
  comment, a docstring or a blank line never stales a record, and nothing needs declaring for it.
- An anchor (`<revision> <task> <code hash>  # why`) says: the tiny runs of the task's configurations
  at that revision give every number today's code gives. CI checks every anchor against HEAD
  (tests/test_result_anchors.py), so a refactor that keeps the results costs nothing, and a change
  that does not fails CI until its author moves or removes the anchor, which stales the anchor's
  records. The list grows with code states that have committed records, never with refactors.
- An uncommitted change to a task's code counts as a change since every anchor; a record made from
  uncommitted code is current only while its hash is today's.
- A record naming code that is not this study's (ablate.records.trust) is read as data: nothing of it is
  imported to be hashed, and it reads stale, by that name.
"""

from __future__ import annotations

import functools
import hashlib
import io
import re
import subprocess
import sys
import tokenize
from pathlib import Path
from typing import Any

from ablate.config import DEFAULT_TASK, ConfigError
from ablate.records.trust import ARCH, CRITERION, foreign, importable, not_ours
from ablate.tasks import BUILTIN, own_code

PACKAGE = Path(__file__).resolve().parents[1]
ROOT = PACKAGE.parent
ANCHORS = ROOT / ".result-anchors"

# Orchestration: where a run is run, what is written about it, the report, the commands that start runs.
# None of it decides a figure of a run (the config that does is in the record itself).
NOT_RESULT = (
    "ablate/__init__.py",
    "ablate/cluster/",
    "ablate/control/",
    "ablate/jobs/",
    "ablate/records/",
    "ablate/report/",
    "ablate/baseline.py",
    "ablate/conf/",  # an installed package's configs (a record holds the config its run composed)
    "ablate/new.py",
    "ablate/scaffold/",
    "ablate/evaluate.py",
    "ablate/prepare.py",
    "ablate/run.py",
)
_SKIPPED = {tokenize.NL, tokenize.COMMENT, tokenize.ENCODING}
_STATEMENT_START = {tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING}


def runs(task: str, path: str) -> bool:
    """Whether a run of `task` may run the file at `path` (relative to the repository)."""
    if not path.startswith("ablate/") or path.startswith(NOT_RESULT) or "__pycache__" in path:
        return False
    others = (p for name in BUILTIN if name != task for p in own_code(name))
    return not path.startswith(tuple(others))


def result_text(path: str, data: bytes) -> bytes:
    """What of a file can change a result: a Python file without its comments, docstrings (a string that
    is a statement of its own) and blank lines, each line's trailing blanks dropped, as Python's tokenizer
    finds them; a YAML file as the values it holds and its `# @package` line (Hydra's: where they go), its
    comments and layout aside; any other file (or one that does not parse) as its bytes."""
    if path.endswith((".yaml", ".yml")):
        return _yaml_text(data)
    if not path.endswith(".py"):
        return data
    try:
        tokens = [t for t in tokenize.tokenize(io.BytesIO(data).readline) if t.type != tokenize.ENDMARKER]
    except (tokenize.TokenError, SyntaxError):
        return data
    lines = data.decode("utf-8").split("\n")
    significant = [t for t in tokens if t.type not in _SKIPPED]
    drop = [t for t in tokens if t.type == tokenize.COMMENT]
    for i, t in enumerate(significant):
        before = significant[i - 1].type if i else tokenize.ENCODING
        after = significant[i + 1].type if i + 1 < len(significant) else tokenize.NEWLINE
        if t.type == tokenize.STRING and before in _STATEMENT_START and after == tokenize.NEWLINE:
            drop.append(t)
    for t in sorted(drop, key=lambda t: t.start, reverse=True):  # from the end: positions stay valid
        (r0, c0), (r1, c1) = t.start, t.end
        lines[r0 - 1 : r1] = [lines[r0 - 1][:c0] + lines[r1 - 1][c1:]]
    return "\n".join(s.rstrip() for s in lines if s.strip()).encode()


def _yaml_text(data: bytes) -> bytes:
    import json

    import yaml

    try:
        values = yaml.safe_load(data)
    except yaml.YAMLError:
        return data
    header = [line.strip() for line in data.decode("utf-8", "replace").splitlines() if line.startswith("# @")]
    return json.dumps([header, values], sort_keys=True, default=str).encode()


@functools.cache  # once a process: the code a process runs is the code it loaded
def code_hash(task: str, outside: tuple[str, ...] | None = None, roots: tuple[Path, ...] = ()) -> str:
    """One hash of what can change a result (`result_text`) in every file a run of `task` may run, and for
    a task outside the package the files `outside` names (task_files; found under `roots` too), else every
    file of its folders."""
    h = hashlib.sha256()
    files = [(p, _digest(p, ROOT / p)) for p in _package_files() if runs(task, p)]
    names = outside if outside is not None else tuple(name for name, _ in _outside_files(task))
    places = _roots(task, roots) if names else []
    files += [(name, _digest(name, _outside_path(places, name))) for name in names]
    for name, digest in sorted(files):
        h.update(name.encode() + b"\0" + digest)
    return h.hexdigest()[:12]


def _digest(name: str, file: Path | None) -> bytes:
    if file is None or not file.is_file():
        return b"\0missing"
    return hashlib.sha256(result_text(name, file.read_bytes())).digest()


def _outside_files(task: str) -> list[tuple[str, Path]]:
    """A task outside the package: the files of its own folders, each named by its folder's name and its
    path inside it (the same code elsewhere hashes alike). What a record made before task_files counts."""
    out = []
    for folder in _folders(task):
        for f in folder.rglob("*"):
            if f.is_file() and f.suffix != ".pyc" and "__pycache__" not in f.parts:
                out.append((_name(folder, f), f))
    return out


def _folders(task: str) -> list[Path]:
    return [Path(p) for p in own_code(task) if Path(p).is_absolute()]


def _name(folder: Path, f: Path) -> str:
    return f"{folder.name}/{f.relative_to(folder).as_posix()}"


# ---- A file outside the package is known by its place: '<folder>/<path inside it>', the folder one of the
# roots (its task's folders, its model's and criterion's, the study's, the current folder) and named by its
# own name. Where the study moved or was renamed, the same place is found under today's roots (a name whose
# folder is no root's name: its path inside, under the first root that has it); a name written as an
# absolute path (a record of an earlier version) by the longest tail of it that a root holds.


def _roots(task: str, extra: tuple[Path, ...] = ()) -> list[Path]:
    """Where a file of a run of `task` outside the package may lie here and now, most specific first."""
    return list(dict.fromkeys(p.resolve() for p in (*_folders(task), *extra, *_bases())))


def _bases() -> list[Path]:
    """The study's folder (where the command is in one) and the current folder."""
    from ablate.config.study import current_study

    try:
        study = current_study().root
    except ConfigError:  # a bad $ABLATE_STUDY: said by the command that reads it
        study = None
    return [p.resolve() for p in (study, Path.cwd()) if p is not None]


def _outside_path(roots: list[Path], name: str) -> Path | None:
    """The file a task_files name means today, under `roots` (_roots); None where none holds it."""
    path = Path(name)
    if path.is_absolute():
        if path.is_file():
            return path
        parts = path.parts[1:]
        tails = [Path(*parts[i:]) for i in range(len(parts))]
        return next((r / t for t in tails for r in roots if (r / t).is_file()), None)
    head, _, rest = name.partition("/")
    named = [r for r in roots if r.name == head]
    if named:
        return named[0] / rest
    return next((r / rest for r in roots if (r / rest).is_file()), None)


def _place(roots: list[Path], name: str) -> str:
    """How a reason shows a task_files name: its path in the study (or the current folder) where it lies
    there, else its name; never a machine's absolute path (a report shows it)."""
    found = _outside_path(roots, name)
    for base in _bases():
        if found is not None and found.resolve().is_relative_to(base):
            return found.resolve().relative_to(base).as_posix()
    if Path(name).is_absolute():
        return "/".join(Path(name).parts[-2:])
    return name


def task_files(task: str, config_files: list[str] = (), code: tuple[str, ...] = ()) -> dict[str, str]:
    """What a run reads outside the package, as its record keeps it (name -> the hash of its result_text):
    the modules this process has imported from its task's folders (a task outside the package) and from
    `code`, the folders of a researcher's model and criterion, and `config_files`, the config files its
    command composed from the researcher's folders (Hydra's defaults list). Each file is named by its place
    (`_roots`): the folder's name and its path inside it, the task's folders first, then its model's, the
    study's and the current folder; a file outside all of them by its path. {} for a run of the package's
    own task, model and criterion."""
    folders = [f.resolve() for f in _folders(task)]
    imported = folders + [Path(c).resolve() for c in code]
    if not imported:
        return {}
    loaded = [getattr(m, "__file__", None) for m in list(sys.modules.values())]
    files = {Path(f).resolve() for f in loaded if f and Path(f).is_absolute()}  # torch._ops: '_ops.py'
    files = {f for f in files if f.suffix == ".py" and any(f.is_relative_to(d) for d in imported)}
    files |= {Path(c).resolve() for c in config_files}
    roots = _roots(task, tuple(Path(c) for c in code))
    out = {}
    for f in sorted(files):
        folder = next((d for d in roots if f.is_relative_to(d)), None)
        name = _name(folder, f) if folder else str(f)
        out[name] = _digest(name, f).hex()[:12]
    return out


def outside_facts(task: str, config_files: list[str] = (), code: tuple[str, ...] = ()) -> dict[str, Any]:
    """The fields of a new record of a run that reads code outside the package (its task's, or its model's
    and criterion's folders, `code`): its task_files and the code hash over them (none for the package's
    own: facts() has it)."""
    files = task_files(task, config_files, code)
    roots = tuple(Path(c).resolve() for c in code)
    return {"task_files": files, "code_hash": code_hash(task, tuple(sorted(files)), roots)} if files else {}


def model_folders(config: Any) -> tuple[Path, ...]:
    """The folders of a record's model and criterion where they are a researcher's (`module:Class`), found
    by where Python would import them from, without importing them; () for the package's own."""
    import importlib.util

    from ablate.config.arch import ARCHS, CRITERIA

    key_of = {"arch": ARCH, "criterion": CRITERION}
    model = (config or {}).get("model") if isinstance(config, dict) else None
    out = []
    for key, ours in (("arch", ARCHS), ("criterion", CRITERIA)):
        name = (model or {}).get(key)
        if not isinstance(name, str) or name in ours or ":" not in name or not importable(key_of[key], name):
            continue  # find_spec imports a dotted name's parents: only a name this study may import
        try:
            spec = importlib.util.find_spec(name.partition(":")[0])
        except (ImportError, ValueError):
            continue
        if spec is not None and spec.origin and Path(spec.origin).is_file():
            out.append(Path(spec.origin).resolve().parent)
    return tuple(dict.fromkeys(out))


def _package_files() -> list[str]:
    return [p.relative_to(ROOT).as_posix() for p in PACKAGE.rglob("*") if p.is_file() and p.suffix != ".pyc"]


def facts(task: str) -> dict[str, Any]:
    """What a new record stores of its code: the revision, the task's files that differ from it, and the
    hash of the code as run."""
    rev = _git("rev-parse", "HEAD")
    return {
        "git": rev.strip() if rev else None,
        "uncommitted": uncommitted(task) if rev else [],
        "code_hash": code_hash(task),
    }


def uncommitted(task: str) -> list[str]:
    """The files of `task`'s code that differ from HEAD's (edited, added or removed)."""
    out = _git("status", "--porcelain", "--untracked-files=all", "--", "ablate") or ""
    paths = [line[3:].split(" -> ")[-1] for line in out.splitlines()]
    return sorted(p for p in paths if runs(task, p))


def why_stale(rec: dict[str, Any]) -> str | None:
    """Why `rec` is stale (one phrase naming what changed), or None where it is current. The phrase names
    files by their place (the package's, the study's), never by a machine's absolute path."""
    why = _why_stale(rec)
    return None if why is None else _no_machine_paths(why)


def _why_stale(rec: dict[str, Any]) -> str | None:
    if (theirs := foreign(rec)) is not None:  # read as data: its code is never imported to be hashed
        return not_ours(theirs)
    task = rec.get("task") or DEFAULT_TASK
    files = rec.get("task_files")
    outside = tuple(sorted(files)) if isinstance(files, dict) else None
    roots = model_folders(rec.get("config")) if outside else ()
    try:
        now = code_hash(task) if outside is None else code_hash(task, outside, roots)
    except ConfigError as e:  # a task outside the package that this machine cannot import
        return f"its code cannot be read here ({e})"
    if rec.get("code_hash") == now:
        return None  # the same code, as Python reads it
    if rec.get("code_hash") in _anchors().get(task, {}):
        now = _changed_since_head(task)
        return f"code changed: uncommitted change to {', '.join(now)}" if now else None
    theirs = _outside_changed(task, files, roots)
    if rec.get("uncommitted"):
        also = f", or {theirs}" if theirs else ""
        return f"made from uncommitted code ({', '.join(rec['uncommitted'])}), changed since{also}"
    rev = rec.get("git")
    if not rev:
        return f"code {rec.get('code_hash')} != {now} (the record names no revision)"
    if (bad := revision_problem(rev)) is not None:
        return f"code {rec.get('code_hash')} != {now} ({bad})"
    changed = _changed_since(rev, task)
    if changed is None:
        return f"code changed since (revision {rev[:10]} is not in this repository's history)"
    what = ", ".join(changed[:6]) + (f" and {len(changed) - 6} more" if len(changed) > 6 else "")
    if theirs:
        what += (", or " if what else "") + theirs
    return f"code changed since {rev[:10]}: {what or 'its files'}"


_REVISION = re.compile(r"[0-9a-f]{7,40}")


def revision_problem(rev: Any) -> str | None:
    """Why a record's revision is never passed to git (a record is data: `--output=...` or `HEAD; ...`
    would be an option or a name), in one phrase; None for a commit hash (7 to 40 lowercase hex digits)."""
    if isinstance(rev, str) and _REVISION.fullmatch(rev):
        return None
    shown = repr(rev) if len(repr(rev)) <= 40 else repr(rev)[:37] + "..."
    return f"its revision {shown} is not a commit hash (7 to 40 hex digits): not compared with git"


def _outside_changed(task: str, files: Any, roots: tuple[Path, ...] = ()) -> str:
    """What changed outside the package: the files of task_files whose hash is not the record's (a record
    without them: its task's folder, any file of it); '' for a task of the package."""
    folders = _folders(task)
    if not isinstance(files, dict):
        return f"its task's folder {folders[0].name}/" if folders else ""
    places = _roots(task, roots)
    changed = [
        _place(places, name)
        for name, digest in sorted(files.items())
        if _digest(name, _outside_path(places, name)).hex()[:12] != digest
    ]
    whose = "its task's" if folders else "its model's"  # a package task reads outside only its model's code
    return f"{whose} {', '.join(changed)}" if changed else ""


_ABSOLUTE = re.compile(r"(?<![\w.~/])(/[^\s:,;()'\"]+)")


def _no_machine_paths(text: str) -> str:
    """`text` with each absolute path in it as a place: relative to the study's folder or the current one
    where it lies there, else its last two parts (a message of the researcher's code may carry one)."""

    def shown(m: re.Match) -> str:
        path = Path(m.group(1))
        for base in _bases():
            if path.is_relative_to(base):
                return path.relative_to(base).as_posix()
        return "/".join(path.parts[-2:])

    return _ABSOLUTE.sub(shown, text)


@functools.cache
def _changed_since_head(task: str) -> tuple[str, ...]:
    """The files of `task`'s code whose `result_text` differs from HEAD's."""
    return tuple(p for p in uncommitted(task) if _text_at("HEAD", p) != _text_now(p))


@functools.cache
def _changed_since(rev: str, task: str) -> list[str] | None:
    """The files of `task`'s code whose `result_text` differs between `rev` and now (added and removed
    ones included); None where `rev` is not in this repository's history."""
    if revision_problem(rev) is not None:
        return None  # never an option or a name for git
    listing = _git("ls-tree", "-r", "--name-only", rev, "--", "ablate")
    if listing is None:
        return None
    paths = {p for p in listing.splitlines() if runs(task, p)} | {
        p for p in _package_files() if runs(task, p)
    }
    return sorted(p for p in paths if _text_at(rev, p) != _text_now(p))


def _text_at(rev: str, path: str) -> bytes | None:
    done = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=ROOT, capture_output=True, timeout=30)
    return result_text(path, done.stdout) if done.returncode == 0 else None


def _text_now(path: str) -> bytes | None:
    p = ROOT / path
    return result_text(path, p.read_bytes()) if p.is_file() else None


def anchors(path: Path = ANCHORS) -> dict[str, dict[str, str]]:
    """task -> {code hash: revision} of the anchors. A line: '<revision> <task> <code hash>  # why'."""
    out: dict[str, dict[str, str]] = {}
    if not path.is_file():
        return out
    for n, line in enumerate(path.read_text().splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if len(words) != 3:
            raise ValueError(f"{path.name} line {n}: expected '<revision> <task> <code hash>  # why'")
        rev, task, h = words
        out.setdefault(task, {})[h] = rev
    return out


@functools.cache
def _anchors() -> dict[str, dict[str, str]]:
    return anchors()


def _git(*args: str) -> str | None:
    """git's output in the repository, None where git is missing or says no."""
    try:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return done.stdout
