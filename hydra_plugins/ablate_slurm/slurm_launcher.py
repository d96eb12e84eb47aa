"""`hydra/launcher=slurm`: one SLURM job per sweep member, through submitit (`pip install -e '.[slurm]'`).

Before anything is submitted, each member's request is resolved from its own run config
(ablate.cluster.slurm_request: tasks = trainer.devices per node, nodes = trainer.num_nodes, GPUs only where
the trainer uses them, CPUs per task from trainer.threads) and checked against what `sinfo` says the partition
offers; a request no node can hold stops the sweep in one line naming the key. Members with the same request
go in one job array. Each job asks SLURM for the warning signal (`--signal=USR2@signal_delay_s`) and for
requeueing; inside the job, ablate.cluster.slurm_member runs the member (a submitit Checkpointable) and
ablate.cluster.slurm_job stops training at a checkpoint and requeues the job until the run is finished.
The launcher waits for every job, and a job that ended without an answer (scancel, a node lost, killed at
its time limit) is reported by its SLURM state and written into the run's record, so that the sweep's
closing line (and exit status) tells which runs did not finish.

This module is imported by Hydra's plugin scan on every start: submitit and torch are imported only when
a sweep is launched.
"""

import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict


@dataclass
class AblateSlurmConf:
    _target_: str = "hydra_plugins.ablate_slurm.slurm_launcher.AblateSlurmLauncher"
    submitit_folder: str = "${hydra.sweep.dir}/.submitit/%j"
    partition: str | None = None  # null: the cluster's default partition
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    exclude: str | None = None
    nodes: int | None = None  # null: trainer.num_nodes
    tasks_per_node: int | None = None  # null: trainer.devices (one task per Lightning rank)
    gpus_per_node: int | None = None  # null: trainer.devices where the trainer uses GPUs, else 0
    cpus_per_task: int | None = None  # null: trainer.threads, else as many as a node allows, up to 8
    mem_gb: int | None = None
    timeout_min: int = 4320
    signal_delay_s: int = 120  # the warning comes this long before the time limit: the checkpoint's time
    array_parallelism: int = 64
    name: str = "${hydra.job.name}"
    additional_parameters: dict[str, Any] = field(default_factory=dict)
    setup: list[str] = field(default_factory=list)  # shell lines run before the job (module load ...)


ConfigStore.instance().store(
    group="hydra/launcher", name="ablate_slurm", node=AblateSlurmConf, provider="ablate"
)


@dataclass
class _Member:
    overrides: list[str]
    idx: int
    run_id: str
    folder: Path  # the run's folder (identity.run_dir)
    request: Any  # ablate.cluster.slurm_request.Request


