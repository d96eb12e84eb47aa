"""train(cfg) -> result record: one run, start to finish (or resumed), on one or several devices."""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import signal
import threading
import time
import traceback
import warnings
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback, ModelCheckpoint, TQDMProgressBar
from pytorch_lightning.utilities.exceptions import SIGTERMException

from ablate import results, tracking
from ablate.config import RunConfig, accumulation, effective_model, paper_model, total_steps, validate
from ablate.data.datamodule import TranslationData, prepare_corpus
from ablate.lit import TranslationModule
from ablate.model import Transformer, count_parameters

# Two warnings Lightning prints on every run that say nothing about this one: a deprecation inside its own
# pytree helper, and a note that our transfer_batch_to_device (which moves our Batch dataclass) is used.
warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*")
warnings.filterwarnings("ignore", message=r".*overridden `transfer_batch_to_device`.*")


class StepProgress(TQDMProgressBar):
    """A bar over optimizer steps (the training stream is endless, so Lightning cannot know its length)."""

    def __init__(self, total_micro: int):
        super().__init__(refresh_rate=5)
        self.total_micro = total_micro

    def on_train_epoch_start(self, trainer, *_):
        super().on_train_epoch_start(trainer, *_)
        self.train_progress_bar.reset(total=self.total_micro)
        self.train_progress_bar.initial = trainer.global_step * trainer.lightning_module.accumulate


class TrainClock(Callback):
    """Training wall clock across restarts: a resumed run's clock goes on from its checkpoint's time.

    One per run, saved once in each checkpoint; Curves, Budget and TimeLimit read it. Put it before them in
    the callback list, so that its on_train_start has run when theirs do."""

    def __init__(self):
        self.resumed_s = 0.0  # training seconds before this process (restored from the checkpoint)

    def on_train_start(self, trainer, module):
        self.t0 = time.perf_counter() - self.resumed_s

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0 if hasattr(self, "t0") else self.resumed_s

    def state_dict(self) -> dict:
        return {"time_s": self.elapsed()}

    def load_state_dict(self, state: dict) -> None:
        self.resumed_s = float(state.get("time_s", 0.0))


class Curves(Callback):
    """Appends train and dev figures to curves.jsonl (rank 0), read by the report."""

    def __init__(self, path: Path, clock: TrainClock, every: int = 10):
        self.path, self.clock, self.every = path, clock, every

    def _write(self, trainer, row: dict) -> None:
        if trainer.global_rank == 0:
            with open(self.path, "a") as f:
                f.write(json.dumps(row) + "\n")

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        mb, _ = batch
        step = trainer.global_step
        if mb.micro == module.accumulate - 1 and step % self.every == 0:
            m = trainer.callback_metrics
            row = {"step": step, "lr": module.lr_at(step), "time_s": round(self.clock.elapsed(), 2)}
            if "train/loss" in m:
                row["train_loss"] = float(m["train/loss"])
            self._write(trainer, row)

    def on_validation_end(self, trainer, module):  # after the module's own epoch-end hook has computed
        if trainer.sanity_checking or not module.last_eval:
            return
        row = {"step": trainer.global_step, "dev_ppl": module.last_eval["dev_ppl"]}
        if "dev_bleu" in module.last_eval:
            row["dev_bleu"] = module.last_eval["dev_bleu"]
        if "parsing" in module.last_eval:
            row["dev_f1"] = module.last_eval["parsing"]["f1"]
        self._write(trainer, row)


class BleuSchedule(Callback):
    """Decode the dev set every `bleu_every`-th evaluation during training (0: never, only at the end)."""

    def __init__(self, every: int):
        self.every = every

    def on_validation_epoch_start(self, trainer, module):
        if trainer.state.fn == "fit":
            module.eval_bleu = self.every > 0 and (module.n_evals + 1) % self.every == 0


class Preempted(SystemExit):
    """SIGTERM / SIGUSR1 (SLURM preemption, submitit timeouts): checkpoint written, exit code 143."""

    def __init__(self, message: str):
        print(f"[ablate] {message}")
        super().__init__(143)


