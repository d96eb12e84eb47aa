"""`hydra/launcher=plan`: each job of a command gets its plan line (ablate.jobs.plan) instead of a process:
what it would train and in what state its run is. Nothing is started or written: no job folder, no Hydra
output, no record. `python -m ablate.run ... --plan` is this launcher on the same overrides, as a multirun.

    python -m ablate.run -m model=A,B,C seed=1,2,3 hydra/launcher=plan

The sweeper (hydra_plugins/ablate_sweeper) prints the plan's closing line and exits 2 where a job is
refused. Kept free of torch at import: Hydra's plugin scan imports this module on every start.
"""

import copy
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, OverrideType
from hydra.core.utils import JobReturn, JobStatus
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException


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
        self._composer: Composer | None = None
        self._composed: dict[tuple[str, ...], tuple[Any, DictConfig]] = {}  # the sweeper's, for launch
        self._holder: DictConfig | None = None  # whose Hydra node HydraConfig holds

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.hydra_context, self.config = hydra_context, config  # the task function is what it replaces
        self._composer = Composer(hydra_context.config_loader, config)

    def compose(self, overrides: Sequence[str]) -> tuple[Any, DictConfig]:
        """The job's config as Hydra composes it for a launcher (Composer); the sweeper's check that a job
        composes and the job's plan line share the one composition."""
        key = tuple(overrides)
        if key not in self._composed:
            assert self._composer is not None
            self._composed[key] = self._composer(list(overrides))
        return self._composed[key]

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        """Each job composed as Hydra composes it for a launcher, then its plan line printed."""
        from ablate.jobs import plan

        returns = []
        for overrides in job_overrides:
            dcfg, hydra_holder = self.compose(overrides)
            self._composed.pop(tuple(overrides), None)
            if hydra_holder is not self._holder:  # the job's group choices (its row file), as in run_job
                HydraConfig.instance().set_config(hydra_holder)
                self._holder = hydra_holder
            text, outcome = plan.job(dcfg, list(overrides), "plan")
            print(text, flush=True)
            ret = JobReturn(overrides=list(overrides), status=JobStatus.COMPLETED)
            ret.return_value = outcome  # JobReturn's public setter
            returns.append(ret)
        return returns


class Composer:
    """Each job's config as Hydra's `load_sweep_config` gives it, with one composition for all the jobs
    that choose the same config groups. Hydra composes a job from its defaults list (its group choices)
    and then sets the plain `key=value` overrides on the result (ConfigLoaderImpl's order); the jobs of a
    sweep mostly differ in such values (seed=1,2,3; model.dropout=0.1,0.3), so the rest of a job's
    overrides compose once and each job sets its values on a copy, as Hydra would. A job whose value does
    not set (a missing key, a wrong type) is composed by Hydra itself, which says why in its words. The
    Hydra node (its group choices, the launcher's settings) is that of the jobs' shared composition: its
    `overrides.task` lacks a job's values, which the plan takes from the job's overrides."""

    def __init__(self, loader, master: DictConfig) -> None:
        self.loader, self.master = loader, master
        self.parser = OverridesParser.create(config_loader=loader)
        self.groups = set(loader.list_groups(""))
        self._bases: dict[tuple[str, ...], tuple[DictConfig, DictConfig]] = {}  # (less Hydra's node, whole)
        self._work: dict[tuple[tuple[str, ...], tuple[str, ...]], DictConfig] = {}

    def __call__(self, overrides: list[str]) -> tuple[Any, DictConfig]:
        """(the job's config less Hydra's node: the RunConfig it holds, or where that cannot be made the
        DictConfig, whose conversion then says why; a config whose Hydra node holds the job's group
        choices: that of the jobs that share them)."""
        parsed = self.parser.parse_overrides(overrides)
        plain = [self._plain(p) for p in parsed]
        values = [p for p, v in zip(parsed, plain, strict=True) if v]
        rest = tuple(o for o, v in zip(overrides, plain, strict=True) if not v)
        if rest not in self._bases:
            self._bases[rest] = self._hydra(list(rest))
        app, full = self._bases[rest]
        if any(p.key_or_group in full.hydra.runtime.choices for p in values):
            return self._hydra(overrides)  # a group the defaults list holds under another name
        # The jobs that set the same keys share one working copy: each sets every one of those keys, so
        # none sees another's values (a mapping merges into what is there: those take a copy of their own).
        work_key = (rest, tuple(p.key_or_group for p in values))
        if work_key not in self._work:
            self._work[work_key] = copy.deepcopy(app)
        cfg = (
            self._work[work_key]
            if not any(isinstance(p.value(), dict) for p in values)
            else copy.deepcopy(app)
        )
        try:
            for p in values:
                OmegaConf.update(cfg, p.key_or_group, p.value(), merge=True)
        except OmegaConfBaseException:
            return self._hydra(overrides)
        try:
            return OmegaConf.to_object(cfg), full  # now, before the next job sets its values
        except OmegaConfBaseException:
            return copy.deepcopy(cfg), full

    def _hydra(self, overrides: list[str]) -> tuple[DictConfig, DictConfig]:
        """Hydra's own composition of the job (and its error where it has one)."""
        full = self.loader.load_sweep_config(self.master, overrides)
        app = copy.deepcopy(full)
        with open_dict(app):
            del app["hydra"]
        return app, full

    def _plain(self, p: Override) -> bool:
        """`key=value` on a key of the config: no group, no package, no +/++/~, not Hydra's own."""
        return (
            p.type == OverrideType.CHANGE
            and p.package is None
            and not p.is_hydra_override()
            and not p.is_sweep_override()
            and "/" not in p.key_or_group
            and p.key_or_group not in self.groups
        )


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
    from ablate.config.study import package_conf

    path = package_conf() / "hydra" / "launcher" / f"{launcher}.yaml"
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
