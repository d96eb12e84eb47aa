"""Table 3's rows and groups, top to bottom (no heavy imports: the Hydra sweeper plugin reads this)."""

TABLE3_ROWS = ("base", "A1", "A2", "A3", "A4", "B1", "B2", "C1", "C2", "C3", "C4", "C5", "C6", "C7",
               "D1", "D2", "D3", "D4", "E", "big")  # fmt: skip
TABLE3_GROUPS = ("base", "A", "B", "C", "D", "E", "big")
