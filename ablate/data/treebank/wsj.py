"""Loading the WSJ part of the Penn Treebank for the parsing experiment (section 6.3, Table 4).

The paper trains on WSJ sections 02-21 (about 40K sentences), tunes on section 22 and
reports F1 on section 23: the standard split, kept here as constants.  A treebank folder is
laid out as in the LDC release, ``<dir>/<section>/*.mrg`` (e.g. ``parsed/mrg/wsj`` of
Treebank-3), or as written by :func:`ablate.data.treebank.builtin.write_builtin_treebank`.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from .linearize import linearize
from .tree import Tree, clean, parse_bracketed, read_mrg, words

__all__ = [
    "TRAIN_SECTIONS",
    "DEV_SECTIONS",
    "TEST_SECTIONS",
    "SPLITS",
    "section_files",
    "load_wsj",
    "load_split",
    "load_silver",
    "parallel_text",
]

TRAIN_SECTIONS: tuple[str, ...] = tuple(f"{i:02d}" for i in range(2, 22))  # 02-21
DEV_SECTIONS: tuple[str, ...] = ("22",)
TEST_SECTIONS: tuple[str, ...] = ("23",)
SPLITS: dict[str, tuple[str, ...]] = {"train": TRAIN_SECTIONS, "dev": DEV_SECTIONS, "test": TEST_SECTIONS}


def _section_name(section: str | int) -> str:
    return f"{int(section):02d}"


def section_files(treebank_dir: str | Path, section: str | int) -> list[Path]:
    """The ``.mrg`` files of one section, sorted; ``FileNotFoundError`` naming the path if none."""
    root = Path(treebank_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"treebank folder not found: {root}")
    folder = root / _section_name(section)
    if not folder.is_dir():
        raise FileNotFoundError(f"WSJ section folder not found: {folder}")
    files = sorted(folder.glob("*.mrg"), key=lambda p: p.name.lower())
    if not files:
        raise FileNotFoundError(f"no .mrg files in WSJ section folder {folder}")
    return files


def load_wsj(treebank_dir: str | Path, sections: Iterable[str | int], split: str = "") -> list[Tree]:
    """Cleaned trees (see :func:`ablate.data.treebank.tree.clean`) of the given sections, in order.

    Malformed files raise ``ValueError`` naming file and line; so does a file that holds no tree (an
    emptied or cut-short copy), which would otherwise shrink its split without a word.
    """
    trees: list[Tree] = []
    for section in sections:
        for path in section_files(treebank_dir, section):
            before = len(trees)
            for raw in read_mrg(path):
                trees.append(_clean_or_raise(raw, str(path)))
            if len(trees) == before:
                where = f"section {_section_name(section)}" + (f" of the {split} split" if split else "")
                raise ValueError(
                    f"{path}: no trees in this file ({where}; {before:,} trees read before it): "
                    "restore it or remove it from the treebank"
                )
    return trees


def load_split(treebank_dir: str | Path, split: str) -> list[Tree]:
    """``load_wsj`` for ``"train"`` (02-21), ``"dev"`` (22) or ``"test"`` (23)."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {sorted(SPLITS)}")
    return load_wsj(treebank_dir, SPLITS[split], split)


def _clean_or_raise(raw: Tree, where: str) -> Tree:
    try:
        return clean(raw)
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None


def load_silver(path: str | Path) -> list[Tree]:
    """Trees for the semi-supervised setting of section 6.3: one bracketed tree per line.

    Blank lines are skipped; each line must hold exactly one tree (``(S ...)``,
    ``(TOP (S ...))`` or ``( (S ...))``).  Trees are cleaned like the WSJ ones, ready to be
    appended to the training trees.  Errors name the file and line.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"silver treebank file not found: {path}")
    trees: list[Tree] = []
    with path.open(encoding="utf-8") as handle:
        for lineno, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            parsed = parse_bracketed(line, source=str(path), first_line=lineno)
            if len(parsed) != 1:
                raise ValueError(f"{where}: expected one tree per line, found {len(parsed)}")
            trees.append(_clean_or_raise(parsed[0], where))
    return trees


def parallel_text(trees: Iterable[Tree], language: str = "tree") -> tuple[list[str], list[str]]:
    """Source and target sentences for seq2seq training (section 6.3, Vinyals et al. 2015).

    Source: the words joined by single spaces.  Target: :func:`ablate.data.treebank.linearize.linearize` in
    ``language`` (``data.tgt_lang``).
    Words are PTB tokens and never contain whitespace, so ``source.split()`` gives them back.
    """
    sources: list[str] = []
    targets: list[str] = []
    for tree in trees:
        sources.append(" ".join(words(tree)))
        targets.append(linearize(tree, language))
    return sources, targets
