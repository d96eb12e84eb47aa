"""Device ids shared by the jobs of a sweep on one machine: each job takes trainer.devices ids of
trainer.device_pool for as long as it runs, and no two running jobs share one.

Hydra's joblib launcher (hydra/launcher=gpus) runs the jobs side by side; this module hands out the ids.
An id is held by an exclusive flock on <results_dir>/.devices/<id>.lock: the kernel releases it when the
job ends, whether it finished, failed or was killed, so a failing job frees its GPUs and the others go on.
The job then runs its training in child processes that see only its ids (CUDA_VISIBLE_DEVICES, set before
CUDA starts; joblib's worker processes are reused across jobs, so they never set it themselves).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

ASSIGNED_ENV = "ABLATE_DEVICES"  # the ids a job's processes got, as "2,3" (the worker records it)


def pool(cfg_pool: list[int] | None) -> list[int]:
    """trainer.device_pool, or every CUDA device of this machine when it is empty."""
    if cfg_pool:
        return list(cfg_pool)
    import torch

    return list(range(torch.cuda.device_count()))


@contextlib.contextmanager
def acquire(ids: list[int], k: int, lock_dir: Path, poll_s: float = 0.5) -> Iterator[list[int]]:
    """Hold k of `ids` until the block ends; wait while fewer than k are free."""
    if k > len(ids):
        raise ValueError(f"trainer.devices={k} is more than the {len(ids)} ids of trainer.device_pool {ids}")
    lock_dir.mkdir(parents=True, exist_ok=True)
    while True:
        held = _try_take(ids, k, lock_dir)
        if held:
            break
        time.sleep(poll_s)
    try:
        yield [i for i, _ in held]
    finally:
        for _, f in held:
            f.close()  # closing the file releases its lock


def _try_take(ids: list[int], k: int, lock_dir: Path) -> list:
    held = []
    for i in ids:
        f = open(lock_dir / f"{i}.lock", "w")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            continue
        held.append((i, f))
        if len(held) == k:
            return held
    for _, f in held:  # not enough free: give back what we took, so that no job waits holding ids
        f.close()
    return []


def child_env(ids: list[int]) -> dict[str, str]:
    """The environment of a job's processes: only its devices visible, renumbered from 0."""
    joined = ",".join(map(str, ids))
    return dict(os.environ, CUDA_VISIBLE_DEVICES=joined, **{ASSIGNED_ENV: joined})


def assigned() -> list[int] | None:
    v = os.environ.get(ASSIGNED_ENV)
    return [int(x) for x in v.split(",")] if v else None
