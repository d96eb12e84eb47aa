"""What a sweep asks SLURM for, and whether the cluster can give it: resolved from the run config before
anything is submitted (hydra/launcher=slurm, hydra_plugins/ablate_slurm).

One SLURM job per run; one task per Lightning rank (trainer.devices tasks on each of trainer.num_nodes
nodes); GPUs only where the trainer uses them; CPUs per task from trainer.threads. A request that no node
of the partition can hold is refused in one line naming the key, instead of pending forever.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass

MAX_DEFAULT_CPUS = 8  # CPUs per task when trainer.threads is not set: up to this many, as a node allows


class SlurmError(ValueError):
    """A request the cluster cannot run, or no cluster to ask: one line, naming the key."""


@dataclass(frozen=True)
class Node:
    name: str
    cpus: int
    mem_mb: int
    gpus: int


@dataclass(frozen=True)
class Partition:
    name: str
    default: bool
    max_minutes: int | None  # None: no limit
    nodes: tuple[Node, ...]

    def describe(self) -> str:
        c = max(n.cpus for n in self.nodes)
        g = max(n.gpus for n in self.nodes)
        m = max(n.mem_mb for n in self.nodes) // 1024
        return f"partition {self.name}: {len(self.nodes)} node(s), at most {c} CPUs, {g} GPUs, {m} GB a node"


@dataclass(frozen=True)
class Request:
    partition: str | None
    nodes: int
    tasks_per_node: int
    gpus_per_node: int
    cpus_per_task: int
    mem_gb: int | None
    timeout_min: int


def _run(cmd: list[str]) -> str:
    if shutil.which(cmd[0]) is None:
        raise SlurmError(
            f"hydra/launcher=slurm: `{cmd[0]}` not found; run the sweep from a SLURM login node "
            "(or start the one-node test cluster: bash tests/slurm/cluster.sh up)"
        )
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if out.returncode:
        raise SlurmError(f"hydra/launcher=slurm: `{' '.join(cmd)}` failed: {out.stderr.strip()[:300]}")
    return out.stdout


def gpus_in(gres: str) -> int:
    """GPUs in a node's GRES string: 'gpu:8', 'gpu:a100:4(S:0-1)', 'gpu:2,shard:4', '(null)'."""
    total = 0
    for item in gres.split(","):
        m = re.match(r"gpu(?::[^:(]+)?:(\d+)", item.strip())
        if m:
            total += int(m.group(1))
    return total


def parse_minutes(limit: str) -> int | None:
    """sinfo's time limit ('infinite', '30:00', '1-12:00:00', '2:00:00') in minutes."""
    if limit in ("infinite", "UNLIMITED", "n/a"):
        return None
    days, _, hms = limit.rpartition("-")
    parts = [int(p) for p in hms.split(":")]
    h, m, s = ([0] * (3 - len(parts)) + parts) if len(parts) > 1 else (0, parts[0], 0)
    return (int(days or 0) * 24 + h) * 60 + m + (1 if s else 0)


def parse_sinfo(text: str) -> dict[str, Partition]:
    """`sinfo -h -N -o '%P|%N|%c|%m|%G|%l'` (one line per node and partition) -> {name: Partition}."""
    rows: dict[str, list] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        part, node, cpus, mem, gres, limit = line.split("|")
        default = part.endswith("*")
        name = part.rstrip("*")
        entry = rows.setdefault(name, [default, parse_minutes(limit), {}])
        entry[2][node] = Node(node, int(cpus), int(re.sub(r"\D.*", "", mem) or 0), gpus_in(gres))
    return {n: Partition(n, d, t, tuple(nodes.values())) for n, (d, t, nodes) in rows.items()}


def partitions() -> dict[str, Partition]:
    return parse_sinfo(_run(["sinfo", "-h", "-N", "-o", "%P|%N|%c|%m|%G|%l"]))


