"""Translation read beside Shazeer (2020), "GLU Variants Improve Transformer", Table 1: the package's
translation task (BLEU, per-wordpiece perplexity) with that paper's rows and claims instead of Table 3's.

    cd studies/glu_variants && MULTI30K_DIR=<folder> python -m ablate.run -m experiment=glu_variants
"""

from __future__ import annotations

from ablate.tasks.translation import TranslationTask


class GluTranslation(TranslationTask):
    name = "glu_translation"
    label = "translation read beside GLU Variants Improve Transformer (Shazeer 2020)"
    tables: dict[str, str] = {}  # no Table 2: the variations table alone
    own_code = ()
    paper_table = "paper_table.csv"  # Table 1's log-perplexities, as perplexities (the file says how)
    paper_claims = "paper_claims.yaml"
