"""Device ids shared by the jobs of a sweep on one machine: each job takes trainer.devices ids of
trainer.device_pool for as long as it runs, and no two running jobs share one.

Hydra's joblib launcher (hydra/launcher=gpus) runs the jobs side by side; this module hands out the ids.
An id is held by an exclusive flock on <results_dir>/.devices/<id>.lock: the kernel releases it when the
job ends, whether it finished, failed or was killed, so a failing job frees its GPUs and the others go on.
The job then runs its training in child processes that see only its ids (CUDA_VISIBLE_DEVICES, set before
CUDA starts; joblib's worker processes are reused across jobs, so they never set it themselves).

`hydra.launcher.jobs_per_device=k` lets k jobs share one device: each id has k slots (a lock file each),
a job takes one slot on each of its ids, and each of its processes may use at most 1/k of the device's
memory (torch's caching allocator; the CUDA context comes on top), so that one job cannot starve the
others of memory.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

from ablate.training.hardware import ASSIGNED_ENV

MEMORY_ENV = "ABLATE_DEVICE_MEMORY_FRACTION"  # the share of each device a process may allocate (1/k)


def pool(cfg_pool: list[int] | None) -> list[int]:
    """trainer.device_pool, or every CUDA device of this machine when it is empty."""
    if cfg_pool:
        return list(cfg_pool)
    import torch

    return list(range(torch.cuda.device_count()))


@contextlib.contextmanager
def acquire(
    ids: list[int], k: int, lock_dir: Path, poll_s: float = 0.5, per_device: int = 1
) -> Iterator[list[int]]:
    """Hold a slot on each of k of `ids` until the block ends (`per_device` slots an id); wait while fewer
    than k ids have a free slot."""
    if k > len(ids):
        raise ValueError(f"trainer.devices={k} is more than the {len(ids)} ids of trainer.device_pool {ids}")
    if per_device < 1:
        raise ValueError(f"hydra.launcher.jobs_per_device={per_device}: must be at least 1")
    lock_dir.mkdir(parents=True, exist_ok=True)
    while True:
        held = _try_take(ids, k, lock_dir, per_device)
        if held:
            break
        time.sleep(poll_s)
    try:
        yield [i for i, _ in held]
    finally:
        for _, f in held:
            f.close()  # closing the file releases its lock


def _try_take(ids: list[int], k: int, lock_dir: Path, per_device: int) -> list:
    held = []
    for i in ids:
        f = _free_slot(lock_dir, i, per_device)
        if f is None:
            continue
        held.append((i, f))
        if len(held) == k:
            return held
    for _, f in held:  # not enough free: give back what we took, so that no job waits holding ids
        f.close()
    return []


def _free_slot(lock_dir: Path, i: int, per_device: int):
    """An open, locked slot file of device i, or None when all its slots are held."""
    for slot in range(per_device):
        f = open(lock_dir / f"{i}.{slot}.lock", "w")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return f
        except BlockingIOError:
            f.close()
    return None


def child_env(ids: list[int], per_device: int = 1) -> dict[str, str]:
    """The environment of a job's processes: only its devices visible, renumbered from 0; with several
    jobs a device, each process's share of its memory."""
    joined = ",".join(map(str, ids))
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=joined, **{ASSIGNED_ENV: joined})
    if per_device > 1:
        env[MEMORY_ENV] = f"{1 / per_device:.6f}"
    return env


def bound_memory() -> None:
    """In a job's process: cap torch's allocations on each visible device at the job's share."""
    share = os.environ.get(MEMORY_ENV)
    if not share:
        return
    import torch

    for d in range(torch.cuda.device_count()):
        torch.cuda.set_per_process_memory_fraction(float(share), d)