class AblateSlurmLauncher(Launcher):
    def __init__(self, **params: Any) -> None:
        self.params = {
            k: OmegaConf.to_container(v) if OmegaConf.is_config(v) else v for k, v in params.items()
        }
        self.config: DictConfig | None = None
        self.task_function: TaskFunction | None = None
        self.hydra_context: HydraContext | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function

    # -- on the login node -------------------------------------------------------------------------------

    def launch(self, job_overrides: Any, initial_job_idx: int) -> list[JobReturn]:
        from ablate.cluster.slurm_request import SlurmError

        try:
            submitit = _import_submitit()
            members, refused = self._members(job_overrides, initial_job_idx)
            jobs = self._submit(submitit, members)
        except SlurmError as e:
            print(f"error: {e}", file=sys.stderr)
            sys.exit(2)
        by_idx = {m.idx: self._wait(m, job) for m, job in jobs} | refused
        return [by_idx[initial_job_idx + i] for i in range(len(job_overrides))]

    def _members(self, job_overrides: Any, first: int) -> tuple[list[_Member], dict[int, JobReturn]]:
        """Each member's run id and request, checked against the partition before any is submitted; a
        member whose config does not compose is not submitted (its outcome says why)."""
        from ablate.cluster import slurm_request as slurm
        from ablate.errors import first_line
        from ablate.jobs.sweep import member_config
        from ablate.records import identity

        slurm.check_warning(self.params)
        part = slurm.pick_partition(slurm.partitions(), self.params.get("partition"))
        members, refused = [], {}
        for i, overrides in enumerate(job_overrides):
            try:
                dcfg = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
                with open_dict(dcfg):
                    del dcfg["hydra"]  # as run_job gives the task its config
                cfg = member_config(dcfg, list(overrides), "slurm")
                trainer = OmegaConf.to_container(dcfg.trainer, resolve=True)
            except Exception as e:  # noqa: BLE001 - a bad config fails alone
                reason = first_line(e)
                print(f"error: #{first + i} {' '.join(overrides)}: {reason}", file=sys.stderr)
                refused[first + i] = _returned(list(overrides), " ".join(overrides), "failed", reason)
                continue
            request = slurm.resolve(self.params, trainer, part)
            slurm.check(request, part)
            members.append(
                _Member(list(overrides), first + i, identity.run_id(cfg), identity.run_dir(cfg), request)
            )
        return members, refused

    def _submit(self, submitit: Any, members: list[_Member]) -> list[tuple[_Member, Any]]:
        """One job array per distinct request; returns (member, job) in the sweep's order."""
        if not members:
            return []
        groups: dict[Any, list[_Member]] = defaultdict(list)
        for m in members:
            groups[m.request].append(m)
        from ablate.cluster.slurm_member import SweepMember

        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        member = SweepMember(self.hydra_context, self.task_function, self.config)
        jobs = {}
        for request, group in groups.items():
            executor = submitit.AutoExecutor(folder=self.params["submitit_folder"], cluster="slurm")
            executor.update_parameters(**self._sbatch(request))
            args = [(m.overrides, "hydra.sweep.dir", m.idx, Singleton.get_state()) for m in group]
            for m, job in zip(group, executor.map_array(member, *zip(*args))):
                jobs[m.idx] = (m, job)
                print(f"[ablate] #{m.idx} {m.run_id}: SLURM job {job.job_id} ({_describe(request)})")
        return [jobs[m.idx] for m in members]

    def _sbatch(self, req: Any) -> dict[str, Any]:
        from ablate.cluster.slurm_job import DELAY_ENV

        p = self.params
        extra = {"requeue": True, **(p.get("additional_parameters") or {})}
        optional = {k: p.get(k) for k in ("account", "qos", "constraint", "exclude") if p.get(k)}
        return {
            "name": p["name"],
            "timeout_min": req.timeout_min,
            "nodes": req.nodes,
            "tasks_per_node": req.tasks_per_node,
            "cpus_per_task": req.cpus_per_task,
            **({"gpus_per_node": req.gpus_per_node} if req.gpus_per_node else {}),
            **({"mem_gb": req.mem_gb} if req.mem_gb else {}),
            "slurm_partition": req.partition,
            "slurm_signal_delay_s": p["signal_delay_s"],
            "slurm_array_parallelism": p["array_parallelism"],
            "slurm_setup": [*(p.get("setup") or []), f"export {DELAY_ENV}={p['signal_delay_s']}"],
            "slurm_additional_parameters": extra,
            **{f"slurm_{k}": v for k, v in optional.items()},
        }

    def _wait(self, member: _Member, job: Any) -> JobReturn:
        """The job's own return, or, for a job that ended without one, its SLURM state as the outcome
        (written into the run's record as well)."""
        try:
            return job.results()[0]
        except Exception as e:  # noqa: BLE001 - submitit's UncompletedJobError / FailedJobError
            from ablate.records import status

            state = str(job.state)
            name = _transition_of(state)
            reason = f"SLURM job {job.job_id} ended {state} without finishing; resubmit the sweep to resume"
            if "FailedJobError" in type(e).__name__:
                reason = f"SLURM job {job.job_id} raised: {str(e).strip().splitlines()[-1][:300]}"
            # unless the run said how it ended (finished after all, or stopped at a checkpoint)
            status.settle(member.folder / "record.json", name, reason)
            said = status.TRANSITIONS[name][1]
            print(f"[ablate] #{member.idx} {member.run_id}: {said}: {reason}", file=sys.stderr)
            return _returned(member.overrides, member.run_id, said, reason)


def _returned(overrides: list[str], run_id: str, status: str, reason: str) -> JobReturn:
    """A JobReturn for a member that gave none of its own: its outcome, for the sweep's closing line."""
    from ablate.jobs.sweep import outcome

    ret = JobReturn(overrides=overrides, status=JobStatus.COMPLETED)
    ret.return_value = outcome(run_id, status, reason)
    return ret


def _import_submitit() -> Any:
    from ablate.cluster.slurm_request import SlurmError

    try:
        import submitit
    except ImportError:
        raise SlurmError("hydra/launcher=slurm needs submitit: pip install -e '.[slurm]'") from None
    return submitit


def _describe(req: Any) -> str:
    gpus = f", {req.gpus_per_node} GPUs" if req.gpus_per_node else ""
    return (
        f"partition {req.partition}, {req.nodes} node(s) x {req.tasks_per_node} task(s) x "
        f"{req.cpus_per_task} CPUs{gpus}, {req.timeout_min} min"
    )


def _transition_of(state: str) -> str:
    """The transition of a record whose job ended in SLURM state `state` without its run's word."""
    if state.startswith("CANCELLED"):
        return "cancel"
    if state.startswith(("TIMEOUT", "PREEMPTED")):
        return "time_out" if state.startswith("TIMEOUT") else "preempt"
    return "fail"
