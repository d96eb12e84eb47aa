"""The machine's other work, where a CPU job's threads are set: the threads running beside this process
(`running_threads`, from /proc/stat), the wait policy a run's OpenMP threads get where they and those do not
fit its cores (`wait_without_spinning`), and the note a command prints then (`busy_cores_note`)."""

from __future__ import annotations

import functools
import os
from pathlib import Path

WAIT_POLICY = "OMP_WAIT_POLICY"  # read once by OpenMP (libgomp), when torch loads it


def oversubscription(
    threads: int, cores: int, others: float, knob: str = "trainer.threads=", policy: str | None = None
) -> str | None:
    """A note where a CPU run's threads and the threads already running elsewhere on the machine (`others`)
    are more than its cores: each thread then waits for a core, and spins while it waits, so two jobs of 2
    threads on 2 cores each run several times slower than one. None where they fit. `knob` is what sets the
    threads, up to its value (`--threads ` for ablate.evaluate); `policy` the process's OMP_WAIT_POLICY."""
    busy = int(round(others))
    if threads + busy <= cores:
        return None
    fits = max(1, cores - busy)
    advice = (
        f"{knob}{fits} fits the free cores"
        if fits < threads
        else "this run goes slower than on a free machine"
    )
    waiting = (
        f"waiting threads sleep instead of spinning: {WAIT_POLICY}=PASSIVE, the same sums"
        if (policy or "").upper() == "PASSIVE"
        else f"{WAIT_POLICY}=PASSIVE keeps waiting threads from spinning"
    )
    return (
        f"[ablate] note: {threads} thread(s) on {cores} core(s) while about {busy} other thread(s) run on "
        f"the machine: they slow each other down; {advice} ({waiting})"
    )


def running_threads(stat: str | None = None, samples: int = 5) -> float:
    """Threads running or ready to run now, other than this one: the median of a few readings of
    procs_running in /proc/stat (0 where there is no /proc)."""
    import statistics
    import time

    readings = []
    for i in range(samples if stat is None else 1):
        try:
            text = stat if stat is not None else Path("/proc/stat").read_text()
        except OSError:
            return 0.0
        line = next((ln for ln in text.splitlines() if ln.startswith("procs_running ")), None)
        if line is None:
            return 0.0
        readings.append(int(line.split()[1]) - 1)  # less this thread, which is running to read it
        if i < samples - 1 and stat is None:
            time.sleep(0.02)
    return max(0.0, statistics.median(readings))


@functools.cache
def machine_load() -> float:
    """`running_threads` as this process first read it: the reading that set its wait policy is the one its
    note names."""
    return running_threads()


def cores() -> int:
    """This process's cores: its CPU affinity where the system has one."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def threads_asked(argv: list[str]) -> int:
    """A run's CPU threads as its command line sets them, before its config composes: trainer.threads (a
    sweep's largest value) times trainer.devices, else torch's default: OMP_NUM_THREADS where it is set,
    else a thread a core."""

    def value(key: str) -> int | None:
        given = [a.split("=", 1)[1] for a in argv if a.lstrip("+").split("=", 1)[0] == key]
        numbers = [int(v) for v in given[-1].split(",") if v.strip().isdigit()] if given else []
        return max(numbers) if numbers else None

    default = os.environ.get("OMP_NUM_THREADS", "").strip()
    threads = value("trainer.threads") or (int(default) if default.isdigit() else 0) or cores()
    return threads * (value("trainer.devices") or 1)


def wait_without_spinning(argv: list[str]) -> bool:
    """Where a run's threads and the threads running elsewhere on the machine are more than its cores, its
    OpenMP threads sleep while they wait instead of spinning (OMP_WAIT_POLICY=PASSIVE, in this process and
    the workers it starts): the same threads split the same sums, so the figures are a free machine's, and
    a waiting thread leaves its core to one with work (README command 1 beside busy cores:
    docs/reliability.md).
    OpenMP reads the policy once, when torch loads it: call this before torch is imported. A policy already
    set is kept, and in a SLURM job the CPUs are the job's own. Returns whether it set the policy."""
    if WAIT_POLICY in os.environ or os.environ.get("SLURM_JOB_ID"):
        return False
    if oversubscription(threads_asked(argv), cores(), machine_load()) is None:
        return False
    os.environ[WAIT_POLICY] = "PASSIVE"
    return True


def busy_cores_note(threads: int, knob: str = "trainer.threads=") -> str | None:
    """`oversubscription` on this process's cores, the threads running beside it and its wait policy."""
    return oversubscription(threads, cores(), machine_load(), knob, os.environ.get(WAIT_POLICY))
