"""One process group per job: a run on several devices starts its own worker processes and waits for them.

Lightning's default DDP launcher re-runs sys.argv in the children; inside a Hydra multirun that re-runs the
whole sweep, and ranks of different jobs can pair up. Here the job (the process Hydra called) writes its
resolved config, starts one worker per device with the torch.distributed environment set (so Lightning sees
processes created externally and launches nothing), supervises them, and fails the job with a clear message
as soon as any rank fails. Under SLURM (submitit), each task already is one rank and no spawning happens.

    python -m ablate.cluster.ddp <run_dir>/job_config.json     (a worker; started by spawn_job)
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

from omegaconf import OmegaConf

from ablate.cluster import gpu_pool
from ablate.config import RunConfig, to_dataclass
from ablate.control import faults
from ablate.records import folder, identity, status, store
from ablate.training.callbacks import Preempted
from ablate.training.hardware import ASSIGNED_ENV


class JobFailed(RuntimeError):
    pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn_job(cfg: RunConfig, out: Path, base_env: dict[str, str] | None = None) -> dict:
    """Start one worker process per device (environment: `base_env`, default this process's), supervise
    them, and return the job's record."""
    world = cfg.trainer.devices
    out.mkdir(parents=True, exist_ok=True)
    cfg_path = out / "job_config.json"
    folder.atomic_write_json(cfg_path, asdict(cfg))
    port = _free_port()
    procs, logs = [], []
    threads = max(1, (os.cpu_count() or 1) // world) if cfg.trainer.accelerator == "cpu" else None
    for rank in range(world):
        env = dict(
            base_env or os.environ,
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            WORLD_SIZE=str(world),
            NODE_RANK="0",
            LOCAL_RANK=str(rank),
            RANK=str(rank),
        )
        if threads:
            env["OMP_NUM_THREADS"] = str(threads)
        log = out / f"rank{rank}.log"
        logs.append(log)
        stdout = None if rank == 0 else open(log, "w")
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "ablate.cluster.ddp", str(cfg_path)],
                env=env,
                stdout=stdout,
                stderr=subprocess.STDOUT if stdout else None,
            )
        )
    print(f"[ablate] {identity.run_id(cfg)}: {world} worker processes (ports {port}), logs in {out}")
    failed = _supervise(procs)
    rec_path = out / store.RECORD_NAME
    if failed is not None and failed[1] == Preempted.CODE and status.on_disk(rec_path) == status.RUNNING:
        step = store.read_record(rec_path).get("stopped_at_step")  # the workers stopped at a checkpoint
        raise Preempted(step, out / "checkpoints" / "last.ckpt")
    if failed is not None:
        rank, code = failed
        reason = f"rank {rank} exited with code {code}" + (f" (see {logs[rank]})" if rank else "")
        held = (base_env or {}).get(ASSIGNED_ENV)
        _mark_failed(
            cfg, out / store.RECORD_NAME, reason, [int(i) for i in held.split(",")] if held else None
        )
        raise JobFailed(reason)
    return store.read_record(rec_path)


def _supervise(procs: list[subprocess.Popen]) -> tuple[int, int] | None:
    """Wait for all workers; on the first failure stop the rest (a peer would wait for it forever)."""

    def forward(signum, _frame):  # preemption: pass SIGTERM/SIGUSR1 on so workers checkpoint
        for p in procs:
            if p.poll() is None:
                p.send_signal(signum)

    old = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGUSR1)}
    try:
        while True:
            codes = [p.poll() for p in procs]
            bad = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
            if bad:
                for p in procs:
                    if p.poll() is None:
                        p.terminate()
                deadline = time.time() + 15
                for p in procs:
                    try:
                        p.wait(timeout=max(0.1, deadline - time.time()))
                    except subprocess.TimeoutExpired:
                        p.kill()
                return bad[0]
            if all(c == 0 for c in codes):
                return None
            time.sleep(0.2)
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _mark_failed(cfg: RunConfig, path: Path, reason: str, held: list[int] | None) -> None:
    """The job's record says failed, with the reason, whether or not rank 0 got as far as writing one."""
    if status.on_disk(path) is None:
        status.transition(path, "reject", store.new_record(cfg), reason, devices_assigned=held)
    else:
        status.settle(path, "fail", reason, devices_assigned=held)


def worker_main(cfg_path: str) -> None:
    from ablate.data.datamodule import prepare_corpus
    from ablate.tasks import task_of
    from ablate.training.fit import run_worker

    cfg = to_dataclass(OmegaConf.create(json.loads(Path(cfg_path).read_text())))
    task_of(cfg.task)  # a fresh process: the task's data sources register as the launching process's did
    faults.check_start(cfg.model.name)
    gpu_pool.bound_memory()  # hydra.launcher.jobs_per_device > 1: this job's share of each GPU
    run_worker(cfg, prepare_corpus(cfg))


if __name__ == "__main__":
    worker_main(sys.argv[1])