class Preemption(Callback):
    """On SIGTERM or SIGUSR1, finish the optimizer step in progress, write last.ckpt, then stop.

    Lightning notices SIGTERM itself but stops after the current micro-batch, which may sit in the middle
    of a gradient-accumulation step; here the stop waits for the step boundary so that the checkpoint is a
    consistent state and the resumed run repeats nothing."""

    def __init__(self, last: Path):
        self.last, self.requested = last, False

    def setup(self, trainer, module, stage):
        if stage == "fit" and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGUSR1, self._request)  # SIGTERM: Lightning's own handler sets the flag

    def _request(self, signum, frame):
        self.requested = True

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.received_sigterm:
            self.requested = True  # hold Lightning's stop until the step boundary
            trainer._signal_connector.received_sigterm = False
        mb, _ = batch
        if self.requested and mb.micro == module.accumulate - 1:
            trainer.save_checkpoint(self.last)
            trainer._signal_connector.received_sigterm = True  # Lightning raises SIGTERMException next


class RestoreRNG(Callback):
    """Put back the random state saved with the checkpoint, so that dropout masks after a resume are the ones
    an uninterrupted run draws (with the data position and optimizer state, this makes resumption exact)."""

    def on_train_start(self, trainer, module):
        state = getattr(module, "_restored_rng", None) or {}
        if state.get("rng_cpu") is not None:
            torch.set_rng_state(state["rng_cpu"])
        if state.get("rng_cuda") and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["rng_cuda"])


class FaultInjection(Callback):
    """For tests of the failure paths: ABLATE_FAULT_NAN_AT_STEP=k makes the weights NaN for the batches of
    optimizer step k (restored afterwards), as a diverging run would."""

    def __init__(self):
        self.step = int(os.environ.get("ABLATE_FAULT_NAN_AT_STEP", "0"))
        self.saved = None

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if self.step and trainer.global_step + 1 == self.step and self.saved is None:
            self.saved = module.model.embedding.weight.detach().clone()
            with torch.no_grad():
                module.model.embedding.weight.fill_(float("nan"))

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if self.saved is not None:
            with torch.no_grad():
                module.model.embedding.weight.copy_(self.saved)
            self.saved, self.step = None, 0


class ParsingScore(Callback):
    """task=parsing: bracketing F1 (EVALB, COLLINS.prm) of the decoded dev trees (6.3), beside BLEU."""

    def __init__(self, sources: list[str], gold: list):
        self.sources, self.gold = sources, gold

    def on_validation_end(self, trainer, module):
        hyps = module.last_eval.get("hyps")
        if hyps is None or "parsing" in module.last_eval:
            return
        from ablate.parsing.task import parsing_metrics

        module.last_eval["parsing"] = parsing_metrics(self.sources, hyps, self.gold)
        if trainer.logger:
            trainer.logger.log_metrics(
                {"dev/f1": module.last_eval["parsing"]["f1"]}, step=trainer.global_step
            )


class Budget(Callback):
    """train.budget_minutes: the cosine decay follows the clock, ends at the deadline; training stops there.

    The clock is training wall time across restarts (dev passes included: the minutes the Multi30k curve
    counts). Under DDP every rank takes the slowest rank's clock, so that all apply the same rate and stop
    at the same step. The stop step gets its own checkpoint (the last ones are averaged at the end)."""

    def __init__(self, minutes: float, ckpt_dir: Path, clock: TrainClock):
        self.budget_s, self.ckpt_dir, self.clock = minutes * 60, ckpt_dir, clock
        self.warm_end_s = None  # clock time at the end of warmup (restored from the checkpoint)

    def on_train_start(self, trainer, module):
        if self.warm_end_s is not None:  # resumed: the first step's rate goes on from where the clock was
            module.time_progress = self._progress(self.clock.resumed_s)

    def state_dict(self) -> dict:
        return {"warm_end_s": self.warm_end_s}

    def load_state_dict(self, state: dict) -> None:
        self.warm_end_s = state.get("warm_end_s")
        if "time_s" in state and not self.clock.resumed_s:  # a checkpoint from before TrainClock was shared
            self.clock.resumed_s = float(state["time_s"])

    def _progress(self, elapsed: float) -> float:
        left = max(self.budget_s - self.warm_end_s, 1e-9)  # the post-warmup part of the budget
        return min(1.0, (elapsed - self.warm_end_s) / left)

    def _elapsed(self, trainer, module) -> float:
        local = torch.tensor(self.clock.elapsed(), dtype=torch.float64, device=module.device)
        return float(trainer.strategy.reduce(local, reduce_op="max"))

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if batch[0].micro != module.accumulate - 1:  # once per optimizer step (one collective under DDP)
            return
        elapsed = self._elapsed(trainer, module)
        if self.warm_end_s is None and trainer.global_step >= module.cfg.train.warmup_steps:
            self.warm_end_s = elapsed
        if self.warm_end_s is not None:  # read by the scheduler when it sets the next step's rate
            module.time_progress = self._progress(elapsed)
        if elapsed < self.budget_s:
            return
        step = trainer.global_step
        if step % module.cfg.train.checkpoint_every:  # else ModelCheckpoint (run after us) writes this step
            trainer.save_checkpoint(self.ckpt_dir / f"step{step:07d}.ckpt")
        trainer.should_stop = True


