"""`hydra/launcher=gpus`: Hydra's joblib launcher running a sweep's jobs side by side on one machine, each on
GPUs of its own (ablate/cluster/gpu_pool.py), plus one key: `jobs_per_device`, how many jobs share one GPU (a
Table 3 row at reduced width uses a small part of an H100). The job reads the key from its Hydra config
(ablate.jobs.sweep.launcher_setting); the launcher itself only keeps it away from joblib.Parallel."""

from dataclasses import dataclass
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra_plugins.hydra_joblib_launcher.config import JobLibLauncherConf
from hydra_plugins.hydra_joblib_launcher.joblib_launcher import JoblibLauncher


@dataclass
class GpusLauncherConf(JobLibLauncherConf):
    _target_: str = "hydra_plugins.ablate_gpus.gpus_launcher.GpusLauncher"
    jobs_per_device: int = 1  # jobs that share one GPU, each allowed 1/k of its memory


ConfigStore.instance().store(
    group="hydra/launcher", name="ablate_gpus", node=GpusLauncherConf, provider="ablate"
)


class GpusLauncher(JoblibLauncher):
    def __init__(self, jobs_per_device: int = 1, **kwargs: Any) -> None:
        if jobs_per_device < 1:
            raise ValueError(f"hydra.launcher.jobs_per_device={jobs_per_device}: must be at least 1")
        super().__init__(**kwargs)
        self.jobs_per_device = jobs_per_device
