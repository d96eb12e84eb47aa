"""Hydra sweeper `hydra/sweeper: ablate`: Hydra's basic sweeper plus Table 3 group letters in the `model`
sweep (`-m model=A,B,C` runs A1..A4, B1, B2, C1..C7). See ablate_sweeper.py."""
