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
from ablate.config.targets import node
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
    times = ProcessTimes(rec_path)
    record = store.new_record(
        cfg,
        data={"name": cfg.data.name, **_data_facts(prepared)},
        data_hash=prepared.meta["corpus_key"],
        devices_assigned=assigned_devices(),  # hydra/launcher=gpus: the ids this job held
        **(facts or {}),
    )
    record.update({k: v for k, v in times.earlier.items() if k == "started"})  # the run's first process's
    times.into(record)
    if rank0:
        record = status.transition(rec_path, "start", record)
    logger, trainer, resume, io = None, None, None, AtomicCheckpointIO()
    try:
        resume = _resume_state(out / "checkpoints", out / "curves.jsonl")
        dm = Seq2SeqData(
            cfg.data, prepared, cfg.train.max_tokens, accumulation(cfg), cfg.seed,
            resume_position=resume.position if resume else None,
        )  # fmt: skip
        dm.setup()
        clock = times.clock = TrainClock()  # before the callbacks that read it
        budget = _budget(cfg, out, clock)
        module = _module(cfg, prepared, dm, budget)
        if resume:
            resume.check_architecture(module)
        record.update(_model_facts(cfg, module))
        if rank0:
            status.update(rec_path, record)
        if rank0:  # each checkpoint written keeps this process's times so far (a kill -9 loses no more)
            io.after_save = lambda: status.update(rec_path, times.into(record))
        logger = _logger(cfg, out) if rank0 else False
        trainer = _trainer(cfg, out, logger, _callbacks(cfg, out, clock, budget), io)
        # weights_only: a checkpoint of a shared results folder is data, never code (torch.load's pickle)
        ckpt = str(resume.path) if resume else None
        trainer.fit(module, datamodule=dm, ckpt_path=ckpt, weights_only=True)
        _last_dev_pass(cfg, trainer, module, dm, resume)
        times.trained()
        final = _final_eval(cfg, trainer, module, dm)
        if rank0:  # the dev files, the run's own evaluation, then the finished record
            record = _finish(cfg, out, record, trainer, module, dm, final, times)
    except SIGTERMException:  # a stop signal: the checkpoint is written; who sent it decides the status
        step = _resumes_at(io, resume)
        if rank0:
            status.update(rec_path, {**times.into(record, "stopped"), "stopped_at_step": step})
        tracking.finish(logger)
        raise Preempted(step, out / "checkpoints" / "last.ckpt") from None
    except BaseException as e:  # record the failure (or Ctrl-C), then let the caller decide
        if rank0:
            _record_failure(rec_path, times.into(record, "failed"), e, _resumes_at(io, resume))
        tracking.finish(logger)
        raise
    if rank0:
        _log_final(logger, record, final, dm.sources_text("dev"), module.references, module.metrics)
    tracking.finish(logger, [rec_path, out / "curves.jsonl", out / "dev_sentences.npz"])
    return record


def _record_failure(path: Path, record: dict, e: BaseException, step: int) -> None:
    if _is_ctrl_c(e):
        record["processes"][-1]["ended"] = "interrupted"
        status.transition(path, "interrupt", record, status.CTRL_C, stopped_at_step=step)
    else:
        status.transition(path, "fail", record, typed_line(e), traceback=traceback.format_exc(limit=5))


def _resumes_at(io: AtomicCheckpointIO, resume: ResumeState | None) -> int:
    """The step a stopped run resumes from: its newest checkpoint's (this process's, else the one it
    resumed from), never a step it trained past it and will train again."""
    if io.saved_step is not None:
        return io.saved_step
    return resume.step if resume else 0


