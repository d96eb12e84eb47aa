"""Translation, the paper's task (Tables 2 and 3): the model trained on sentence pairs, scored by BLEU on
the dev set during training and by the test protocol after it (`ablate.evaluate`: checkpoint averaging,
sacreBLEU and tokenized BLEU)."""

from __future__ import annotations

from ablate.tasks import Task
from ablate.tasks.bleu import BLEU, bleu_scored, split_bleu


class TranslationTask(Task):
    name = "translation"
    label = "translation: sentence pairs, scored by BLEU"
    metrics = (BLEU,)
    tables = {"table2": "ablate.tasks.translation.table2:table2"}  # and the variations table (Table 3)
    # only its runs run them (a parsing run imports wmt14.py with the registry of sources, calls none of it)
    own_code = ("ablate/tasks/translation/", "ablate/data/wmt14.py")
    paper_table = "../../paper/paper_table3.csv"  # Table 3's figures beside the variations table
    paper_claims = "../../paper/paper_claims3.yaml"  # its conclusions (section 6.2)

    def dev_scorer(self, cfg, prepared, dm):
        return bleu_scored

    def split_metrics(self, cfg, prepared, dm, split, hyps, refs):
        return split_bleu(hyps, refs, split, cfg.data.tgt_lang), {}

    def summary(self, metrics):
        bleu, signature = metrics.get("dev_bleu", float("nan")), metrics.get("dev_bleu_signature", "")
        return [f"dev BLEU   {bleu:.2f}  {signature}"]
