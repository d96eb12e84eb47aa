"""Treebanks as data (section 6.3): Penn Treebank trees read and cleaned (`tree`), the WSJ sections
(`wsj`), a built-in synthetic treebank (`builtin`), trees linearized as target text (`linearize`, after
Vinyals et al. 2015) and a treebank as the parallel corpus the parsing task trains on (`corpus`).
Pure Python; only parsing runs import it."""
