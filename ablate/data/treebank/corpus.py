"""A treebank as parallel text (section 6.3, Table 4): the corpus the parsing task trains on.

* :func:`parsing_corpus` turns a treebank into the parallel text the datamodule prepares: the source is
  a sentence's words, the target its linearized tree (:func:`ablate.data.treebank.linearize.linearize`).
  Train is WSJ 02-21 (plus ``task_cfg.silver_trees`` for ``data.name=wsj_semi``, plus each tree's
  constituents for ``task_cfg.constituent_pairs``), dev 22, test 23, read from ``task_cfg.treebank_dir`` or
  from the built-in treebank (``task_cfg.treebank_builtin``), written once into ``<cache_dir>/treebanks/``.
  Each function takes the run's config: its ``data`` and the parsing task's own keys (``task_cfg``).
* The gold trees of dev and test go with the prepared corpus: :class:`ParsingCorpus` writes
  ``dev.gold.mrg`` / ``test.gold.mrg`` (one cleaned tree a line, POS tags kept, since EVALB deletes
  punctuation by the gold tags) next to ``dev.src.txt``; :func:`gold_trees` reads them back.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from ablate.config import ConfigError, RunConfig
from ablate.data import sources
from ablate.data.treebank.builtin import BUILTIN_VERSION, write_builtin_treebank
from ablate.data.treebank.linearize import LANGUAGES
from ablate.data.treebank.tree import Tree, parse_bracketed, to_string, words
from ablate.data.treebank.wsj import load_silver, load_split, parallel_text

__all__ = [
    "NAMES",
    "GOLD_SPLITS",
    "ParsingCorpus",
    "treebank_root",
    "load_trees",
    "constituents",
    "parsing_corpus",
    "gold_path",
    "gold_trees",
]

NAMES = ("wsj", "wsj_semi")  # data.name values of the parsing task (the report tells them apart)
GOLD_SPLITS = ("dev", "test")


@dataclass
class ParsingCorpus(sources.Corpus):
    """A corpus that also carries the gold trees of its scored splits, in the splits' order."""

    gold: dict[str, list[Tree]] = field(default_factory=dict)

    def write_extras(self, folder: str | Path) -> None:
        """Write ``<split>.gold.mrg`` for dev and test into a prepared-corpus folder."""
        for split, trees in self.gold.items():
            write_trees(gold_path(folder, split), trees)


def treebank_root(run: RunConfig) -> Path:
    """The treebank folder: ``task_cfg.treebank_dir``, or the built-in treebank written into the cache."""
    cfg, task = run.data, run.task_cfg
    if task.treebank_builtin:
        name = (
            f"builtin-v{BUILTIN_VERSION}-seed{cfg.builtin_seed}-"
            f"{cfg.builtin_train}-{cfg.builtin_dev}-{cfg.builtin_test}"
        )
        return write_builtin_treebank(
            Path(cfg.cache_dir) / "treebanks" / name,
            seed=cfg.builtin_seed,
            n_train=cfg.builtin_train,
            n_dev=cfg.builtin_dev,
            n_test=cfg.builtin_test,
        )
    if not task.treebank_dir:
        raise ConfigError(
            "task_cfg.treebank_dir must name the Penn Treebank WSJ folder (<dir>/<section>/*.mrg, sections "
            "02-23, e.g. parsed/mrg/wsj of Treebank-3); or run experiment=wsj_parsing_builtin"
        )
    root = Path(task.treebank_dir).expanduser()
    if not root.is_dir():
        raise ConfigError(f"task_cfg.treebank_dir={task.treebank_dir}: no such folder")
    return root


