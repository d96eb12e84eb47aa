"""English constituency parsing (section 6.3, Table 4): the model trained on linearized trees
(ablate.data.treebank), scored by EVALB's F1 (`score`, `evalb`), optionally searched over well-formed
trees only (`constrain`, task_cfg.well_formed); Table 4 (`table4`) and the baselines (`baselines`, `pcfg`)."""

from __future__ import annotations

from dataclasses import dataclass

from ablate.tasks import Metric, Scored, Task, TaskConfig
from ablate.tasks.bleu import BLEU, bleu_scored, split_bleu

F1 = Metric(
    "f1",
    "F1",
    True,
    "EVALB's F1 (COLLINS.prm) of the bracket counts summed over its sentences",
    "f1",
    "dev_f1",
)


@dataclass
class ParsingConfig(TaskConfig):
    """The parsing task's own keys (`task_cfg.*`)."""

    # PTB WSJ trees <treebank_dir>/<section>/*.mrg (train 02-21, dev 22, test 23)
    treebank_dir: str | None = None
    treebank_builtin: bool = False  # instead: write the built-in treebank (data.builtin_* sizes) in the cache
    silver_trees: str | None = None  # data.name=wsj_semi: extra training trees, one bracketed tree a line
    constituent_pairs: bool = False  # also each training tree's constituents of 2+ words as pairs (not paper)
    well_formed: bool = False  # the search writes only well-formed trees over the source (constrain.py)


class ParsingTask(Task):
    name = "parsing"
    label = "constituency parsing: linearized trees, scored by EVALB's F1"
    metrics = (F1, BLEU)  # BLEU of the trees as strings: what the translation view of the task sees
    own_code = ("ablate/tasks/parsing/", "ablate/data/treebank/")
    tables = {"table4": "ablate.tasks.parsing.table4:table4"}
    config = ParsingConfig

    def dev_scorer(self, cfg, prepared, dm):
        from ablate.data.treebank.corpus import gold_trees
        from ablate.tasks.parsing.score import parsing_metrics

        sources, gold = dm.sources_text("dev"), gold_trees(prepared.root, "dev", cfg)

        def score(hyps: list[str], refs: list[str]) -> Scored:
            scored = bleu_scored(hyps, refs)
            scored.figures.update(parsing_metrics(sources, hyps, gold))  # EVALB F1 of dev (6.3)
            return scored

        return score

    def stepper(self, cfg, stepper):
        if not cfg.task_cfg.well_formed:
            return stepper
        from ablate.tasks.parsing.constrain import tree_stepper

        return tree_stepper(stepper, cfg)  # only trees over the source's words

    def split_metrics(self, cfg, prepared, dm, split, hyps, refs):
        """BLEU of the trees as strings, EVALB (COLLINS.prm) figures of the decoded trees of a split
        (the test split for Table 4), the hypotheses as bracketed trees, one a line, in `.trees.txt` for
        EVALB itself, and each sentence's bracket counts in `.evalb.json` (Table 4's paired test)."""
        from ablate.data.treebank.corpus import gold_trees
        from ablate.data.treebank.tree import to_string
        from ablate.tasks.parsing.score import figures, score_trees, sentence_counts

        bleu = split_bleu(hyps, refs, split, cfg.data.tgt_lang)
        if split == "custom":  # --src/--ref: no gold trees
            return bleu, {}
        sources = dm.sources_text(split)[: len(hyps)]
        gold = gold_trees(prepared.root, split, cfg)[: len(hyps)]
        result, trees, notes = score_trees(sources, hyps, gold)
        text = "\n".join(to_string(t) for t in trees) + "\n"
        evalb = {f"{split}_{k}": v for k, v in figures(result, notes).items()}
        return {**bleu, **evalb}, {".trees.txt": text, ".evalb.json": sentence_counts(result)}

    def summary(self, metrics):
        """The dev F1 with what tells a parser from a flat tree: the outputs repaired, the flat-tree floor."""
        m = metrics
        if "f1" not in m:
            return []
        floor = f"; one flat tree a sentence: {m['f1_flat']:.2f}" if m.get("f1_flat") is not None else ""
        le40 = m.get("f1_le40", float("nan"))
        return [
            f"dev F1     {m['f1']:.2f}  (EVALB, COLLINS.prm; <= 40 words: {le40:.2f}; "
            f"{m.get('n_repaired', 0)}/{m.get('n', '?')} outputs repaired{floor})"
        ]
