"""The paper's test protocol (Table 2): average the last N checkpoints, decode, score two ways.

    python -m ablate.evaluate RUN_DIR [--average 5] [--split test] [--src F --ref F] [--until-step S]

Checkpoint averaging (6.1): base averages the last 5 checkpoints, big the last 20; Table 3 used none.
Decoding is the run's own (beam 4, alpha 0.6, max length input + 50 by default). Two BLEU figures come from
the same hypotheses, each labelled:
- sacreBLEU on detokenized text, with its signature (what to compare across papers);
- tokenized, compound-split BLEU: Moses tokenization, then "Mitte-Links" -> "Mitte ##AT##-##AT## Links",
  then BLEU on those tokens (what tensor2tensor's get_ende_bleu.sh computed for the paper's 27.3 / 28.4).
Hypotheses are saved beside the record; the record's metrics gain test_bleu, test_bleu_tok and the count
of averaged checkpoints.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import sacrebleu
import torch
from omegaconf import OmegaConf

from ablate import results
from ablate.config import RunConfig, effective_model, to_dataclass

_COMPOUND = re.compile(r"(\S)-(\S)")


def step_checkpoints(run_dir: Path) -> list[Path]:
    """The run's step checkpoints, oldest first (file names carry the step)."""
    return sorted(run_dir.glob("checkpoints/step*.ckpt"), key=checkpoint_step)


def checkpoint_step(path: Path) -> int:
    return int(re.sub(r"\D", "", path.stem))


def average_checkpoints(paths: list[Path]) -> dict[str, torch.Tensor]:
    """The element-wise mean of the model weights of `paths` (loaded with weights_only: no code runs)."""
    if not paths:
        raise ValueError("no checkpoints to average")
    total: dict[str, torch.Tensor] = {}
    for p in paths:
        state = torch.load(p, map_location="cpu", weights_only=True)["state_dict"]
        for k, v in state.items():
            total[k] = total.get(k, 0) + v.double()
    return {k: (v / len(paths)).float() for k, v in total.items()}


def tokenized_bleu(hyps: list[str], refs: list[str], lang: str) -> float:
    """BLEU on Moses-tokenized, compound-split text (the paper's scoring; see the module docstring)."""
    from sacremoses import MosesTokenizer

    tok = MosesTokenizer(lang=lang)

    def prep(line: str) -> str:
        text = tok.tokenize(line, return_str=True, escape=False)
        return _COMPOUND.sub(r"\1 ##AT##-##AT## \2", _COMPOUND.sub(r"\1 ##AT##-##AT## \2", text))

    return sacrebleu.corpus_bleu(
        [prep(h) for h in hyps], [[prep(r) for r in refs]], tokenize="none", force=True
    ).score


def load_config(run_dir: Path) -> RunConfig:
    rec = results.read_record(run_dir / results.RECORD_NAME)
    return to_dataclass(OmegaConf.create(rec["config"]))


def evaluate_run(
    run_dir: str | Path,
    average: int = 0,
    split: str = "test",
    src: str | None = None,
    ref: str | None = None,
    until_step: int | None = None,
) -> dict:
    """Decode `split` with the last checkpoint, or the mean of the last `average` step checkpoints, and
    score it. With `until_step`, only checkpoints up to that step count (a point of a BLEU-vs-time curve):
    the hypotheses get their own file and the run's record is left as it is."""
    import sentencepiece as spm

    from ablate.data.datamodule import TranslationData, prepare_corpus
    from ablate.data.dataset import Encoded
    from ablate.lit import TranslationModule

    run_dir = Path(run_dir)
    cfg = load_config(run_dir)
    prepared = prepare_corpus(cfg.data)
    sp = spm.SentencePieceProcessor(model_file=str(prepared.spm_model))
    if average or until_step is not None:
        last = until_step if until_step is not None else float("inf")
        ckpts = [p for p in step_checkpoints(run_dir) if checkpoint_step(p) <= last][-max(average, 1) :]
    else:
        ckpts = [run_dir / "checkpoints" / "last.ckpt"]
    if not ckpts or not all(p.is_file() for p in ckpts):
        raise ValueError(f"{run_dir}: no checkpoints to evaluate")
    state = average_checkpoints(ckpts)
    module = TranslationModule(cfg, effective_model(cfg, prepared.meta["vocab_size"]), 1, 1)
    module.load_state_dict(state)
    module.eval()
    dm = TranslationData(cfg.data, prepared, cfg.train.max_tokens, 1, cfg.seed)
    dm.setup()
    if src and ref:
        from ablate.data.sources import read_lines

        src_lines, refs = read_lines(src), read_lines(ref)
        dm.splits["custom"] = Encoded.from_ids(sp.encode(src_lines), sp.encode(refs))
        split = "custom"
    else:
        if split not in dm.splits:
            raise ValueError(f"{run_dir}: the data has no {split!r} split")
        refs = dm.references(split)
    hyps: dict[int, str] = {}
    with torch.no_grad():
        for b in dm.eval_batches(split):
            for i, h in zip(b.index.tolist(), module.translate(b)):
                hyps[i] = sp.decode(h)
    out = [hyps[i] for i in range(len(refs))]
    bleu = sacrebleu.metrics.BLEU()
    score = bleu.corpus_score(out, [refs])
    if until_step is not None:
        tag = f"{split}.step{checkpoint_step(ckpts[-1])}.avg{len(ckpts)}"
    else:
        tag = f"{split}.avg{len(ckpts)}" if average else split
    results.atomic_write_text(run_dir / f"{tag}.hyp.txt", "\n".join(out) + "\n")
    metrics = {
        f"{split}_bleu": score.score,
        f"{split}_bleu_signature": str(bleu.get_signature()),
        f"{split}_bleu_tok": tokenized_bleu(out, refs, cfg.data.tgt_lang),
        f"{split}_averaged_checkpoints": len(ckpts),
        f"{split}_sentences": len(out),
    }
    if until_step is not None:
        return {**metrics, "step": checkpoint_step(ckpts[-1])}
    rec = results.read_record(run_dir / results.RECORD_NAME)
    rec.setdefault("metrics", {}).update(metrics)
    rec.setdefault("files", {})[f"{split}_hyp"] = f"{tag}.hyp.txt"
    results.atomic_write_json(run_dir / results.RECORD_NAME, rec)
    return metrics


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ablate.evaluate", description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir")
    ap.add_argument(
        "--average", type=int, default=0, help="average the last N step checkpoints (0: last.ckpt)"
    )
    ap.add_argument("--split", default="test")
    ap.add_argument(
        "--until-step", type=int, help="only checkpoints up to this step (a curve point; record untouched)"
    )
    ap.add_argument("--src", help="a source file to translate instead of the split")
    ap.add_argument("--ref", help="its reference translations")
    args = ap.parse_args(argv)
    try:
        m = evaluate_run(args.run_dir, args.average, args.split, args.src, args.ref, args.until_step)
    except (ValueError, OSError) as e:
        print(f"error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    for k, v in m.items():
        print(f"{k:28s} {v:.2f}" if isinstance(v, float) else f"{k:28s} {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
