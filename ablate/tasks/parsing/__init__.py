"""English constituency parsing data and scoring (paper section 6.3, Table 4).

Pure Python (no torch): Penn Treebank reading and cleaning (:mod:`.tree`), Vinyals et al.
2015 linearization (:mod:`.linearize`), EVALB/COLLINS.prm scoring (:mod:`.evalb`), WSJ
splits and loading (:mod:`.wsj`), a built-in synthetic treebank (:mod:`.builtin`) and
prediction scoring (:mod:`.score`). The search's constraint to well-formed trees
(:mod:`.constrain`, decode.well_formed) works on the decoder's scores; only decoding imports it.
"""

from ablate.data.treebank.builtin import generate_trees, write_builtin_treebank
from ablate.data.treebank.linearize import XX, delinearize, delinearize_with_report, linearize, strip_tags
from ablate.data.treebank.tree import Tree, clean, parse_bracketed, read_mrg, tags, to_string, words
from ablate.data.treebank.wsj import (
    DEV_SECTIONS,
    SPLITS,
    TEST_SECTIONS,
    TRAIN_SECTIONS,
    load_silver,
    load_split,
    load_wsj,
    parallel_text,
)

from .evalb import COLLINS, EvalbParams, EvalbResult, EvalbSummary, SentenceResult, evalb


def __getattr__(name: str):
    # Imported lazily so that `python -m ablate.tasks.parsing.score` does not find the module
    # already imported by its package (runpy's RuntimeWarning).
    if name == "score_predictions":
        from .score import score_predictions

        return score_predictions
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "COLLINS",
    "DEV_SECTIONS",
    "EvalbParams",
    "EvalbResult",
    "EvalbSummary",
    "SPLITS",
    "SentenceResult",
    "TEST_SECTIONS",
    "TRAIN_SECTIONS",
    "Tree",
    "XX",
    "clean",
    "delinearize",
    "delinearize_with_report",
    "evalb",
    "generate_trees",
    "linearize",
    "load_silver",
    "load_split",
    "load_wsj",
    "parallel_text",
    "parse_bracketed",
    "read_mrg",
    "score_predictions",
    "strip_tags",
    "tags",
    "to_string",
    "words",
    "write_builtin_treebank",
]