class ProcessTimes:
    """A run's times over its processes: each process's wall and training seconds kept in the record's
    `processes` (with how it ended), the record's wall_time_s and train_time_s their sums. A process killed
    (kill -9) keeps its times as of its last checkpoint, and the next process marks it `killed`."""

    def __init__(self, rec_path: Path):
        self.t0, self.clock, self.train_s = time.perf_counter(), None, None
        self.earlier = _earlier(rec_path)  # `processes` and `started` of the record on disk
        self.mine = {"started": folder.now(), "wall_time_s": 0.0, "train_time_s": 0.0}

    def trained(self) -> None:
        """Fit has ended: this process's training seconds stop here (its final decode is not training)."""
        self.train_s = self._train_s()

    def _train_s(self) -> float:
        return 0.0 if self.clock is None else max(0.0, self.clock.elapsed() - self.clock.resumed_s)

    def into(self, record: dict, ended: str | None = None) -> dict:
        """`record` with this process's times as of now (and how it ended), and their sums."""
        self.mine["wall_time_s"] = time.perf_counter() - self.t0
        self.mine["train_time_s"] = self.train_s if self.train_s is not None else self._train_s()
        if ended:
            self.mine["ended"] = ended
        processes = [*self._settled(self.earlier.get("processes", [])), dict(self.mine)]
        record.update(
            processes=processes,
            wall_time_s=sum(p["wall_time_s"] for p in processes),
            train_time_s=sum(p["train_time_s"] for p in processes),
        )
        return record

    def _settled(self, earlier: list[dict]) -> list[dict]:
        """A killed process's training counted up to the checkpoint this one resumed from (whose clock
        says it), where its record was last written before that checkpoint (a kill during the write)."""
        if self.clock is None or not earlier or earlier[-1]["ended"] != "killed":
            return earlier
        last = earlier[-1]
        train = max(last["train_time_s"], self.clock.resumed_s - sum(p["train_time_s"] for p in earlier[:-1]))
        return [
            *earlier[:-1],
            {**last, "train_time_s": train, "wall_time_s": max(last["wall_time_s"], train)},
        ]