class TimeLimit(Callback):
    """train.max_minutes: stop once the run has trained this long, counted across restarts (TrainClock)."""

    def __init__(self, minutes: float | None, clock: TrainClock):
        self.seconds = None if minutes is None else minutes * 60
        self.clock = clock

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if self.seconds is not None and self.clock.elapsed() > self.seconds:
            trainer.should_stop = True


def resolve_precision(precision: str, accelerator: str) -> str:
    """trainer.precision=auto: bf16-mixed where the device has bf16 arithmetic units (a CUDA GPU with
    native bf16, Ampere or later; a CPU with AVX512_BF16 or AMX), 32-true elsewhere. On a CPU without them
    bf16 is emulated: a bf16 matmul ran ~400x slower than float32 on an AVX2 Zen 3 (README, Speed)."""
    on_gpu = accelerator != "cpu" and torch.cuda.is_available()
    if precision == "auto" and on_gpu:
        return "bf16-mixed" if torch.cuda.is_bf16_supported(including_emulation=False) else "32-true"
    if precision == "auto":
        return "bf16-mixed" if cpu_has_native_bf16() else "32-true"
    if precision.startswith("bf16") and not on_gpu and not cpu_has_native_bf16():
        warnings.warn(
            f"trainer.precision={precision}: this CPU has no bf16 units (AVX512_BF16 or AMX), so bf16 is "
            "emulated and a step runs many times slower than with 32-true",
            stacklevel=2,
        )
    return precision


def cpu_has_native_bf16() -> bool:
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")  # torch.cpu, private but long-lived
    return any(getattr(torch.cpu, name, lambda: False)() for name in probes)


def device_name(trainer: pl.Trainer) -> str:
    if trainer.strategy.root_device.type == "cuda":
        return torch.cuda.get_device_name(trainer.strategy.root_device)
    return f"cpu ({torch.get_num_threads()} threads)"


def train(cfg: RunConfig) -> dict:
    """Run (or skip, or resume) the run this config names; return its result record."""
    validate(cfg)
    out = results.run_dir(cfg)
    if _inside_managed_process():  # a worker of a job whose launcher already holds the run
        return run_worker(cfg, prepare_corpus(cfg.data))
    out.parent.mkdir(parents=True, exist_ok=True)
    with _run_lock(out) as held:
        if not held:  # another process (a second sweep, a second joblib worker) is running this identity
            print(f"[ablate] {results.run_id(cfg)} is being run by another process; skipped")
            rec_path = out / results.RECORD_NAME
            if rec_path.is_file():
                return results.read_record(rec_path)
            return {"run_id": results.run_id(cfg), "row": cfg.model.name, "status": "running"}
        return _train_locked(cfg, out)


@contextlib.contextmanager
def _run_lock(out: Path):
    """A non-blocking exclusive lock beside the run folder, released when the process ends (even by kill)."""
    f = open(out.parent / f".{out.name}.lock", "w")
    try:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        f.close()


