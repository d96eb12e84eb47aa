"""The Transformer of Vaswani et al. (2017) and its search, in plain PyTorch: the model (`model`), greedy and
beam search over its KV cache or any model's that implements the search contract (`decode`), the
label-smoothed loss and the default criterion (`loss`), Adam and the schedule (`optim`).
Imports nothing of ablate (docs/architecture.md, layer 1)."""
