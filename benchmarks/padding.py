"""Padding in training batches: the share of padded positions in the (B, S) source and (B, T) target
tensors of one epoch of micro-batches, as ablate.data.batching plans them (token-bucketed: sorted by the
longer side's length, then the source's, random ties, cut at max_tokens), on the Multi30k training set
with the shared 8K BPE.

    python -m benchmarks.padding --root ../shared/data/multi30k --max-tokens 2048 4096 25000
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from ablate.config import DataConfig
from ablate.data.batching import StepSampler
from ablate.data.datamodule import prepare_corpus
from ablate.data.dataset import Encoded


def padding(src_lens: np.ndarray, tgt_lens: np.ndarray, max_tokens: int, seed: int = 1) -> dict:
    """Pad share per side over one epoch, of the lengths the training loader gives the sampler (wordpieces
    + 1: EOS on the source, BOS/EOS on the target, as collate builds them)."""
    src_lens, tgt_lens = src_lens + 1, tgt_lens + 1
    plan = StepSampler(src_lens, tgt_lens, max_tokens, accumulate=1, seed=seed).epoch_plan(0)
    out = {"max_tokens": max_tokens, "batches": 0}
    all_slots = all_real = 0
    for side, lens in (("src", src_lens), ("tgt", tgt_lens)):
        slots = real = 0
        for step in plan:
            for idx in step:
                n = lens[idx]
                slots += len(idx) * int(n.max())
                real += int(n.sum())
        out[f"{side}_pad"] = 1 - real / slots
        all_slots, all_real = all_slots + slots, all_real + real
        out[f"{side}_slots_per_batch"] = slots / sum(len(s) for s in plan)
    out["batches"] = sum(len(s) for s in plan)
    out["pad"] = 1 - all_real / all_slots  # both sides together
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", required=True, help="a Multi30k folder (train/val/test_2016_flickr.{en,de}.gz)")
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--max-tokens", type=int, nargs="+", default=[2048, 4096])
    args = ap.parse_args(argv)
    cfg = DataConfig(name="multi30k", root=args.root, vocab_size=args.vocab)
    cfg.cache_dir = str(Path.home() / ".cache" / "ablate")
    train = Encoded.load(prepare_corpus(cfg).encoded("train"))
    print(f"{len(train.src_lens):,} training pairs; mean length src {train.src_lens.mean():.1f}, "
          f"tgt {train.tgt_lens.mean():.1f} wordpieces")  # fmt: skip
    for mt in args.max_tokens:
        r = padding(train.src_lens, train.tgt_lens, mt)
        print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in r.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
