"""English constituency parsing (section 6.3, Table 4): the model trained on linearized trees
(ablate.data.treebank), scored by EVALB's F1 (`score`, `evalb`), optionally searched over well-formed
trees only (`constrain`, decode.well_formed)."""

from __future__ import annotations

from ablate.tasks import Task


class ParsingTask(Task):
    name = "parsing"

    def dev_scorer(self, cfg, prepared, dm):
        from ablate.data.treebank.corpus import gold_trees
        from ablate.tasks.parsing.score import parsing_metrics

        sources, gold = dm.sources_text("dev"), gold_trees(prepared.root, "dev", cfg.data)
        return lambda hyps: parsing_metrics(sources, hyps, gold)  # EVALB F1 of dev (6.3)

    def stepper(self, cfg, stepper):
        if not cfg.decode.well_formed:
            return stepper
        from ablate.tasks.parsing.constrain import tree_stepper

        return tree_stepper(stepper, cfg)  # only trees over the source's words

    def split_metrics(self, cfg, prepared, dm, split, hyps):
        """EVALB (COLLINS.prm) figures of the decoded trees of a split (section 23 for Table 4), and the
        hypotheses as bracketed trees, one a line, in `.trees.txt` for EVALB itself."""
        from ablate.data.treebank.corpus import gold_trees
        from ablate.data.treebank.tree import to_string
        from ablate.tasks.parsing.score import figures, score_trees

        if split == "custom":  # --src/--ref: no gold trees
            return {}, {}
        sources = dm.sources_text(split)[: len(hyps)]
        gold = gold_trees(prepared.root, split, cfg.data)[: len(hyps)]
        result, trees, notes = score_trees(sources, hyps, gold)
        text = "\n".join(to_string(t) for t in trees) + "\n"
        return {f"{split}_{k}": v for k, v in figures(result, notes).items()}, {".trees.txt": text}
