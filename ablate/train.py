"""train(cfg) -> result record: run (or skip, or resume) the run a config names, on one or several devices.

The run's identity (results.run_id) names its folder: a finished run is skipped, an interrupted one goes
on from its checkpoint, and a lock keeps two processes from running the same identity at once. The work
itself is worker.run_worker (build, fit, evaluate); launch.spawn_job starts one worker per device.
"""

from __future__ import annotations

import os
import time
import warnings
from pathlib import Path

from ablate import devices, requeue, results
from ablate.callbacks import Preempted
from ablate.config import RunConfig, validate
from ablate.data.datamodule import prepare_corpus
from ablate.hardware import check_accelerator
from ablate.launch import spawn_job
from ablate.worker import run_worker

# Two warnings Lightning prints on every run that say nothing about this one: a deprecation inside its own
# pytree helper, and a note that our transfer_batch_to_device (which moves our Batch dataclass) is used.
warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*")
warnings.filterwarnings("ignore", message=r".*overridden `transfer_batch_to_device`.*")


def train(cfg: RunConfig) -> dict:
    """Run (or skip, or resume) the run this config names; return its result record."""
    check_accelerator(cfg.trainer.accelerator, cfg.trainer.device_pool)  # the machine first: no GPU, no run
    validate(cfg)
    job = requeue.job()  # inside a SLURM job: the time limit's warning, requeue after a stop
    job.install()
    if job.id and cfg.trainer.threads is None and os.environ.get("SLURM_CPUS_PER_TASK"):
        cfg.trainer.threads = int(os.environ["SLURM_CPUS_PER_TASK"])  # the CPUs SLURM gave, not the node's
    if job.id and cfg.trainer.threads:  # else Lightning's DDP sets cores // local ranks over trainer.threads
        os.environ.setdefault("OMP_NUM_THREADS", str(cfg.trainer.threads))
    try:
        rec = _train(cfg)
    except Preempted:
        job.after_stop(results.run_dir(cfg))
        raise
    job.after_finish(results.run_dir(cfg), rec)
    return rec


def _train(cfg: RunConfig) -> dict:
    out = results.run_dir(cfg)
    if _inside_managed_process():  # a worker of a job whose launcher already holds the run
        return run_worker(cfg, prepare_corpus(cfg.data))
    out.parent.mkdir(parents=True, exist_ok=True)
    with results.run_lock(out) as held:
        if not held:  # another process (a second sweep, a second joblib worker) is running this identity
            print(f"[ablate] {results.run_id(cfg)} is being run by another process; skipped")
            rec_path = out / results.RECORD_NAME
            if rec_path.is_file():
                return results.read_record(rec_path)
            return {"run_id": results.run_id(cfg), "row": cfg.model.name, "status": "running"}
        return _train_locked(cfg, out)


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
    if cfg.trainer.device_pool is not None:  # hydra/launcher=gpus: jobs side by side, each on its own ids
        ids = devices.pool(cfg.trainer.device_pool)
        with devices.acquire(ids, cfg.trainer.devices, Path(cfg.results_dir) / ".devices") as mine:
            print(f"[ablate] {results.run_id(cfg)}: devices {mine}")
            return spawn_job(cfg, out, devices.child_env(mine))
    if cfg.trainer.devices * cfg.trainer.num_nodes > 1:
        return spawn_job(cfg, out)
    return run_worker(cfg, prepared)


def _inside_managed_process() -> bool:
    """True when the processes of this job already exist (our own workers, or SLURM's tasks)."""
    return "LOCAL_RANK" in os.environ or (
        "SLURM_NTASKS" in os.environ and int(os.environ["SLURM_NTASKS"]) > 1
    )
