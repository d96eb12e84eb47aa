"""`python -m ablate.new <folder> [--model] [--name NAME]`: a study to edit rather than write (docs/study.md).

The folder gets `study.yaml` (the study's name and reference row), `conf/experiment/<name>.yaml` (its
task, data and training keys), its reference row `conf/model/base.yaml` and a row of its own, a task module
of its own (`<name>_task.py`: reverse a sentence, scored by word accuracy and exact match), its paper's
table and claims, a README with its commands and `tests/test_study.py`, which runs them. With `--model`
its rows train a model and criterion of its own (`<name>_model.py`: a GRU encoder-decoder with attention)
instead of the paper's Transformer. Run from the folder (or below it), every command finds the study's
configs and modules with nothing more typed (ablate.config.study).
"""

from __future__ import annotations

import argparse
import keyword
import re
import shlex
import sys
from pathlib import Path

SCAFFOLD = Path(__file__).resolve().parent / "scaffold"
TEMPLATE = ".tmpl"  # a template's suffix where its own would make it a module of the package
DOT = "dot-"  # a dotfile's prefix in the scaffold (package data leaves out names that start with a dot)


def module_name(name: str) -> str:
    """The study's name as a Python identifier (its modules are `<it>_task`, `<it>_model`)."""
    ident = re.sub(r"\W+", "_", name).strip("_").lower() or "study"
    return f"s_{ident}" if ident[0].isdigit() or keyword.iskeyword(ident) else ident


def files(model: bool) -> dict[str, Path]:
    """The scaffold's files by their path in the study (placeholders left): the study's own, then its rows
    and paper for the Transformer or, with `model`, for its own model."""
    out = {}
    for part in ("study", "model" if model else "transformer"):
        root = SCAFFOLD / part
        for f in sorted(root.rglob("*")):
            if f.is_file() and "__pycache__" not in f.parts:
                rel = f.relative_to(root).as_posix().removesuffix(TEMPLATE)
                out[re.sub(rf"(^|/){DOT}", r"\1.", rel)] = f
    return out


def write(folder: Path, name: str, model: bool) -> list[Path]:
    """Writes the study into `folder` (absent or empty); returns the files written."""
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise FileExistsError(f"{folder}: exists and is not an empty folder; a study starts in a new one")
    module = module_name(name)
    rows = "base,noattn" if model else "base,wide"  # the reference row and the study's own
    fill = {"__STUDY__": name, "__MODULE__": module, "__MODEL_FLAG__": " --model" * model, "__ROWS__": rows}
    written = []
    for rel, src in files(model).items():
        text = src.read_text()
        for key, value in fill.items():
            rel, text = rel.replace(key, value), text.replace(key, value)
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ablate.new", description=__doc__.split("\n")[0])
    p.add_argument("folder", type=Path, help="the study's folder (new, or empty)")
    p.add_argument("--name", help="the study's name (default: the folder's name)")
    p.add_argument("--model", action="store_true", help="a model and criterion of the study's own")
    a = p.parse_args(sys.argv[1:] if argv is None else argv)
    name = a.name or a.folder.resolve().name
    if not re.fullmatch(r"[A-Za-z0-9][\w.-]*", name):
        p.error(f"--name {name!r}: letters, digits, _ . - (it names the experiment and the study)")
    try:
        written = write(a.folder, name, a.model)
    except OSError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for path in written:
        print(path)
    print(f"study {name} in {a.folder}: `cd {shlex.quote(str(a.folder))}` and follow its README.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
