"""The LightningModule: training by the row's criterion (label-smoothed by default, 5.3, 5.4), token-weighted
dev perplexity (the model's unsmoothed NLL, whatever the criterion), and the task's dev figures of a decoded
dev pass (its scorer's).

Each training batch is one micro-batch of an optimizer step; Lightning accumulates `accumulate` of them. The
loss of a micro-batch is its summed loss (the criterion's, with its auxiliary terms) divided by the target
tokens of the WHOLE step on all devices (known from the deterministic batch plan), times the factors
Lightning and DDP divide by, so the gradient is exactly the per-token mean over the step's ~25000 target
tokens.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pytorch_lightning as pl
import torch

from ablate.config import RunConfig, row_arch
from ablate.config.arch import ARCHS, CRITERIA, CodeError, arch_of, criterion_of, researchers_folder
from ablate.config.targets import build
from ablate.data.dataset import Batch
from ablate.data.tokenizer import BOS, EOS, PAD
from ablate.errors import raised_at, typed_line
from ablate.nn.decode import CachedStepper, EnsembleStepper, beam_search, greedy_search
from ablate.nn.loss import LossSums, label_smoothed_loss, optional
from ablate.nn.optim import build_optimizer
from ablate.tasks import Metric, Scored, task_of


class NonFiniteLoss(RuntimeError):
    pass


@dataclass
class EvalAccumulator:
    """Sums and denominators over a dev pass; divided once at the end (after summing across devices)."""

    nll: float = 0.0
    tokens: int = 0
    index: list[np.ndarray] = field(default_factory=list)
    sent_nll: list[np.ndarray] = field(default_factory=list)
    sent_tokens: list[np.ndarray] = field(default_factory=list)
    hyps: dict[int, list[int]] = field(default_factory=dict)


class Seq2SeqModule(pl.LightningModule):
    """Training and dev evaluation of the row's model (`model.arch`, trained by `model.criterion`). What it
    decodes against (tokenizer, dev references), the task's scorer and metrics, and the time budget
    (train.budget_minutes) come in the constructor."""

    def __init__(
        self,
        cfg: RunConfig,
        model_cfg,  # the config of the row's model (ablate.config.model_config)
        total_steps: int,
        accumulate: int,
        tokenizer=None,
        references: list[str] = (),
        scorer: Callable[[list[str], list[str]], Scored] | None = None,
        metrics: tuple[Metric, ...] = (),
        budget=None,
    ):
        super().__init__()
        self.cfg, self.total_steps, self.accumulate = cfg, total_steps, accumulate
        self.model = arch_of(cfg.model.arch).cls(model_cfg)
        # the row's criterion, with eps_ls (5.4) of the row under its recipe
        self.criterion = criterion_of(cfg.model.criterion)(
            row_arch(cfg).label_smoothing, PAD, **cfg.model.criterion_args
        )
        # a researcher's model and criterion: what they raise is told with its place in their files
        self.theirs = {
            "model": researchers_folder(cfg.model.arch, ARCHS),
            "criterion": researchers_folder(cfg.model.criterion, CRITERIA),
        }
        self.tokenizer, self.references = tokenizer, list(references)  # sentencepiece processor, dev refs
        self.scorer = scorer  # the task's: decoded dev outputs and references -> its figures
        self.metrics = metrics  # the task's declared dev figures: each logged as dev/<name>
        self.budget = budget  # callbacks.Budget: its `progress` drives a decaying schedule to the deadline
        # the run's schedule (config/targets.py: `schedule`, completed by the row's width and the step count)
        self.schedule = build(cfg, "schedule", d_model=self.model.cfg.d_model, total_steps=total_steps)
        self.decode_dev = False  # decode the dev set in this validation pass (on_validation_epoch_start)
        self.fit_pass = False  # a validate call that makes a dev pass of fit's (fit.last_dev_pass)
        self.acc = EvalAccumulator()
        self.aux_names: set[str] = set()  # the criterion's auxiliary terms seen so far (curves.jsonl)
        self.last_eval: dict = {}
        self.last_position: tuple[int, int] | None = None  # (epoch, step) of the last finished step
        self._t0 = time.perf_counter()
        self._tokens_since = 0
        self.train_tokens = 0
        self._restored_rng: dict = {}

    # -- optimization --------------------------------------------------------------------------------------

    def lr_at(self, step: int) -> float:
        """The schedule's rate at optimizer step `step` (from 1), the time budget's progress with it."""
        return self.schedule(step, self.budget.progress if self.budget else 0.0)

    def configure_optimizers(self):
        opt = build_optimizer(build(self.cfg, "optim"), self.model.parameters())
        # LambdaLR counts from 0 for the first step; equation 3 counts from 1.
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: self.lr_at(i + 1))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def transfer_batch_to_device(self, batch, device, dataloader_idx):
        if isinstance(batch, Batch):
            return batch.to(device)
        mb, b = batch
        return mb, b.to(device)

    def training_step(self, batch, batch_idx):
        mb, b = batch
        with self.their_code("model", "forward"):
            hidden = self.model(b.src, b.tgt_in)  # (B, T, d)
        with self.their_code("criterion", "call"):
            sums = self.criterion(self.model, hidden, b.tgt_out)
        if not isinstance(sums, LossSums):
            raise CodeError(
                f"model.criterion={self.cfg.model.criterion}: {type(self.criterion).__name__} returned "
                f"{type(sums).__name__}, not ablate.nn.loss.LossSums (docs/models.md)"
            )
        world = self.trainer.world_size if self.trainer else 1
        loss = sums.total() * (world * self.accumulate / mb.step_tokens)
        if not torch.isfinite(loss):
            step = self.global_step + 1
            if self.cfg.train.on_nonfinite == "skip":
                self.print(f"step {step}: non-finite loss, micro-batch skipped (train.on_nonfinite=skip)")
                optional(self.criterion, "skipped")()
                return None
            raise NonFiniteLoss(
                f"non-finite training loss at step {step} (epoch {mb.epoch}, batch "
                f"{mb.step}.{mb.micro}); lower the learning rate or set train.on_nonfinite=skip"
            )
        ntok = int(sums.tokens)
        self.train_tokens += ntok
        self._tokens_since += ntok
        if mb.micro == self.accumulate - 1:
            self.last_position = (mb.epoch, mb.step)
        self.log("train/loss", sums.smoothed / sums.tokens, prog_bar=True, batch_size=ntok)
        self.log("train/nll", sums.nll / sums.tokens, batch_size=ntok)
        for name, term in sums.aux.items():  # a criterion's own terms, per token, under their names
            self.aux_names.add(name)
            self.log(f"train/{name}", term / sums.tokens, batch_size=ntok)
        return loss

    def on_train_batch_end(self, outputs, batch, batch_idx):
        mb, _ = batch
        if mb.micro != self.accumulate - 1:
            return
        step = self.global_step
        if step % 10 == 0 or step == self.total_steps:
            now = time.perf_counter()
            rate = (
                self._tokens_since
                * (self.trainer.world_size if self.trainer else 1)
                / max(now - self._t0, 1e-9)
            )
            self._t0, self._tokens_since = now, 0
            self.log("train/lr", self.lr_at(step), prog_bar=False)
            self.log("train/tokens_per_s", rate, prog_bar=True)

    @contextlib.contextmanager
    def their_code(self, which: str, what: str):
        """An exception raised in a researcher's model or criterion (`which`) as a CodeError in one line:
        its type and message, and the line of their file it came from."""
        try:
            yield
        except Exception as e:
            where = raised_at(e, self.theirs[which]) if self.theirs[which] else ""
            if not where or isinstance(e, CodeError):  # the package's own code, or told already
                raise
            name = self.cfg.model.arch if which == "model" else self.cfg.model.criterion
            raise CodeError(f"model.{'arch' if which == 'model' else which}={name}: its {what} raised "
                            f"{typed_line(e)} at {where}") from e  # fmt: skip

    # -- evaluation ----------------------------------------------------------------------------------------

    def on_validation_epoch_start(self):
        self.acc = EvalAccumulator()
        # decode the dev set: at every train.decode_every-th evaluation during training, always outside fit
        every = self.cfg.train.decode_every
        in_fit = self.fit_pass or (self.trainer is not None and self.trainer.state.fn == "fit")
        due = every > 0 and dev_pass_number(self.global_step, self.cfg) % every == 0
        self.decode_dev = not in_fit or due

    def validation_step(self, b: Batch, batch_idx):
        with self.their_code("model", "forward"):
            logits = self.model.logits(self.model(b.src, b.tgt_in))
        sums = label_smoothed_loss(logits, b.tgt_out, 0.0, PAD, per_sentence=True)
        self.acc.nll += float(sums.nll)
        self.acc.tokens += int(sums.tokens)
        self.acc.index.append(b.index.cpu().numpy())
        self.acc.sent_nll.append(sums.nll_per_sentence.double().cpu().numpy())
        self.acc.sent_tokens.append(sums.tokens_per_sentence.cpu().numpy())
        if self.decode_dev:
            for i, hyp in zip(b.index.tolist(), self.translate(b)):
                self.acc.hyps[i] = hyp

    def translate(self, b: Batch, others: tuple[Seq2SeqModule, ...] = ()) -> list[list[int]]:
        """The search of decode.*; with `others`, over the ensemble of this model and theirs."""
        with self.their_code("model", "search (encode, start_cache, step)"):
            return self._search(b, others)

    def _search(self, b: Batch, others: tuple[Seq2SeqModule, ...]) -> list[list[int]]:
        d = self.cfg.decode
        inner = CachedStepper(self.model)
        if others:
            inner = EnsembleStepper([inner, *(CachedStepper(m.model) for m in others)])
        stepper = task_of(self.cfg.task).stepper(self.cfg, inner)
        if d.method == "greedy":
            out = greedy_search(stepper, b.src, b.src_lengths, BOS, EOS, d.max_len_a, d.max_len_b)
        else:
            out = beam_search(
                stepper, b.src, b.src_lengths, BOS, EOS, d.beam, d.alpha, d.max_len_a, d.max_len_b
            )
        return out.tokens

    def on_validation_epoch_end(self):
        acc = _gather(self.acc, self.trainer.world_size if self.trainer else 1)
        ppl = math.exp(acc.nll / max(acc.tokens, 1))
        self.last_eval = {
            "dev_ppl": ppl,
            "dev_nll_sum": acc.nll,
            "dev_tokens": acc.tokens,
            "step": self.global_step,
            "figures": {},  # the task's dev figures (its scorer's), where this pass decoded
        }
        self.log("dev/ppl", ppl, sync_dist=False, rank_zero_only=True)
        if self.decode_dev and self.tokenizer is not None:
            order = np.argsort(np.concatenate(acc.index)) if acc.index else np.array([], dtype=int)
            hyps = [self.tokenizer.decode(acc.hyps[i]) for i in range(len(order))]
            scored = self.scorer(hyps, self.references[: len(order)]) if self.scorer else Scored({})
            self.last_eval.update(
                figures=scored.figures,
                hyps=hyps,
                sentences={
                    "nll": np.concatenate(acc.sent_nll)[order],
                    "tokens": np.concatenate(acc.sent_tokens)[order],
                    **scored.sentences,
                },
            )
            for m in self.metrics:
                if m.record_key in scored.figures:
                    self.log(f"dev/{m.name}", scored.figures[m.record_key], rank_zero_only=True)

    # -- checkpoint state beyond Lightning's: the data position ---------------------------------------------

    def on_save_checkpoint(self, checkpoint):
        checkpoint["ablate"] = {
            "position": self.last_position,
            "train_tokens": self.train_tokens,
            "rng_cpu": torch.get_rng_state(),
            "rng_cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        }

    def on_load_checkpoint(self, checkpoint):
        redo_dev_pass(checkpoint, self.cfg.train.val_every)
        state = checkpoint.get("ablate", {})
        self.last_position = tuple(state["position"]) if state.get("position") else None
        self.train_tokens = state.get("train_tokens", 0)
        self._restored_rng = state

    def on_train_start(self):
        """Put back the random state saved with the checkpoint, so that dropout masks after a resume are the
        ones an uninterrupted run draws (with the data position and optimizer state: exact resumption)."""
        state = self._restored_rng
        if state.get("rng_cpu") is not None:
            torch.set_rng_state(state["rng_cpu"])
        if state.get("rng_cuda") and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["rng_cuda"])


def dev_pass_number(step: int, cfg: RunConfig) -> int:
    """Which dev pass of the run the one at `step` is, counted from the run's start (not the process's):
    the passes come every train.val_every steps, and one more at a step where training stops early."""
    return -(-step // cfg.train.val_every)


def redo_dev_pass(checkpoint: dict, val_every: int) -> None:
    """A checkpoint is written at the end of its step (ModelCheckpoint's and the stop's, on_train_batch_end),
    before the dev pass due at that step; Lightning, restarting there, takes that pass as done (it expects
    checkpoints written after it), and a run stopped in it would never make its dev point. The pass is
    marked as begun in the checkpoint's loop state, so that Lightning runs it again, whole, before the
    next step."""
    step = int(checkpoint.get("global_step", 0))
    progress = checkpoint.get("loops", {}).get("fit_loop", {}).get("epoch_loop.val_loop.batch_progress")
    if step == 0 or step % val_every or not progress:
        return
    done = int(progress["total"]["completed"])
    progress["total"] = {"ready": done + 1, "started": done + 1, "processed": done, "completed": done}
    progress["current"] = {"ready": 0, "started": 0, "processed": 0, "completed": 0}
    progress["is_last_batch"] = False


def _gather(acc: EvalAccumulator, world: int) -> EvalAccumulator:
    """Sum the accumulators of all devices (ranks hold disjoint dev sentences)."""
    if world <= 1 or not torch.distributed.is_initialized():
        return acc
    parts: list = [None] * world
    torch.distributed.all_gather_object(parts, acc)
    out = EvalAccumulator()
    for p in parts:
        out.nll += p.nll
        out.tokens += p.tokens
        out.index += p.index
        out.sent_nll += p.sent_nll
        out.sent_tokens += p.sent_tokens
        out.hyps.update(p.hyps)
    return out
