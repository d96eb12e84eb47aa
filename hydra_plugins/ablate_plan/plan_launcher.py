"""`hydra/launcher=plan`: each job of a command gets its plan line (ablate.jobs.plan) instead of a process:
what it would train and in what state its run is. Nothing is started or written: no job folder, no Hydra
output, no record. `python -m ablate.run ... --plan` is this launcher on the same overrides, as a multirun.

    python -m ablate.run -m model=A,B,C seed=1,2,3 hydra/launcher=plan

The sweeper (hydra_plugins/ablate_sweeper) prints the plan's closing line and exits 2 where a job is
refused. Kept free of torch at import: Hydra's plugin scan imports this module on every start.
"""

from collections.abc import Sequence
from dataclasses import dataclass

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


ConfigStore.instance().store(group="hydra/launcher", name="plan", node=PlanLauncherConf, provider="ablate")


class PlanLauncher(Launcher):
    def __init__(self, single_run: bool = False) -> None:
        self.single_run = single_run
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