def _train_locked(cfg: RunConfig, out: Path) -> dict:
    rec_path = out / results.RECORD_NAME
    if cfg.resume and rec_path.is_file():
        rec = results.read_record(rec_path)
        if rec["status"] == "finished":
            print(f"[ablate] {rec['run_id']} already finished: {rec_path} (skipped)")
            return rec
    if not cfg.resume and out.exists():  # start afresh, but keep what was there
        kept = out.with_name(f"{out.name}.old-{time.strftime('%Y%m%d-%H%M%S')}")
        os.replace(out, kept)
        print(f"[ablate] resume=false: previous run folder kept as {kept}")
    prepared = prepare_corpus(cfg.data)  # once, before any worker starts
    if cfg.trainer.devices * cfg.trainer.num_nodes > 1:
        from ablate.launch import spawn_job

        return spawn_job(cfg, out)
    return run_worker(cfg, prepared)


def _inside_managed_process() -> bool:
    """True when the processes of this job already exist (our own workers, or SLURM's tasks)."""
    return "LOCAL_RANK" in os.environ or (
        "SLURM_NTASKS" in os.environ and int(os.environ["SLURM_NTASKS"]) > 1
    )


def base_record(cfg: RunConfig, run_id: str, params: int, params_paper: int, model_eff) -> dict:
    return {
        "schema_version": results.SCHEMA_VERSION,
        "run_id": run_id,
        "row": cfg.model.name,
        "group": cfg.model.group,
        "seed": cfg.seed,
        "status": "running",
        "reason": None,
        "task": cfg.task,
        "sweep": cfg.sweep_name,
        "config": asdict(cfg),
        "model_effective": asdict(model_eff),
        "params": params,
        "params_paper_scale": params_paper,
        "metrics": {},
        "files": {},
        "code_hash": results.code_hash(),
        "git": results.git_revision(),
        "versions": results.versions(),
        "started": results.now(),
    }


