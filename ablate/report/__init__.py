"""`python -m ablate.report`: Table 3 (and Tables 2 and 4, parameter counts) from result records.

Reads records through ablate.records.store and the row YAMLs; never imports training code or the shared paper
folder (the paper's numbers are copied beside this file as paper_table*.csv).
"""
