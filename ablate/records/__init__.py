"""What a run leaves behind: its identity (`identity`), its folder (`folder`: atomic writes, the lock),
the record and its schema (`store`), its status (`status`), whether it is stale (`staleness`), its W&B
run (`tracking`). Nothing here decides a figure of a run."""
