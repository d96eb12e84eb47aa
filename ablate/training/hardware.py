"""What a run needs to know about the machine: precision it can run fast, the device's name, and the CPU
allocator's behaviour."""

from __future__ import annotations

import ctypes
import os
import warnings

import pytorch_lightning as pl
import torch


def resolve_precision(precision: str, accelerator: str) -> str:
    """trainer.precision=auto: bf16-mixed where the device has bf16 arithmetic units (a CUDA GPU with
    native bf16, Ampere or later; a CPU with AVX512_BF16 or AMX), 32-true elsewhere. On a CPU without them
    bf16 is emulated: a bf16 matmul ran ~400x slower than float32 on an AVX2 Zen 3 (docs/speed.md)."""
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


def check_accelerator(accelerator: str, device_pool: list[int] | None) -> None:
    """A GPU run on a machine without one stops here, in one line, before anything is written."""
    from ablate.config import ConfigError

    if accelerator == "gpu" and not torch.cuda.is_available():
        raise ConfigError(
            "trainer.accelerator=gpu: this machine has no CUDA GPU (use trainer=cpu or trainer=default)"
        )
    if device_pool == [] and not torch.cuda.is_available():
        raise ConfigError(
            "hydra/launcher=gpus: this machine has no CUDA GPU to share (give trainer.device_pool=[...] ids)"
        )


def cpu_has_native_bf16() -> bool:
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")  # torch.cpu, private but long-lived
    return any(getattr(torch.cpu, name, lambda: False)() for name in probes)


def device_name(trainer: pl.Trainer) -> str:
    if trainer.strategy.root_device.type == "cuda":
        return torch.cuda.get_device_name(trainer.strategy.root_device)
    return f"cpu ({torch.get_num_threads()} threads)"


def keep_freed_memory() -> None:
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


ASSIGNED_ENV = "ABLATE_DEVICES"  # the ids of a job's processes under hydra/launcher=gpus, as "2,3"


def assigned_devices() -> list[int] | None:
    """The device ids hydra/launcher=gpus gave this job (its record keeps them), None outside it."""
    v = os.environ.get(ASSIGNED_ENV)
    return [int(x) for x in v.split(",")] if v else None


def global_rank() -> int:
    """This process's rank in its job: RANK where a job started its own workers (cluster.ddp sets it,
    also inside a SLURM allocation, whose SLURM_PROCID the workers inherit), else SLURM's task id."""
    return int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")))
