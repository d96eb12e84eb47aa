"""One sweep member as a submitit job: what runs on the node when its SLURM job starts.

`SweepMember` is a submitit `Checkpointable`: submitit's own `checkpoint` resubmits the same member with the
same arguments, so that a warning signal that comes after submitit has set its handler and before
ablate.cluster.slurm_job's is in place still requeues the member, which resumes its run from its
checkpoint. From the first line of `__call__` on, the job's signals are slurm_job's (`Job.install`).

Imported by hydra/launcher=slurm only when it submits, and on the node by submitit's unpickling: submitit is
an optional dependency (`pip install -e '.[slurm]'`).
"""

from __future__ import annotations

import os
import signal

# First of all, as submitit unpickles the member (before the imports below, and before submitit sets its
# own handler): a warning that comes now is kept for Job.install, not SIGUSR2's default action, which would
# end the job (FAILED). SLURM may send it up to a minute early, so under a short time limit it can come while
# the job still loads.
EARLY_WARNINGS: list[int] = []
if os.environ.get("SLURM_JOB_ID"):
    signal.signal(signal.SIGUSR2, lambda signum, _frame: EARLY_WARNINGS.append(signum))

from typing import Any  # noqa: E402

import submitit  # noqa: E402
from hydra.core.singleton import Singleton  # noqa: E402
from hydra.core.utils import JobReturn, run_job, setup_globals  # noqa: E402
from omegaconf import DictConfig, open_dict  # noqa: E402

from ablate.cluster import slurm_job  # noqa: E402


class SweepMember(submitit.helpers.Checkpointable):
    """Hydra's job for one member of a sweep, run inside its SLURM job as Hydra's launchers run a job."""

    def __init__(self, hydra_context: Any, task_function: Any, config: DictConfig) -> None:
        self.hydra_context, self.task_function, self.config = hydra_context, task_function, config

    def __call__(self, overrides: list[str], job_dir_key: str, job_num: int, singleton: dict) -> JobReturn:
        slurm_job.job().install(EARLY_WARNINGS)  # first: the warning may come at any time
        Singleton.set_state(singleton)
        setup_globals()
        sweep_config = self.hydra_context.config_loader.load_sweep_config(self.config, overrides)
        with open_dict(sweep_config.hydra.job) as job:
            job.id = submitit.JobEnvironment().job_id
            job.num = job_num
        return run_job(
            hydra_context=self.hydra_context,
            task_function=self.task_function,
            config=sweep_config,
            job_dir_key=job_dir_key,
            job_subdir_key="hydra.sweep.subdir",
        )