def _keep_freed_memory() -> None:
    """CPU training: let glibc keep freed memory for the next step instead of giving it back to the kernel.

    By default glibc returns memory at the top of its heap once more than a few MiB are free and serves
    each allocation above a moving threshold with fresh pages; a training step frees and reallocates the
    same activations every time, so each step faulted in 3-8K new pages (measured at the small benchmark
    shape: 10-26 ms of kernel time a step; 2-3 ms with this). Allocations up to 32 MiB (glibc's maximum
    threshold) come from the heap and the heap is not trimmed. Not glibc (macOS, musl): nothing is done.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    m_trim_threshold, m_mmap_threshold = -1, -3  # <malloc.h>
    libc.mallopt(m_mmap_threshold, 32 << 20)
    libc.mallopt(m_trim_threshold, 1 << 40)


def run_worker(cfg: RunConfig, prepared) -> dict:
    """This process's part of the run (all of it on one device; one rank under DDP)."""
    if cfg.trainer.threads:
        torch.set_num_threads(cfg.trainer.threads)
    if cfg.trainer.accelerator == "cpu" or not torch.cuda.is_available():
        _keep_freed_memory()
    pl.seed_everything(cfg.seed, workers=True, verbose=False)
    rid, out = results.run_id(cfg), results.run_dir(cfg)
    rank0 = int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0"))) == 0
    out.mkdir(parents=True, exist_ok=True)
    meta = prepared.meta
    model_cfg = effective_model(cfg, meta["vocab_size"])
    steps, accumulate = total_steps(cfg), accumulation(cfg)
    module = TranslationModule(cfg, model_cfg, steps, accumulate)
    if cfg.train.compile:
        module.model.compile()  # in place: forward is compiled, state_dict keys stay the same
    with torch.device("meta"):
        params_paper = count_parameters(Transformer(paper_model(cfg.model)))
    record = base_record(cfg, rid, count_parameters(module.model), params_paper, model_cfg)
    record["data"] = {"name": cfg.data.name, "corpus_key": meta["corpus_key"], "splits": meta["splits"]}
    record["data_hash"] = meta["corpus_key"]
    rec_path = out / results.RECORD_NAME
    if rank0:
        results.atomic_write_json(rec_path, record)
    import sentencepiece as spm

    dm = TranslationData(cfg.data, prepared, cfg.train.max_tokens, accumulate, cfg.seed)
    dm.setup()
    module.tokenizer = spm.SentencePieceProcessor(model_file=str(prepared.spm_model))
    module.references = dm.references("dev")
    if cfg.decode.dev_limit:
        module.references = module.references[: cfg.decode.dev_limit]
    parsing_score = None
    if cfg.task == "parsing":
        from ablate.parsing.task import gold_trees

        parsing_score = ParsingScore(dm.sources_text("dev"), gold_trees(prepared.root, "dev", cfg.data))
    ckpt_dir = out / "checkpoints"
    last = ckpt_dir / "last.ckpt"
    logger = (
        tracking.make_logger(
            cfg.logger,
            out,
            rid,
            cfg.model.name,
            cfg.sweep_name,
            [cfg.model.group, f"seed{cfg.seed}"],
            asdict(cfg),
        )
        if rank0
        else False
    )
    t_start = time.perf_counter()
    trainer = _trainer(
        cfg, steps, accumulate, ckpt_dir, logger, out, [parsing_score] if parsing_score else []
    )
    try:
        if last.is_file():
            dm.resume_position = _resume_point(last, module, out / "curves.jsonl", rid)
        trainer.fit(module, datamodule=dm, ckpt_path=str(last) if last.is_file() else None)
        train_time = time.perf_counter() - t_start
        final = _final_eval(cfg, trainer, module, dm)
    except SIGTERMException:  # preempted: the checkpoint is written; the same command continues the run
        if rank0:
            record.update(
                preempted=results.now(),
                reason=f"preempted at step {trainer.global_step}; run the same command again to continue",
            )
            results.atomic_write_json(rec_path, record)
        tracking.finish(logger)
        raise Preempted(f"preempted at step {trainer.global_step}: checkpoint {last}") from None
    except BaseException as e:  # record the failure, then let the caller decide
        if rank0:
            record.update(
                status="failed",
                reason=_one_line(e),
                finished=results.now(),
                traceback=traceback.format_exc(limit=5),
            )
            results.atomic_write_json(rec_path, record)
        tracking.finish(logger)
        raise
    if rank0:
        _write_outputs(out, final)
        tokens = module.train_tokens * trainer.world_size
        record.update(
            status="finished",
            finished=results.now(),
            steps=trainer.global_step,
            target_tokens=tokens,
            wall_time_s=time.perf_counter() - t_start,
            train_time_s=train_time,
            tokens_per_s=tokens / max(train_time, 1e-9),
            flops_estimate=6.0 * record["params"] * tokens,
            device=device_name(trainer),
            precision=str(trainer.precision),  # what ran: trainer.precision=auto resolves per machine
            world_size=trainer.world_size,
            metrics={
                k: final[k]
                for k in ("dev_ppl", "dev_bleu", "dev_bleu_signature", "dev_nll_sum", "dev_tokens")
                if k in final
            },
            files={
                "curves": "curves.jsonl",
                "dev_hyp": "dev.hyp.txt",
                "dev_sentences": "dev_sentences.npz",
                "checkpoint": "checkpoints/last.ckpt",
            },
        )
        record["metrics"].update(final.get("parsing", {}))  # task=parsing: f1, f1_le40, precision, ...
        m = trainer.callback_metrics
        if "train/loss" in m:
            record["metrics"]["train_loss"] = float(m["train/loss"])
        results.atomic_write_json(rec_path, record)
        if cfg.train.average_last and "test" in dm.splits:  # Table 2: average, decode the test set
            from ablate.evaluate import evaluate_run

            record = {**record, "metrics": {**record["metrics"], **evaluate_run(out, cfg.train.average_last)}}
        _log_final(logger, record, final, dm.sources_text("dev"), module.references)
    tracking.finish(logger, [rec_path, out / "curves.jsonl", out / "dev_sentences.npz"])
    return record