def _earlier(rec_path: Path) -> dict:
    """The processes an earlier record of this run kept, each ended (one that says nothing was killed), and
    when its first began; nothing from a record that cannot be read (it is replaced as the run starts)."""
    try:
        old = json.loads(rec_path.read_text(encoding="utf-8"))
        processes = [
            {**p, "ended": p.get("ended", "killed")}
            for p in old.get("processes") or []
            if isinstance(p, dict) and isinstance(p.get("wall_time_s"), int | float)
            and isinstance(p.get("train_time_s"), int | float)
        ]  # fmt: skip
    except (OSError, ValueError, AttributeError):
        return {}
    first = {"started": old["started"]} if processes and old.get("started") else {}
    return {"processes": processes, **first}


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
    warmup = node(cfg, "schedule").get("warmup_steps", 0)
    return Budget(t.budget_minutes, out / "checkpoints", clock, warmup, t.checkpoint_every)


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
        enable_version_counter=False,  # a step redone after a resume writes its own file again, not a -v1
    )
    callbacks = [
        ckpt,
        clock,
        Curves(out / "curves.jsonl", clock),
        TimeLimit(cfg.train.max_minutes, clock),
        *([budget] if budget else []),
        StopAtStep(ckpt_dir / "last.ckpt"),  # after Curves: a checkpoint of a step follows its curve row
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
    the previous files as they were), and a failed write names the file. `saved_step`: the step of the
    newest checkpoint this process wrote whole (where its run resumes from)."""

    saved_step: int | None = None
    after_save = None  # called after each checkpoint written

    def save_checkpoint(self, checkpoint, path, storage_options=None) -> None:
        path = Path(path)
        tmp = path.with_name(f".{path.name}.tmp")
        try:
            super().save_checkpoint(checkpoint, tmp, storage_options)
            faults.at("checkpoint", checkpoint.get("global_step"))
            os.replace(tmp, path)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            raise CheckpointError(f"{path}: could not write the checkpoint ({e.strerror or e})") from None
        except BaseException:  # Ctrl-C, or an error, mid-write: no half-written file left behind
            tmp.unlink(missing_ok=True)
            raise
        self.saved_step = int(checkpoint.get("global_step", 0))
        if self.after_save is not None:
            self.after_save()


def _trainer(
    cfg: RunConfig, out: Path, logger, callbacks: list[Callback], io: AtomicCheckpointIO
) -> pl.Trainer:
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
        plugins=[io, *filter(None, [slurm_environment()])],
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
    """The newest checkpoint that loads, by its step (a kill -9 can truncate a checkpoint mid-write where
    it is not written atomically, or fall between a step checkpoint and last.ckpt). What the run wrote
    after that checkpoint goes, so that the resumed run writes it once, as an uninterrupted run does: the
    curve rows after its step and the dev rows at it (a checkpoint comes before the dev pass of its step,
    which the resumed run makes again: module.redo_dev_pass), the unreadable checkpoints of later steps
    (the resumed run writes them again), and the temporary file of a write a kill cut short."""
    for tmp in ckpt_dir.glob(".*.tmp"):
        tmp.unlink()
    unreadable, found = [], None
    for path in _newest_first(ckpt_dir):
        if found is not None and folder.step_of(path) <= found.step:  # last.ckpt is as new: read no more
            break
        try:
            with warnings.catch_warnings():  # torch's note on a pickle protocol it reads all the same
                warnings.simplefilter("ignore")
                state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception:  # noqa: BLE001 - any unreadable file is the same problem: try the next one
            unreadable.append(path)
            continue
        if found is None or int(state.get("global_step", 0)) > found.step:
            found = ResumeState(path, state)
        if path.name != "last.ckpt":  # last.ckpt may be older than the newest step checkpoint: read both
            break
    if found is None:
        if unreadable:
            raise CheckpointError(
                f"{ckpt_dir}: no readable checkpoint ({', '.join(p.name for p in unreadable)}; each read as "
                "weights alone, never unpickled as objects); delete them to restart the run, or resume=false"
            )
        if curves.is_file():  # no checkpoint (killed before the first, or the folder copied without them):
            curves.unlink()  # the run starts from step 0, so the curve starts again with it
        return None
    if unreadable:
        print(f"[ablate] skipped unreadable checkpoint(s): {', '.join(p.name for p in unreadable)}")
    for path in unreadable:
        if path.name != "last.ckpt" and folder.step_of(path) > found.step:
            path.unlink()
    if curves.is_file():
        rows = [r for r in curves.read_text().splitlines() if r and _kept(json.loads(r), found.step)]
        folder.atomic_write_text(curves, "".join(r + "\n" for r in rows))
    print(f"[ablate] resuming from {found.path} (step {found.step})")
    return found


def _newest_first(ckpt_dir: Path) -> list[Path]:
    candidates = folder.step_checkpoints(ckpt_dir)[::-1]
    if (ckpt_dir / "last.ckpt").is_file():
        candidates.insert(0, ckpt_dir / "last.ckpt")
    return candidates


def _kept(row: dict, step: int) -> bool:
    """A curve row that a run resumed from a checkpoint of `step` keeps: the rows before it, and its training
    row (written before the checkpoint); its dev rows come again with the dev pass it makes again."""
    return row["step"] < step or (row["step"] == step and "dev_ppl" not in row)


# -- evaluating and recording ---------------------------------------------------------------------------


def _last_dev_pass(cfg: RunConfig, trainer: pl.Trainer, module: Seq2SeqModule, dm, resume) -> None:
    """A run resumed from a checkpoint of its last step, where a dev pass was due (module.redo_dev_pass):
    Lightning's fit has no step left to make it at, so it is made here, as fit makes it (decoded where
    train.decode_every says)."""
    if resume is None or resume.step != trainer.global_step or resume.step % cfg.train.val_every:
        return
    module.fit_pass = True
    try:
        trainer.validate(module, dataloaders=dm.val_dataloader(), verbose=False)
    finally:
        module.fit_pass = False


def _final_eval(cfg: RunConfig, trainer: pl.Trainer, module: Seq2SeqModule, dm: Seq2SeqData) -> dict:
    """Dev perplexity and the task's figures (beam search) of the final weights, with per-sentence
    statistics (a validate pass outside fit always decodes)."""
    trainer.validate(module, dataloaders=dm.eval_loader("dev", cfg.decode.dev_limit), verbose=False)
    return dict(module.last_eval)


def _finish(cfg, out, record, trainer, module, dm, final, times: ProcessTimes) -> dict:
    """Rank 0: write the dev outputs; under average_last, decode the test set (its evaluation kept before
    the record says finished: a run stopped in it does it again as it resumes); write the finished
    record."""
    _write_outputs(out, final)
    test = {}
    if cfg.train.average_last and "test" in dm.splits:  # Table 2: average, decode the test set
        from ablate.training.evaluation import evaluate_run

        test = evaluate_run(out, cfg.train.average_last, by_run=True)
    tokens = module.train_tokens * trainer.world_size
    times.into(record, "finished")
    record.update(
        steps=trainer.global_step,
        target_tokens=tokens,
        tokens_per_s=tokens / max(record["train_time_s"], 1e-9),
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
    return {**record, "metrics": {**record["metrics"], **test}} if test else record


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
