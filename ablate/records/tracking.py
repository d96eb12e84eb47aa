"""Experiment loggers: W&B (online only when it can be, offline otherwise, never a prompt), CSV, or none."""

from __future__ import annotations

import netrc
import os
import socket
from pathlib import Path

from ablate.config import LoggerConfig


def has_credentials() -> bool:
    """W&B credentials: WANDB_API_KEY, or the key `wandb login` writes to ~/.netrc."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        auth = netrc.netrc(os.path.expanduser("~/.netrc")).authenticators("api.wandb.ai")
        return bool(auth and auth[2])
    except (OSError, netrc.NetrcParseError):
        return False


def _reachable(host: str, port: int, timeout: float) -> bool:
    """A TCP connect to host:port, bounded in time; name resolution runs in a thread because
    getaddrinfo itself has no timeout and can block for tens of seconds without a network."""
    import concurrent.futures as cf

    def connect() -> bool:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return True
        except OSError:
            return False

    pool = cf.ThreadPoolExecutor(max_workers=1)
    try:
        return pool.submit(connect).result(timeout=timeout)
    except cf.TimeoutError:
        return False
    finally:
        pool.shutdown(wait=False)


def wandb_mode(cfg: LoggerConfig) -> tuple[str, str]:
    """(mode, why). Decided within probe_timeout_s: without credentials wandb would wait for a key at a
    prompt, and with a key but no network it blocks for minutes (then fails with "context deadline
    exceeded"). Forced online (logger.mode=online, WANDB_MODE=online) where it cannot be, it raises
    WandbUnreachable in one line, within the same time."""
    env = os.environ.get("WANDB_MODE")
    forced = f"logger.mode={cfg.mode}" if cfg.mode != "auto" else f"WANDB_MODE={env}" if env else None
    mode = cfg.mode if cfg.mode != "auto" else env
    if mode is not None and mode != "online":
        return mode, str(forced)
    if not has_credentials():
        if forced:
            raise WandbUnreachable(f"{forced}, but no W&B credentials (WANDB_API_KEY or ~/.netrc)")
        return "offline", "no W&B credentials (WANDB_API_KEY or ~/.netrc)"
    url = os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")
    netloc = url.split("://")[-1].split("/")[0]
    host, _, port = netloc.partition(":")
    port = int(port) if port else (80 if url.startswith("http://") else 443)
    if not _reachable(host, port, cfg.probe_timeout_s):
        unreachable = f"{netloc} not reachable within {cfg.probe_timeout_s:g}s"
        if forced:
            raise WandbUnreachable(f"{forced}, but {unreachable}")
        return "offline", unreachable
    return "online", str(forced or "credentials and network found")


class WandbUnreachable(ValueError):
    """W&B forced online where it cannot be: one line that says how to log anyway."""

    def __init__(self, why: str):
        super().__init__(
            f"W&B: {why}; set WANDB_MODE=offline (or logger.mode=offline) to log offline and upload later "
            "with `wandb sync`, or logger=none"
        )


# Messages of the libraries that are about the libraries, not about this run: Lightning's advertisement for
# its cloud logger, its hint to use `srun` (printed on any machine with SLURM installed, also where the job
# is not meant for it) and its echo of a default the trainer passes; W&B's note on a setting Lightning
# passes and this project never sets.
THIRD_PARTY_NOISE = (
    "💡 Tip:",
    "The `srun` command is available on your system but is not used",
    "The anonymous setting has no effect",
    "was configured so 100% of the batches will be used",
)


class _Noise:
    """A logging filter that drops THIRD_PARTY_NOISE."""

    @staticmethod
    def filter(record) -> bool:
        message = record.getMessage()
        return not any(n in message for n in THIRD_PARTY_NOISE)


def quiet_third_party() -> None:
    """Keep the libraries' own notices (THIRD_PARTY_NOISE) out of a run's output, so that what it prints is
    about the run."""
    import logging
    import re
    import warnings

    for text in THIRD_PARTY_NOISE:
        warnings.filterwarnings("ignore", message=f".*{re.escape(text)}")
    for name in ("pytorch_lightning.utilities.rank_zero", "lightning_fabric.utilities.rank_zero"):
        logging.getLogger(name).addFilter(_Noise())


def make_logger(
    cfg: LoggerConfig,
    run_dir: Path,
    run_id: str,
    name: str,
    group: str | None,
    tags: list[str],
    config: dict,
    metrics=(),
):
    """The run's logger. W&B: one run per job, job_type "train", in the W&B group logger.group (default:
    the sweep), with summaries that keep the best dev PPL and the best of each of the task's `metrics`
    rather than the last."""
    if cfg.kind == "none":
        return False
    if cfg.kind == "csv":
        from pytorch_lightning.loggers import CSVLogger

        return CSVLogger(save_dir=str(run_dir), name="csv", version="")
    mode, why = wandb_mode(cfg)
    os.environ.setdefault("WANDB_SILENT", "true")
    os.environ["WANDB_MODE"] = mode  # also stops any later prompt inside wandb
    print(
        f"[ablate] W&B {mode}: {why}"
        + (f". Upload later with: wandb sync {run_dir}/wandb/offline-run-*" if mode == "offline" else "")
    )
    logger = _wandb_logger_class()(
        project=project_of(cfg.project),
        entity=cfg.entity or os.environ.get("WANDB_ENTITY") or None,
        group=cfg.group or group,
        job_type="train",
        name=f"{name}/s{config['seed']}" if "seed" in config else name,
        id=run_id,
        resume="allow",
        save_dir=str(run_dir),
        tags=tags,
        mode=mode,
        config={**config, **what_ran(run_dir, config)},
        log_model=cfg.log_checkpoints,
    )
    # Lightning's WandbLogger always passes anonymous=None to wandb.init, which W&B answers with a warning;
    # the logger has no public way to leave a key out of its init arguments.
    if getattr(logger, "_wandb_init", {}).get("anonymous", 0) is None:
        del logger._wandb_init["anonymous"]
    define_metrics(logger.experiment, metrics)
    return logger


def project_of(project: str) -> str:
    """The W&B project: logger.project where it is set to other than its default, else WANDB_PROJECT, else
    the default; the dashboard resolves it the same way."""
    from ablate.config import LoggerConfig

    default = LoggerConfig().project
    return project if project != default else os.environ.get("WANDB_PROJECT") or default


def _wandb_logger_class():
    """Lightning's WandbLogger with W&B's own step set to the trainer's: a run resumed from a checkpoint
    goes on from its step instead of counting from 0 again, so that its offline parts (one per process,
    one run id) sync as one run whose steps only go forward."""
    from pytorch_lightning.loggers import WandbLogger
    from pytorch_lightning.utilities import rank_zero_only

    class StepWandbLogger(WandbLogger):
        @rank_zero_only
        def log_metrics(self, metrics, step=None) -> None:
            if step is None:
                return super().log_metrics(metrics, step)
            self.experiment.log({**metrics, "trainer/global_step": step}, step=step)

    return StepWandbLogger


def what_ran(run_dir: Path, config: dict) -> dict:
    """`ran.*`: the model that trained (after recipe and scale, from the run's record), and `paper.*`: the
    row as the paper's Table 3 states it, side by side in the run's W&B config, so that grouping, filters
    and parallel coordinates show what trained, not the paper-size row the config names. A row of another
    model (`model.arch`) holds its own keys (its `model.args` after recipe and scale) and no Table 3 row."""
    import json

    from ablate.config.arch import DEFAULT_ARCH
    from ablate.paper import table3

    try:
        rec = json.loads((run_dir / "record.json").read_text())
        m = rec["model_effective"]
    except (OSError, ValueError, KeyError):
        return {}
    model = config.get("model") or {}
    counts = {"params": rec.get("params"), "params_paper_scale": rec.get("params_paper_scale")}
    if model.get("arch", DEFAULT_ARCH) != DEFAULT_ARCH:
        return {"ran": {**m, **counts}}
    ran = {"N": m["n_layers"], "d_model": m["d_model"], "d_ff": m["d_ff"], "h": m["n_heads"], "d_k": m["d_k"]}
    ran.update(d_v=m["d_v"], P_drop=m["dropout"], eps_ls=model.get("label_smoothing"))
    ran.update(positions=m["positional"], **counts)
    out = {"ran": ran}
    p = table3().get(str(rec.get("row")))
    if p is not None:
        out["paper"] = {
            "N": p.n_layers, "d_model": p.d_model, "d_ff": p.d_ff, "h": p.n_heads, "d_k": p.d_k, "d_v": p.d_v,
            "P_drop": p.dropout, "eps_ls": p.label_smoothing, "positions": p.positional,
            "params_m": p.params_m, "dev_ppl": p.ppl, "dev_bleu": p.bleu,
        }  # fmt: skip
    return out


def define_metrics(run, metrics=()) -> None:
    """Summaries keep the best value of a curve, not its last (W&B's define_metric): perplexity's, the
    training loss's, and each of the task's declared metrics in its own direction."""
    from ablate.tasks import PPL

    run.define_metric("trainer/global_step")
    goals = {"train/loss": "min"} | {
        f"dev/{m.name}": "max" if m.higher_is_better else "min" for m in (PPL, *metrics)
    }
    for key, goal in goals.items():
        run.define_metric(key, step_metric="trainer/global_step", summary=f"{goal},last")


def finish(logger, files: list[Path] = ()) -> None:
    """One W&B run per job: close it so the next job of a sweep starts its own. `files` (the result record,
    curves, per-sentence statistics) are copied into the run's files so that the report can rebuild the
    table from W&B alone, online or from an offline folder."""
    from pytorch_lightning.loggers import WandbLogger

    if isinstance(logger, WandbLogger):
        import shutil

        import wandb

        if wandb.run is not None:
            paper = (wandb.run.config.get("paper") or {}).get("dev_ppl")
            if paper is not None:  # beside final/dev_ppl in the dashboard's bars
                wandb.run.summary["paper/dev_ppl"] = paper
            for f in files:
                if Path(f).is_file():
                    shutil.copy(f, Path(wandb.run.dir) / Path(f).name)
            wandb.finish()
