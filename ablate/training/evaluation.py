"""The paper's test protocol (Table 2): average the last N checkpoints, decode, score by the task
(`python -m ablate.evaluate` is its command line).

Checkpoint averaging (6.1): base averages the last 5 checkpoints, big the last 20; Table 3 used none.
Decoding is the run's own (beam 4, alpha 0.6, max length input + 50 by default); the figures are the task's
(`Task.split_metrics`: for translation sacreBLEU and tokenized BLEU, ablate.tasks.bleu). The figures, with
the count of averaged checkpoints, and the hypotheses are kept as an evaluation of their own under its
protocol, its files in its own folder (ablate.records.evaluations): the record and the run's own files stay
as its run wrote them, and a reader shows the run's own figures unless asked for a protocol.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from omegaconf import OmegaConf

from ablate.config import RunConfig, model_config, to_dataclass
from ablate.config.arch import require_search
from ablate.control import faults
from ablate.errors import doing
from ablate.records import evaluations, store
from ablate.records.evaluations import Protocol
from ablate.records.folder import step_checkpoints, step_of
from ablate.tasks import task_of


def average_checkpoints(paths: list[Path]) -> dict[str, torch.Tensor]:
    """The element-wise mean of the model weights of `paths` (loaded with weights_only: no code runs)."""
    if not paths:
        raise ValueError("no checkpoints to average")
    total: dict[str, torch.Tensor] = {}
    for p in paths:
        try:
            state = torch.load(p, map_location="cpu", weights_only=True)["state_dict"]
        except Exception as e:  # noqa: BLE001 - a truncated or foreign file: name it, average nothing
            raise ValueError(
                f"{p}: unreadable checkpoint ({type(e).__name__}); average fewer or delete it"
            ) from None
        for k, v in state.items():
            total[k] = total.get(k, 0) + v.double()
    return {k: (v / len(paths)).float() for k, v in total.items()}


def load_config(run_dir: Path) -> RunConfig:
    rec = store.read_record(run_dir / store.RECORD_NAME)
    return to_dataclass(OmegaConf.create(rec["config"]))


def evaluate_run(
    run_dir: str | Path,
    average: int = 0,
    split: str = "test",
    src: str | None = None,
    ref: str | None = None,
    until_step: int | None = None,
    by_run: bool = False,
    ensemble: tuple[str | Path, ...] = (),
) -> dict:
    """Decode `split` with the last checkpoint, or the mean of the last `average` step checkpoints, and
    score it by the task's split_metrics (translation: sacreBLEU and tokenized BLEU; parsing: EVALB too).
    With `until_step`, only checkpoints up to that step count (a point of a curve); with `ensemble`, the
    runs in those folders (each its checkpoints chosen alike) are searched with this one as one model
    (decode.EnsembleStepper), the evaluation kept with this run. Every evaluation is kept under its
    protocol, the run's record left as it is; `by_run`: the training run's own (train.average_last)."""
    run_dir = Path(run_dir)
    with doing(f"evaluating the run in {run_dir}"):
        return _evaluate(run_dir, average, split, src, ref, until_step, by_run, tuple(map(Path, ensemble)))


def _evaluate(run_dir: Path, average, split, src, ref, until_step, by_run, ensemble=()) -> dict:
    import sentencepiece as spm

    from ablate.data.datamodule import Seq2SeqData, prepare_corpus
    from ablate.training.module import Seq2SeqModule

    rec = store.read_record(run_dir / store.RECORD_NAME)  # read once: its config, id and steps
    cfg = to_dataclass(OmegaConf.create(rec["config"]))
    task = task_of(cfg.task)  # before the corpus: a task may bring its data source
    require_search(cfg, "ablate.evaluate")  # a model that cannot be searched stops here, in one line
    prepared = prepare_corpus(cfg)
    sp = spm.SentencePieceProcessor(model_file=str(prepared.spm_model))
    ckpts = _checkpoints(run_dir, average, until_step)

    def load(cfg: RunConfig, ckpts: list[Path]):
        module = Seq2SeqModule(cfg, model_config(cfg, prepared.meta["vocab_size"]), 1, 1)
        module.load_state_dict(average_checkpoints(ckpts))
        return module.eval()

    module = load(cfg, ckpts)
    members = [_member(cfg, prepared, other, average, until_step, ckpts) for other in ensemble]
    members.sort(key=lambda m: m.run_id)  # one ensemble, one protocol, whatever order it was named in
    ids = [rec["run_id"], *(m.run_id for m in members)]
    if twice := next((i for i in ids if ids.count(i) > 1), None):
        raise ValueError(f"--ensemble: run {twice} given twice; an ensemble is of different runs")
    others = tuple(load(m.cfg, m.ckpts) for m in members)
    dm = Seq2SeqData(cfg.data, prepared, cfg.train.max_tokens, 1, cfg.seed)
    dm.setup()
    split, refs = _split(dm, sp, run_dir, split, src, ref)
    protocol = Protocol(
        split,
        len(ckpts) if average or until_step is not None else 0,
        until_step,
        tuple(step_of(p) for p in ckpts)
        if average or until_step is not None
        else (None if rec.get("steps") is None else (int(rec["steps"]),)),  # last.ckpt: the finished run's
        tuple(m.run_id for m in members),
    )
    if by_run and (kept := _kept_by_run(run_dir, rec["run_id"], protocol)) is not None:
        return kept  # a run stopped after its evaluation was kept, and resumed: it is not made twice
    out = _decode(module, dm, sp, split, len(refs), others, by_run)
    figures, files = task.split_metrics(cfg, prepared, dm, split, out, refs)
    metrics = {**figures, f"{split}_sentences": len(out), f"{split}_averaged_checkpoints": len(ckpts)}
    texts = {f"{split}_hyp": (".hyp.txt", "\n".join(out) + "\n")} | {
        f"{split}_{suffix.split('.')[1]}": (suffix, text) for suffix, text in files.items()
    }  # the task's files beside the hypotheses: test_trees, test_evalb
    evaluations.write(run_dir, rec["run_id"], protocol, metrics, by_run=by_run, texts=texts)
    return metrics if until_step is None else {**metrics, "step": protocol.steps[-1]}


def _kept_by_run(run_dir: Path, run_id: str, protocol: Protocol) -> dict | None:
    """The figures of the training run's own evaluation under `protocol` (of the same checkpoints), where
    one is kept already."""
    for e in evaluations.read(run_dir, run_id):
        if e.by_run and e.protocol == protocol and e.protocol.steps == protocol.steps:
            return e.metrics
    return None


@dataclass(frozen=True)
class Member:
    """Another run of an ensemble: its id, its config and the checkpoints it reads."""

    run_id: str
    cfg: RunConfig
    ckpts: list[Path]


def _member(
    cfg: RunConfig, prepared, other: Path, average: int, until_step: int | None, ckpts: list[Path]
) -> Member:
    """Another run of an ensemble, refused in one line unless it is of
    the same task and prepared corpus (one vocabulary, one split; its model may differ; the search is the
    run's) and, for a curve point (`until_step`), its checkpoints are of the run's steps."""
    from ablate.data.datamodule import prepare_corpus

    rec = store.read_record(other / store.RECORD_NAME)
    theirs = to_dataclass(OmegaConf.create(rec["config"]))
    if theirs.task != cfg.task:
        raise ValueError(f"{other}: a run of task={theirs.task}, not of the run's task={cfg.task}")
    if prepare_corpus(theirs, log=lambda msg: None).root != prepared.root:
        raise ValueError(
            f"{other}: its data config prepares another corpus than the run's: an ensemble searches one "
            "vocabulary and one split"
        )
    mine = _checkpoints(other, average, until_step)
    if until_step is not None and [step_of(p) for p in mine] != [step_of(p) for p in ckpts]:
        raise ValueError(f"{other}: its checkpoints up to step {until_step} are not of the run's steps")
    return Member(str(rec["run_id"]), theirs, mine)


def _checkpoints(run_dir: Path, average: int, until_step: int | None) -> list[Path]:
    if average or until_step is not None:
        last = until_step if until_step is not None else float("inf")
        upto = [p for p in step_checkpoints(run_dir / "checkpoints") if step_of(p) <= last]
        ckpts = upto[-max(average, 1) :]
    else:
        ckpts = [run_dir / "checkpoints" / "last.ckpt"]
    if not ckpts or not all(p.is_file() for p in ckpts):
        raise ValueError(f"{run_dir}: no checkpoints to evaluate")
    return ckpts


def _split(dm, sp, run_dir: Path, split: str, src: str | None, ref: str | None) -> tuple[str, list[str]]:
    """The split to decode and its references: a prepared split, or a source/reference file pair."""
    if src and ref:
        from ablate.data.dataset import Encoded
        from ablate.data.sources import read_lines

        src_lines, refs = read_lines(src), read_lines(ref)
        src_ids, ref_ids = sp.encode(src_lines), sp.encode(refs)
        _fits_one_batch(src, src_ids, dm.max_tokens)
        _fits_one_batch(ref, ref_ids, dm.max_tokens)
        dm.splits["custom"] = Encoded.from_ids(src_ids, ref_ids)
        return "custom", refs
    if split not in dm.splits:
        raise ValueError(f"{run_dir}: the data has no {split!r} split")
    return split, dm.references(split)


def _fits_one_batch(path: str, ids: list[list[int]], max_tokens: int) -> None:
    """A sentence of a given file must fit one decoding batch of the run's size (train.max_tokens, with
    its EOS): the line that does not is named, not the training keys that set the size."""
    for n, sentence in enumerate(ids, 1):
        if len(sentence) + 1 > max_tokens:
            raise ValueError(
                f"{path} line {n}: {len(sentence):,} wordpieces, more than this run decodes in one batch "
                f"({max_tokens:,} tokens with EOS); split or shorten the line"
            )


def _decode(module, dm, sp, split: str, n: int, others: tuple = (), by_run: bool = False) -> list[str]:
    hyps: dict[int, str] = {}
    with torch.no_grad():
        for b in dm.eval_batches(split):
            for i, h in zip(b.index.tolist(), module.translate(b, others)):
                hyps[i] = sp.decode(h)
            if by_run:
                faults.at("evaluation")
    return [hyps[i] for i in range(n)]