def pick_partition(parts: dict[str, Partition], name: str | None) -> Partition:
    if name is None:
        default = [p for p in parts.values() if p.default]
        if not default:
            raise SlurmError(
                "hydra.launcher.partition: the cluster has no default partition; set it or "
                f"ABLATE_SLURM_PARTITION (partitions: {', '.join(parts)})"
            )
        return default[0]
    if name not in parts:
        raise SlurmError(
            f"hydra.launcher.partition={name}: no such partition (the cluster has: {', '.join(parts)})"
        )
    return parts[name]


def resolve(launcher: dict, trainer: dict, part: Partition) -> Request:
    """The request for one job, from the launcher's keys (null = derive it) and the run's trainer."""
    tasks = int(launcher.get("tasks_per_node") or trainer["devices"])
    nodes = int(launcher.get("nodes") or trainer.get("num_nodes") or 1)
    gpus = launcher.get("gpus_per_node")
    if gpus is None:
        uses_gpu = trainer["accelerator"] == "gpu" or (
            trainer["accelerator"] == "auto" and any(n.gpus for n in part.nodes)
        )
        gpus = tasks if uses_gpu else 0
    cpus = launcher.get("cpus_per_task") or trainer.get("threads")
    if cpus is None:
        cpus = max(1, min(MAX_DEFAULT_CPUS, max(n.cpus for n in part.nodes) // tasks))
    return Request(
        partition=part.name,
        nodes=nodes,
        tasks_per_node=tasks,
        gpus_per_node=int(gpus),
        cpus_per_task=int(cpus),
        mem_gb=launcher.get("mem_gb"),
        timeout_min=int(launcher["timeout_min"]),
    )


def check(req: Request, part: Partition) -> None:
    """Refuse what no node of the partition can hold (SLURM would leave it pending with no message)."""
    where = part.describe()
    fits = [
        n
        for n in part.nodes
        if n.cpus >= req.cpus_per_task * req.tasks_per_node
        and n.gpus >= req.gpus_per_node
        and (req.mem_gb is None or n.mem_mb >= req.mem_gb * 1024)
    ]
    if not any(n.cpus >= req.cpus_per_task * req.tasks_per_node for n in part.nodes):
        key = "cpus_per_task" if req.tasks_per_node == 1 else "cpus_per_task x tasks_per_node"
        raise SlurmError(
            f"hydra.launcher.cpus_per_task={req.cpus_per_task}: {req.tasks_per_node} task(s) of "
            f"{req.cpus_per_task} CPUs ({key}) fit no node ({where}); set trainer.threads"
        )
    if not any(n.gpus >= req.gpus_per_node for n in part.nodes):
        raise SlurmError(
            f"hydra.launcher.gpus_per_node={req.gpus_per_node}: no node has that many GPUs ({where}); "
            "trainer=cpu for a CPU-only partition, or fewer trainer.devices"
        )
    if req.mem_gb is not None and not any(n.mem_mb >= req.mem_gb * 1024 for n in part.nodes):
        raise SlurmError(f"hydra.launcher.mem_gb={req.mem_gb}: no node has that much memory ({where})")
    if not fits:
        raise SlurmError(f"hydra.launcher: no single node holds CPUs, GPUs and memory together ({where})")
    if req.nodes > len(fits):
        raise SlurmError(
            f"trainer.num_nodes={req.nodes}: only {len(fits)} node(s) of partition {part.name} can hold "
            f"the job ({where})"
        )
    if part.max_minutes is not None and req.timeout_min > part.max_minutes:
        raise SlurmError(
            f"hydra.launcher.timeout_min={req.timeout_min}: partition {part.name} allows at most "
            f"{part.max_minutes} minutes"
        )


def check_warning(launcher: dict) -> None:
    """The time limit's warning must come after the job starts: a signal_delay_s as long as the job's time
    limit would ask for the stop before the first step (SLURM accepts it without a word)."""
    delay, minutes = int(launcher["signal_delay_s"]), int(launcher["timeout_min"])
    if delay >= minutes * 60:
        raise SlurmError(
            f"hydra.launcher.signal_delay_s={delay}: the time limit's warning would come before the job "
            f"starts (hydra.launcher.timeout_min={minutes}, {minutes * 60} s); lower it or lengthen the limit"
        )
