"""The machine's other work, where a CPU job's threads are set: the threads running beside this process
(`running_threads`, from /proc/stat) and the note a command prints where they and its own do not fit its
cores (`busy_cores_note`)."""

from __future__ import annotations

import os
from pathlib import Path


def oversubscription(threads: int, cores: int, others: float, knob: str = "trainer.threads=") -> str | None:
    """A note where a CPU run's threads and the threads already running elsewhere on the machine (`others`)
    are more than its cores: each thread then waits for a core, and spins while it waits, so two jobs of 2
    threads on 2 cores each run several times slower than one. None where they fit. `knob` is what sets the
    threads, up to its value (`--threads ` for ablate.evaluate)."""
    busy = int(round(others))
    if threads + busy <= cores:
        return None
    fits = max(1, cores - busy)
    advice = (
        f"{knob}{fits} fits the free cores"
        if fits < threads
        else "this run goes slower than on a free machine"
    )
    return (
        f"[ablate] note: {threads} thread(s) on {cores} core(s) while about {busy} other thread(s) run on "
        f"the machine: they slow each other down; {advice} (OMP_WAIT_POLICY=PASSIVE keeps waiting threads "
        "from spinning)"
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


def busy_cores_note(threads: int, knob: str = "trainer.threads=") -> str | None:
    """`oversubscription` on this process's cores (its CPU affinity) and the threads running now."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return oversubscription(threads, cores, running_threads(), knob)
