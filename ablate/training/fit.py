"""run_worker(cfg, prepared) -> record: this process's part of a run (all of it on one device; one rank
under DDP). Build the data, the model and the trainer; fit; evaluate the final weights; write the record.

Any failure after the record exists leaves it `failed` with the reason; a preempted run leaves it `running`
with a note and resumes from its newest readable checkpoint when the same command runs again.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
import warnings
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytorch_lightning as pl
import torch
from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO
from pytorch_lightning.callbacks import Callback, ModelCheckpoint
from pytorch_lightning.utilities.exceptions import SIGTERMException

from ablate.config import (
    RunConfig,
    accumulation,
    model_config,
    preset_name,
    step_tokens,
    total_steps,
)
from ablate.config.arch import paper_scale_model
from ablate.control import faults
from ablate.control.progress import ProgressLines, StepProgress
from ablate.control.stop import StopAtStep, slurm_environment
from ablate.data.datamodule import Prepared, Seq2SeqData
from ablate.errors import typed_line
from ablate.nn.model import count_parameters
from ablate.records import folder, identity, status, store, tracking
from ablate.tasks import dev_scorer, task_of
from ablate.training.callbacks import (
    Budget,
    Curves,
    Preempted,
    TimeLimit,
    TrainClock,
)
from ablate.training.hardware import (
    assigned_devices,
    device_name,
    global_rank,
    keep_freed_memory,
    resolve_precision,
)
from ablate.training.module import Seq2SeqModule

# Warnings Lightning prints on every run, or every resumed one, that say nothing about this one: a
# deprecation inside its own pytree helper; a note that our transfer_batch_to_device (which moves our Batch
# dataclass) is used; and that a resumed run's checkpoint folder "exists and is not empty", as it must.
warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*")
warnings.filterwarnings("ignore", message=r".*overridden `transfer_batch_to_device`.*")
warnings.filterwarnings("ignore", message=r"Checkpoint directory .* exists and is not empty")


class CheckpointError(ValueError):
    pass


def run_worker(cfg: RunConfig, prepared: Prepared, facts: dict | None = None) -> dict:
    """Build, fit, evaluate, record. One piece: the try block must hold every step after the record is
    written, so that any failure leaves the record `failed` with its reason. `facts`: more fields of the
    record as it starts (the job's estimate of its time)."""
    _set_up_process(cfg)
    out, rank0 = identity.run_dir(cfg), global_rank() == 0
    out.mkdir(parents=True, exist_ok=True)
    rec_path = out / store.RECORD_NAME
    t_start = time.perf_counter()
    record = store.new_record(
        cfg,
        data={"name": cfg.data.name, **_data_facts(prepared)},
        data_hash=prepared.meta["corpus_key"],
        devices_assigned=assigned_devices(),  # hydra/launcher=gpus: the ids this job held
        **(facts or {}),
    )
    if rank0:
        record = status.transition(rec_path, "start", record)
    logger, trainer = None, None
    try:
        resume = _resume_state(out / "checkpoints", out / "curves.jsonl")
        dm = Seq2SeqData(
            cfg.data, prepared, cfg.train.max_tokens, accumulation(cfg), cfg.seed,
            resume_position=resume.position if resume else None,
        )  # fmt: skip
        dm.setup()
        clock = TrainClock()  # before the callbacks that read it
        budget = _budget(cfg, out, clock)
        module = _module(cfg, prepared, dm, budget)
        if resume:
            resume.check_architecture(module)
        record.update(_model_facts(cfg, module))
        if rank0:
            status.update(rec_path, record)
        logger = _logger(cfg, out) if rank0 else False
        trainer = _trainer(cfg, out, logger, _callbacks(cfg, out, clock, budget))
        trainer.fit(module, datamodule=dm, ckpt_path=str(resume.path) if resume else None)
        train_time = clock.elapsed()  # across restarts: a resumed run counts its earlier processes' training
        final = _final_eval(cfg, trainer, module, dm)
    except SIGTERMException:  # a stop signal: the checkpoint is written; who sent it decides the status
        step = trainer.global_step if trainer else 0
        if rank0:
            status.update(rec_path, {**record, "stopped_at_step": step})
        tracking.finish(logger)
        raise Preempted(step, out / "checkpoints" / "last.ckpt") from None
    except BaseException as e:  # record the failure (or Ctrl-C), then let the caller decide
        if rank0:
            _record_failure(rec_path, record, e, trainer)
        tracking.finish(logger)
        raise
    if rank0:
        timing = {"wall_time_s": time.perf_counter() - t_start, "train_time_s": train_time}
        record = _finish(cfg, out, record, trainer, module, dm, final, timing)
        _log_final(logger, record, final, dm.sources_text("dev"), module.references, module.metrics)
    tracking.finish(logger, [rec_path, out / "curves.jsonl", out / "dev_sentences.npz"])
    return record


def _record_failure(path: Path, record: dict, e: BaseException, trainer) -> None:
    if _is_ctrl_c(e):
        step = trainer.global_step if trainer else 0
        status.transition(path, "interrupt", record, status.CTRL_C, stopped_at_step=step)
    else:
        status.transition(path, "fail", record, typed_line(e), traceback=traceback.format_exc(limit=5))


def _is_ctrl_c(e: BaseException) -> bool:
    """Ctrl-C, as Python raises it or as Lightning answers it in fit (exit(1) raised while handling it)."""
    return isinstance(e, KeyboardInterrupt) or (
        isinstance(e, SystemExit) and isinstance(e.__context__, KeyboardInterrupt)
    )


# -- building -------------------------------------------------------------------------------------------


def _set_up_process(cfg: RunConfig) -> None:
    if cfg.trainer.threads:
        torch.set_num_threads(cfg.trainer.threads)
    if cfg.trainer.accelerator == "cpu" or not torch.cuda.is_available():
        keep_freed_memory()
    pl.seed_everything(cfg.seed, workers=True, verbose=False)


def _data_facts(prepared: Prepared) -> dict:
    meta = prepared.meta
    return {"corpus_key": meta["corpus_key"], "splits": meta["splits"]}


def _module(cfg: RunConfig, prepared: Prepared, dm: Seq2SeqData, budget: Budget | None) -> Seq2SeqModule:
    """The model (initialized from the seed: nothing before it draws from the random generators), with the
    tokenizer and dev references it decodes against, and the task's scorer and declared metrics."""
    import sentencepiece as spm

    references = dm.references("dev")[: cfg.decode.dev_limit or None]
    task = task_of(cfg.task)
    module = Seq2SeqModule(
        cfg,
        model_config(cfg, prepared.meta["vocab_size"]),
        total_steps(cfg),
        accumulation(cfg),
        tokenizer=spm.SentencePieceProcessor(model_file=str(prepared.spm_model)),
        references=references,
        scorer=dev_scorer(task, cfg, prepared, dm),  # checked: every declared metric reported
        metrics=task.metrics,
        budget=budget,
    )
    if cfg.train.compile:
        module.model.compile()  # in place: forward is compiled, state_dict keys stay the same
    return module


def _model_facts(cfg: RunConfig, module: Seq2SeqModule) -> dict:
    """What ran: the model after recipe and scale, its parameter counts, and the batch a step holds."""
    with torch.device("meta"):  # the row at the paper's size (a researcher's model: its config's)
        params_paper = count_parameters(paper_scale_model(cfg, 37_000))
    world = cfg.trainer.devices * cfg.trainer.num_nodes
    return {
        "batch": {"devices": world, "accumulate": accumulation(cfg), "max_tokens_per_step": step_tokens(cfg)},
        "model_effective": asdict(module.model.cfg),
        "params": count_parameters(module.model),
        "params_paper_scale": params_paper,
    }


def _logger(cfg: RunConfig, out: Path):
    """The run's logger; its config is the run's, plus flat keys a W&B panel can filter and group on (the
    Table 3 row and group, the preset) and its task's paper's figures for the row (Task.paper_figures)."""
    tags = [cfg.model.group, f"seed{cfg.seed}"]
    paper = task_of(cfg.task).paper_figures()
    flat = {
        "table3_row": cfg.model.name,
        "table3_group": cfg.model.group,
        "preset": preset_name(cfg),
        "model_arch": cfg.model.arch,  # a panel groups by architecture; its keys are model.args
        **dict.fromkeys(next(iter(paper.values()), {})),  # a row not in the paper's table: None
        **paper.get(cfg.model.name, {}),
    }
    config = {**asdict(cfg), **flat}
    return tracking.make_logger(
        cfg.logger, out, identity.run_id(cfg), cfg.model.name, cfg.sweep_name, tags, config,
        task_of(cfg.task).metrics,
    )  # fmt: skip


def _budget(cfg: RunConfig, out: Path, clock: TrainClock) -> Budget | None:
    t = cfg.train
    if t.budget_minutes is None:
        return None
    return Budget(t.budget_minutes, out / "checkpoints", clock, t.warmup_steps, t.checkpoint_every)


def _callbacks(cfg: RunConfig, out: Path, clock: TrainClock, budget: Budget | None) -> list[Callback]:
    ckpt_dir = out / "checkpoints"
    ckpt = ModelCheckpoint(
        dirpath=ckpt_dir,
        filename="step{step:07d}",
        auto_insert_metric_name=False,
        every_n_train_steps=cfg.train.checkpoint_every,
        save_last=True,
        save_top_k=cfg.train.keep_checkpoints,
        monitor="step",
        mode="max",
    )
    callbacks = [
        ckpt,
        StopAtStep(ckpt_dir / "last.ckpt"),
        clock,
        Curves(out / "curves.jsonl", clock),
        TimeLimit(cfg.train.max_minutes, clock),
        *([budget] if budget else []),
        *faults.callbacks(),
    ]
    if _bar(cfg):
        callbacks.append(StepProgress(total_steps(cfg) * accumulation(cfg)))
    elif cfg.trainer.progress_bar:  # no terminal to redraw a bar on: plain lines
        callbacks.append(ProgressLines(total_steps(cfg), clock))
    return callbacks


def _bar(cfg: RunConfig) -> bool:
    """A progress bar only on a terminal: elsewhere its carriage returns make one unreadable line."""
    return cfg.trainer.progress_bar and sys.stdout.isatty()


class AtomicCheckpointIO(TorchCheckpointIO):
    """Checkpoints are all or nothing: written beside their name, then renamed (a full disk or a kill leaves
    the previous files as they were), and a failed write names the file."""

    def save_checkpoint(self, checkpoint, path, storage_options=None) -> None:
        path = Path(path)
        tmp = path.with_name(f".{path.name}.tmp")
        try:
            super().save_checkpoint(checkpoint, tmp, storage_options)
            os.replace(tmp, path)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            raise CheckpointError(f"{path}: could not write the checkpoint ({e.strerror or e})") from None


def _trainer(cfg: RunConfig, out: Path, logger, callbacks: list[Callback]) -> pl.Trainer:
    t, accumulate = cfg.trainer, accumulation(cfg)
    strategy = t.strategy
    if strategy == "auto" and t.devices * t.num_nodes > 1:
        from pytorch_lightning.strategies import DDPStrategy

        strategy = DDPStrategy(process_group_backend="nccl" if t.accelerator == "gpu" else "gloo")
    return pl.Trainer(
        accelerator=t.accelerator,
        devices=t.devices,
        num_nodes=t.num_nodes,
        precision=resolve_precision(t.precision, t.accelerator),
        strategy=strategy,
        plugins=[AtomicCheckpointIO(), *filter(None, [slurm_environment()])],
        max_steps=total_steps(cfg),
        accumulate_grad_batches=accumulate,
        val_check_interval=cfg.train.val_every * accumulate,
        check_val_every_n_epoch=None,
        num_sanity_val_steps=0,
        logger=logger,
        callbacks=callbacks,
        enable_progress_bar=_bar(cfg),
        enable_model_summary=False,
        gradient_clip_val=cfg.train.grad_clip or None,
        use_distributed_sampler=False,
        log_every_n_steps=10,
        default_root_dir=str(out),
        limit_val_batches=1.0,
    )


# -- resuming -------------------------------------------------------------------------------------------


class ResumeState:
    """The checkpoint a run continues from: the newest readable of last.ckpt and the step checkpoints."""

    def __init__(self, path: Path, state: dict):
        self.path, self.state = path, state
        self.step = int(state.get("global_step", 0))
        pos = state.get("ablate", {}).get("position")
        self.position = tuple(pos) if pos else None  # (epoch, step) of the data stream

    def check_architecture(self, module: torch.nn.Module) -> None:
        ours = {k: v.shape for k, v in module.state_dict().items()}
        theirs = {k: v.shape for k, v in self.state.get("state_dict", {}).items()}
        if ours != theirs:
            bad = sorted(set(ours) ^ set(theirs)) or [k for k in ours if ours[k] != theirs[k]]
            raise CheckpointError(
                f"{self.path}: checkpoint of a different architecture (first difference: {bad[0]})"
            )


def _resume_state(ckpt_dir: Path, curves: Path) -> ResumeState | None:
    """The newest checkpoint that loads (a kill -9 can truncate last.ckpt mid-write when it is not written
    atomically; the step checkpoints beside it still hold the run). Curve rows after its step are dropped,
    so that the resumed run does not write them twice."""
    candidates = sorted(ckpt_dir.glob("step*.ckpt"), reverse=True)
    if (ckpt_dir / "last.ckpt").is_file():
        candidates.insert(0, ckpt_dir / "last.ckpt")
    unreadable = []
    for path in candidates:
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception:  # noqa: BLE001 - any unreadable file is the same problem: try the next one
            unreadable.append(path.name)
            continue
        found = ResumeState(path, state)
        if unreadable:
            print(f"[ablate] skipped unreadable checkpoint(s): {', '.join(unreadable)}")
        if curves.is_file():
            rows = [r for r in curves.read_text().splitlines() if r and json.loads(r)["step"] <= found.step]
            folder.atomic_write_text(curves, "".join(r + "\n" for r in rows))
        print(f"[ablate] resuming from {path} (step {found.step})")
        return found
    if unreadable:
        raise CheckpointError(
            f"{ckpt_dir}: no readable checkpoint ({', '.join(unreadable)}); delete them to restart the run, "
            "or resume=false"
        )
    if curves.is_file():  # no checkpoint (killed before the first, or the folder copied without them):
        curves.unlink()  # the run starts from step 0, so the curve starts again with it
    return None


# -- evaluating and recording ---------------------------------------------------------------------------


def _final_eval(cfg: RunConfig, trainer: pl.Trainer, module: Seq2SeqModule, dm: Seq2SeqData) -> dict:
    """Dev perplexity and the task's figures (beam search) of the final weights, with per-sentence
    statistics (a validate pass outside fit always decodes)."""
    trainer.validate(module, dataloaders=dm.eval_loader("dev", cfg.decode.dev_limit), verbose=False)
    return dict(module.last_eval)


def _finish(cfg, out, record, trainer, module, dm, final, timing: dict) -> dict:
    """Rank 0: write the dev outputs and the finished record; under average_last, decode the test set."""
    _write_outputs(out, final)
    tokens = module.train_tokens * trainer.world_size
    record.update(
        steps=trainer.global_step,
        target_tokens=tokens,
        **timing,
        tokens_per_s=tokens / max(timing["train_time_s"], 1e-9),
        flops_estimate=6.0 * record["params"] * tokens,
        device=device_name(trainer),
        precision=str(trainer.precision),  # what ran: trainer.precision=auto resolves per machine
        world_size=trainer.world_size,
        metrics={
            **{k: final[k] for k in ("dev_ppl", "dev_nll_sum", "dev_tokens")},
            **final["figures"],  # the task's (ablate.tasks: its declared metrics and what they come with)
        },
        files={
            "curves": "curves.jsonl",
            "dev_hyp": "dev.hyp.txt",
            "dev_sentences": "dev_sentences.npz",
            "checkpoint": "checkpoints/last.ckpt",
        },
    )
    m = trainer.callback_metrics
    if "train/loss" in m:
        record["metrics"]["train_loss"] = float(m["train/loss"])
    record = status.transition(out / store.RECORD_NAME, "finish", record)
    if cfg.train.average_last and "test" in dm.splits:  # Table 2: average, decode the test set
        from ablate.training.evaluation import evaluate_run

        test = evaluate_run(out, cfg.train.average_last, by_run=True)
        record = {**record, "metrics": {**record["metrics"], **test}}
    return record


def _write_outputs(out: Path, final: dict) -> None:
    folder.atomic_write_text(out / "dev.hyp.txt", "\n".join(final.get("hyps", [])) + "\n")
    tmp = out / ".dev_sentences.tmp.npz"
    np.savez(tmp, **final["sentences"])  # nll, tokens and the task's per-sentence statistics
    os.replace(tmp, out / "dev_sentences.npz")


def _log_final(logger, record: dict, final: dict, sources: list[str], refs: list[str], metrics) -> None:
    if not logger:
        return
    try:
        logger.log_metrics(
            {
                "final/dev_ppl": final["dev_ppl"],
                **{
                    f"final/dev_{m.name}": final["figures"][m.record_key]
                    for m in metrics
                    if m.record_key in final["figures"]
                },  # fmt: skip
                "params": record["params"],
            }
        )
        if hasattr(logger, "log_text") and final.get("hyps"):
            n = min(record["config"]["logger"]["samples"], len(final["hyps"]))
            rows = [[sources[i], refs[i], final["hyps"][i]] for i in range(n)]
            logger.log_text(key="dev_samples", columns=["source", "reference", "hypothesis"], data=rows)
    except Exception as e:  # logging must never lose a finished run
        print(f"[ablate] logging the final metrics failed: {typed_line(e)}")