def _resume_point(last: Path, module, curves: Path, rid: str) -> tuple[int, int] | None:
    """Check the checkpoint before Lightning loads it: readable, and of this architecture; drop curve rows
    the interrupted run wrote after it; return the data position to continue from."""
    try:
        state = torch.load(last, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unreadable file is the same problem for the user
        raise CheckpointError(
            f"{last}: corrupted or unreadable checkpoint ({type(e).__name__}); "
            "delete it to restart the run, or resume=false"
        ) from None
    ours = {k: v.shape for k, v in module.state_dict().items()}
    theirs = {k: v.shape for k, v in state.get("state_dict", {}).items()}
    if ours != theirs:
        bad = sorted(set(ours) ^ set(theirs)) or [k for k in ours if ours[k] != theirs[k]]
        raise CheckpointError(f"{last}: checkpoint of a different architecture (first difference: {bad[0]})")
    step = int(state.get("global_step", 0))
    if curves.is_file():
        rows = [r for r in curves.read_text().splitlines() if r and json.loads(r)["step"] <= step]
        results.atomic_write_text(curves, "".join(r + "\n" for r in rows))
    print(f"[ablate] resuming {rid} from step {step}")
    pos = state.get("ablate", {}).get("position")
    return tuple(pos) if pos else None


class CheckpointError(ValueError):
    pass


def _trainer(
    cfg: RunConfig, steps: int, accumulate: int, ckpt_dir: Path, logger, out: Path, extra: list[Callback]
) -> pl.Trainer:
    t = cfg.trainer
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
    clock = TrainClock()  # before the callbacks that read it
    callbacks = [
        ckpt,
        Preemption(ckpt_dir / "last.ckpt"),
        RestoreRNG(),
        clock,
        *extra,  # before Curves, which writes what they compute
        Curves(out / "curves.jsonl", clock),
        BleuSchedule(cfg.train.bleu_every),
        TimeLimit(cfg.train.max_minutes, clock),
    ]
    if cfg.train.budget_minutes is not None:
        callbacks.append(Budget(cfg.train.budget_minutes, ckpt_dir, clock))
    if os.environ.get("ABLATE_FAULT_NAN_AT_STEP"):
        callbacks.append(FaultInjection())
    if t.progress_bar:
        callbacks.append(StepProgress(steps * accumulate))
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
        max_steps=steps,
        accumulate_grad_batches=accumulate,
        val_check_interval=cfg.train.val_every * accumulate,
        check_val_every_n_epoch=None,
        num_sanity_val_steps=0,
        logger=logger,
        callbacks=callbacks,
        enable_progress_bar=t.progress_bar,
        enable_model_summary=False,
        gradient_clip_val=cfg.train.grad_clip or None,
        use_distributed_sampler=False,
        log_every_n_steps=10,
        default_root_dir=str(out),
        limit_val_batches=1.0,
    )


def _final_eval(cfg: RunConfig, trainer: pl.Trainer, module: TranslationModule, dm: TranslationData) -> dict:
    """Dev perplexity and BLEU (beam search) of the final weights, with per-sentence statistics."""
    module.eval_bleu = True
    limit = cfg.decode.dev_limit
    trainer.validate(module, dataloaders=dm.eval_loader("dev", limit), verbose=False)
    return dict(module.last_eval)


def _write_outputs(out: Path, final: dict) -> None:
    results.atomic_write_text(out / "dev.hyp.txt", "\n".join(final.get("hyps", [])) + "\n")
    tmp = out / ".dev_sentences.tmp.npz"
    np.savez(tmp, nll=final["sent_nll"], tokens=final["sent_tokens"], bleu_stats=final["bleu_stats"])
    os.replace(tmp, out / "dev_sentences.npz")


def _log_final(logger, record: dict, final: dict, sources: list[str], refs: list[str]) -> None:
    if not logger:
        return
    try:
        logger.log_metrics(
            {
                "final/dev_ppl": final["dev_ppl"],
                "final/dev_bleu": final.get("dev_bleu", 0.0),
                "params": record["params"],
            }
        )
        if hasattr(logger, "log_text") and final.get("hyps"):
            n = min(record["config"]["logger"]["samples"], len(final["hyps"]))
            rows = [[sources[i], refs[i], final["hyps"][i]] for i in range(n)]
            logger.log_text(key="dev_samples", columns=["source", "reference", "hypothesis"], data=rows)
    except Exception as e:  # logging must never lose a finished run
        print(f"[ablate] logging the final metrics failed: {_one_line(e)}")


def _one_line(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    return f"{type(e).__name__}: {msg[0] if msg else ''}"[:500]
