"""`hydra/launcher=plan`: each job of a command gets its plan line (ablate.jobs.plan) instead of a process:
what it would train and in what state its run is. Nothing is started or written: no job folder, no Hydra
output, no record. `python -m ablate.run ... --plan` is this launcher on the same overrides, as a multirun.

    python -m ablate.run -m model=A,B,C seed=1,2,3 hydra/launcher=plan

The sweeper (hydra_plugins/ablate_sweeper) prints the plan's closing line and exits 2 where a job is
refused. Kept free of torch at import: Hydra's plugin scan imports this module on every start.
"""

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobReturn, JobStatus
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, open_dict


@dataclass
class PlanLauncherConf:
    _target_: str = "hydra_plugins.ablate_plan.plan_launcher.PlanLauncher"
    # `--plan` of a command without -m: the plan of that one run (a group in `model=` is refused, as the
    # run refuses it; a sweep's values are an error, as Hydra's outside a multirun)
    single_run: bool = False
    # the launcher the command named, in its place: how many jobs it runs at once, and what says so
    # (ablate.jobs.plan.parallelism), for the plan's total time
    parallel: int = 1
    parallel_from: str = ""


ConfigStore.instance().store(group="hydra/launcher", name="plan", node=PlanLauncherConf, provider="ablate")


class PlanLauncher(Launcher):
    def __init__(self, single_run: bool = False, parallel: int = 1, parallel_from: str = "") -> None:
        self.single_run, self.parallel, self.parallel_from = single_run, parallel, parallel_from
        self.hydra_context: HydraContext | None = None
        self.config: DictConfig | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.hydra_context, self.config = hydra_context, config  # the task function is what it replaces

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        """Each job composed as Hydra composes it for a launcher, then its plan line printed."""
        from ablate.jobs import plan

        assert self.hydra_context is not None and self.config is not None
        returns = []
        for overrides in job_overrides:
            dcfg = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
            HydraConfig.instance().set_config(dcfg)  # the job's choices (its row file), as in Hydra's run_job
            with open_dict(dcfg):
                del dcfg["hydra"]
            text, outcome = plan.job(dcfg, list(overrides), "plan")
            print(text, flush=True)
            ret = JobReturn(overrides=list(overrides), status=JobStatus.COMPLETED)
            ret.return_value = outcome  # JobReturn's public setter
            returns.append(ret)
        return returns


def parallelism(argv: list[str]) -> tuple[int, str]:
    """How many jobs the launcher a command names runs at once, and what says so: Hydra's basic launcher
    one; joblib and gpus their n_jobs (the config file's, or the command's); SLURM its array parallelism."""
    from omegaconf import OmegaConf

    launcher, given = "basic", {}
    for a in argv:
        key, _, value = a.lstrip("+~").partition("=")
        if key == "hydra/launcher":
            launcher = value
        elif key.startswith("hydra.launcher."):
            given[key.removeprefix("hydra.launcher.")] = value
    if launcher == "basic":
        return 1, "the basic launcher"
    key = "array_parallelism" if launcher == "slurm" else "n_jobs"
    path = Path(__file__).resolve().parents[2] / "conf" / "hydra" / "launcher" / f"{launcher}.yaml"
    default = OmegaConf.load(path).get(key) if path.is_file() else None
    if default is None and launcher == "slurm":
        from hydra_plugins.ablate_slurm.slurm_launcher import SlurmLauncherConf

        default = SlurmLauncherConf.array_parallelism
    value = given.get(key, default)
    try:
        n = int(value)
    except (TypeError, ValueError):
        return 1, f"{launcher}: {key} unknown, one at a time"
    if n < 1:  # joblib's -1: every core
        n = os.cpu_count() or 1
    return n, f"hydra/launcher={launcher} {key}={value}"
