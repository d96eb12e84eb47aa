"""Hydra sweeper `hydra/sweeper: ablate`: the sweep of Hydra's basic sweeper plus Table 3 group letters in
`model=` (`-m model=A,B,C` runs A1..A4, B1, B2, C1..C7). See ablate_sweeper.py."""