def load_trees(run: RunConfig) -> dict[str, list[Tree]]:
    """Cleaned trees of train (02-21, + silver for wsj_semi), dev (22) and test (23)."""
    cfg, task = run.data, run.task_cfg
    if cfg.name not in NAMES:
        raise ConfigError(f"data.name={cfg.name!r} is not a parsing data set ({', '.join(NAMES)})")
    if cfg.tgt_lang not in LANGUAGES:
        raise ConfigError(
            f"data.tgt_lang={cfg.tgt_lang!r} is not a tree language of the parser ({', '.join(LANGUAGES)})"
        )
    if cfg.name == "wsj_semi" and not task.silver_trees:
        raise ConfigError("data.name=wsj_semi needs task_cfg.silver_trees=<file of trees, one a line>")
    if cfg.name == "wsj" and task.silver_trees:
        raise ConfigError(
            "task_cfg.silver_trees is the semi-supervised setting: set data.name=wsj_semi "
            "(and data.vocab_size=32000, section 6.3) so that records tell the two settings apart"
        )
    root = treebank_root(run)
    trees = {split: load_split(root, split) for split in ("train", "dev", "test")}
    if task.silver_trees:
        trees["train"] = trees["train"] + load_silver(task.silver_trees)
    if task.constituent_pairs:
        trees["train"] = trees["train"] + constituents(trees["train"])
    for split in ("train", "dev"):
        if not trees[split]:
            raise sources.DataError(f"{root}: no {split} trees (sections of the {split} split are empty)")
    return trees


def constituents(trees: list[Tree]) -> list[Tree]:
    """Each constituent of two or more words of each tree, as a tree of its own, the whole tree left out
    (``task_cfg.constituent_pairs``, not in the paper). A short span and its subtree show the model which
    source words an output bracket covers, which 3,669 whole sentences alone do not teach it on the WSJ
    sample."""
    out: list[Tree] = []
    for tree in trees:
        stack = tree.children[::-1]
        while stack:  # in preorder, as they are written
            node = stack.pop()
            if node.is_preterminal:
                continue
            if len(words(node)) >= 2:
                out.append(node)
            stack += node.children[::-1]
    return out


def _split(trees: list[Tree], language: str) -> sources.Split:
    src, tgt = parallel_text(trees, language)
    return sources.Split(src, tgt)


def parsing_corpus(run: RunConfig) -> ParsingCorpus:
    """The parallel text of the parsing task; its key is a hash of the trees' text (and split sizes) and of
    the target language when it is not the default."""
    trees, cfg = load_trees(run), run.data
    h = hashlib.sha256(b"ablate-parsing-corpus-v1")
    if cfg.tgt_lang != "tree":
        h.update(f"|{cfg.tgt_lang}|".encode())
    for split in ("train", "dev", "test"):
        h.update(f"|{split}:{len(trees[split])}|".encode())
        for t in trees[split]:
            h.update(to_string(t).encode("utf-8"))
            h.update(b"\n")
    splits = {name: _split(ts, cfg.tgt_lang) for name, ts in trees.items() if ts}
    gold = {name: trees[name] for name in GOLD_SPLITS if trees[name]}
    return ParsingCorpus(splits, h.hexdigest()[:16], cfg.src_lang, cfg.tgt_lang, gold=gold)


# -- gold trees ------------------------------------------------------------------------------------------


def gold_path(folder: str | Path, split: str) -> Path:
    return Path(folder) / f"{split}.gold.mrg"


def write_trees(path: str | Path, trees: list[Tree]) -> None:
    Path(path).write_text("".join(to_string(t) + "\n" for t in trees), encoding="utf-8")


def read_trees(path: str | Path) -> list[Tree]:
    """Trees written by :func:`write_trees` (already cleaned: read back as they are)."""
    return parse_bracketed(Path(path).read_text(encoding="utf-8"), source=str(path))


def gold_trees(prepared_root: str | Path, split: str = "dev", cfg: RunConfig | None = None) -> list[Tree]:
    """The cleaned gold trees of ``split`` in the prepared corpus's order (POS tags kept).

    Read from ``<prepared_root>/<split>.gold.mrg``; a folder prepared without it (before the hook that
    writes it) falls back to re-reading the treebank of ``cfg``.
    """
    if split not in GOLD_SPLITS:
        raise ValueError(f"gold trees are kept for {', '.join(GOLD_SPLITS)}, not {split!r}")
    path = gold_path(prepared_root, split)
    if path.is_file():
        return read_trees(path)
    if cfg is None:
        raise FileNotFoundError(f"{path}: no gold trees (and no run config to re-read the treebank)")
    return load_split(treebank_root(cfg), split)
