"""`hydra/sweeper: ablate`: the sweep Hydra's basic sweeper makes, plus Table 3 groups in `model=`.

    python -m ablate.run -m model=A,B,C          # A1..A4, B1, B2, C1..C7: 13 jobs, in the paper's order
    python -m ablate.run -m model=A,base seed=1,2,3   # (A1..A4, base) x 3 seeds
    python -m ablate.run -m model=glob(*)        # untouched: Hydra's glob over conf/model/

A row is a file conf/model/<row>.yaml; its group is its `group:` key (inherited through its defaults list
when absent, as the composed config would have it). A value of `model=` that names a row file stays that
row (so `E`, `big` and `base` are rows); any other value that names a group becomes that group's rows,
paper rows in the paper's order, then a user's rows by name. Values keep the order given; a row named twice
runs once. glob() and range() values are left to Hydra's override parser. max_batch_size,
hydra.sweeper.params and the cartesian product over the keys mean what they mean to Hydra's basic sweeper.

The package's modules, one job each: this one the sweeper (the jobs, those finished skipped before the
launcher, the plan's closing line, the sweep's own); `rows` the rows and groups of the config sources and
the job lines they give; `row_groups` the config source that refuses a group given as one run.

Hydra's plugin scan imports these modules on every start: keep them free of torch (ablate.config.rows
imports none), and without `from __future__ import annotations` (the scan executes a module before it is
in sys.modules, and @dataclass then fails on string annotations, which would stop every run).
"""

import itertools
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn
from hydra.errors import HydraException
from hydra.plugins.launcher import Launcher
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict

from hydra_plugins.ablate_sweeper.rows import (
    MODEL_GROUP,
    expand_override_lines,
    rows_from_sources,
    rows_in_dir,
    searchpath_folders,
)


@dataclass
class AblateSweeperConf:
    _target_: str = "hydra_plugins.ablate_sweeper.ablate_sweeper.AblateSweeper"
    max_batch_size: int | None = None
    params: dict[str, str] | None = None


ConfigStore.instance().store(group="hydra/sweeper", name="ablate", node=AblateSweeperConf, provider="ablate")


class AblateSweeper(Sweeper):
    """The cartesian product of the overrides' values, as Hydra's basic sweeper makes it (keys in the order
    given, hydra.sweeper.params first, a key given again keeping its first place), with Table 3 groups in
    `model=`, jobs that do not compose refused alone, finished members skipped and a closing line. Written
    on Hydra's public `Sweeper` interface: the basic sweeper itself is internal to Hydra (hydra._internal),
    and its part here is the product and the batches."""

    def __init__(self, max_batch_size: int | None = None, params: dict[str, str] | None = None) -> None:
        super().__init__()
        self.max_batch_size = max_batch_size
        self.params = dict(params or {})
        self.hydra_context: HydraContext | None = None
        self.config: DictConfig | None = None
        self.launcher: Launcher | None = None
        self.planning = False  # under hydra/launcher=plan (--plan): jobs are listed, not run; nothing written
        self.one_run = False  # the plan of a command without -m (the launcher's single_run)
        self._rows: dict[str, str] | None = None
        self._rejected: list[dict[str, Any]] = []  # jobs whose config does not compose: outcomes
        self._skipped: list[dict[str, Any]] = []  # jobs whose run is finished already: outcomes

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.hydra_context, self.config = hydra_context, config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )
        from hydra_plugins.ablate_plan.plan_launcher import PlanLauncher

        self.planning = isinstance(self.launcher, PlanLauncher)
        self.one_run = self.planning and self.launcher.single_run

    def jobs(self, arguments: Sequence[str]) -> list[list[str]]:
        """Each job's overrides: one value of every key, in the order of the keys, groups in `model=` as
        their rows. The plan of one run leaves hydra.sweeper.params out, as Hydra does outside a multirun,
        and a group as it is (the run refuses it)."""
        assert self.hydra_context is not None
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        lines = list(arguments)
        if not self.one_run:
            params = [f"{k}={v}" for k, v in self.params.items()]
            lines = expand_override_lines([*params, *lines], parser, self.rows)
        values: dict[str, list[str]] = {}
        for ov in parser.parse_overrides(lines):
            key = ov.get_key_element()
            if not ov.is_sweep_override():
                values[key] = [f"{key}={ov.get_value_element_as_str()}"]
            elif ov.is_discrete_sweep():
                values[key] = [f"{key}={v}" for v in ov.sweep_string_iterator()]
            else:
                raise HydraException(f"{key}: an interval() takes a sweeper that samples it (Optuna's, Ax's)")
        return [list(job) for job in itertools.product(*values.values())]

    def batches(self, jobs: list[list[str]]) -> list[list[list[str]]]:
        """Groups of at most hydra.sweeper.max_batch_size jobs (all in one where it is unset), each launched
        when the one before it has ended."""
        size = self.max_batch_size if self.max_batch_size and self.max_batch_size > 0 else max(len(jobs), 1)
        return [jobs[i : i + size] for i in range(0, len(jobs), size)]

    def runnable(self, batch: Sequence[Sequence[str]]) -> list[Sequence[str]]:
        """The batch less the jobs whose config does not compose (a row file with a YAML error or a misspelt
        key): each is refused in one line and counted in the sweep's closing line, while the others run
        (Hydra would stop the whole sweep at the first); less the finished members too."""
        from ablate.jobs import plan

        assert self.hydra_context is not None and self.config is not None
        loader = self.hydra_context.config_loader
        kept = []
        for overrides in batch:
            try:
                if self.planning:  # the plan launcher composes each job once, for this check and its line
                    dcfg = self.launcher.compose(overrides)
                else:
                    dcfg = loader.load_sweep_config(
                        master_config=self.config, sweep_overrides=list(overrides)
                    )
            except Exception as e:  # noqa: BLE001 - any composition error is this job's alone
                reason = _composition_problem(list(overrides), e, loader.get_sources())
                label = plan.label(overrides)
                if self.planning:
                    print(f"[plan] {label}  refused: {reason}", flush=True)
                else:
                    print(f"error: {label}: {reason}", file=sys.stderr, flush=True)
                self._rejected.append({"run_id": label, "status": "failed", "reason": reason})
                continue
            if done := self._finished(dcfg, list(overrides)):
                self._skipped.append(done)
                continue
            kept.append(overrides)
        return kept

    def _finished(self, dcfg: DictConfig, overrides: list[str]) -> dict[str, Any] | None:
        """The outcome of a member whose run is finished already (the same command would skip it): no job,
        no process is started for it. None for every other member, and under the plan (it lists them)."""
        if self.planning:
            return None
        from ablate.jobs.sweep import member_config, outcome
        from ablate.records import identity, store

        launcher = self.config.hydra.runtime.choices.get("hydra/launcher")
        with open_dict(dcfg):
            del dcfg["hydra"]
        try:
            cfg = member_config(dcfg, overrides, launcher)
            path = identity.run_dir(cfg) / store.RECORD_NAME
            rec = store.read_record(path) if cfg.resume and path.is_file() else None
        except Exception:  # noqa: BLE001 - the job itself refuses such a member, with its record and reason
            return None
        if rec is None or rec["status"] != "finished":
            return None
        from ablate.jobs.train import stale_line

        if line := stale_line(rec):  # a current one needs no word: the closing line counts it
            print(line, flush=True)
        return {**outcome(rec["run_id"], "finished", "already finished"), "skipped": True}

    def rows(self) -> dict[str, str]:
        if self._rows is None:
            assert self.hydra_context is not None
            rows = rows_from_sources(self.hydra_context.config_loader.get_sources())
            for folder in searchpath_folders(self.config):  # a researcher's own rows (hydra.searchpath)
                for row, group in rows_in_dir(folder).items():
                    rows.setdefault(row, group)
            self._rows = rows
        return self._rows

    def sweep(self, arguments: list[str]) -> Any:
        """Run the sweep, then say how each member ended, in one line; exit 1 unless all finished."""
        from ablate.jobs import plan
        from ablate.jobs.sweep import summary

        assert self.config is not None and self.launcher is not None
        jobs = self.jobs(arguments)
        if self.one_run and len(jobs) > 1:  # `--plan` without -m
            print(
                f"error: {len(jobs)} runs in the command of one run: a sweep takes -m (--multirun)",
                file=sys.stderr,
            )
            sys.exit(2)
        if not self.planning:  # the sweep's config, as Hydra's sweepers leave it in the sweep's folder
            sweep_dir = Path(self.config.hydra.sweep.dir)
            sweep_dir.mkdir(parents=True, exist_ok=True)
            OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        returns: list[Sequence[JobReturn]] = []
        for batch in self.batches(jobs):
            if kept := self.runnable(batch):
                results = self.launcher.launch(kept, initial_job_idx=sum(map(len, returns)))
                for r in results:
                    _ = r.return_value  # raises where a job raised, as Hydra's sweepers do
                returns.append(results)
        if self.planning:  # each job printed its plan line; the counts, exit 2 where one is refused
            outcomes = [r.return_value for batch in returns for r in batch]
            launcher = self.launcher
            line, none_refused = plan.summary(
                outcomes, len(self._rejected), launcher.parallel, launcher.parallel_from
            )
            print(f"[plan] {line}", flush=True)
            if not none_refused:
                sys.exit(2)
            return returns
        ran = [r.return_value for batch in returns for r in batch]
        line, all_finished = summary([*self._skipped, *ran, *self._rejected])
        print(f"[ablate] {line}", file=sys.stderr if not all_finished else sys.stdout, flush=True)
        if not all_finished:
            sys.exit(1)
        return returns


def _composition_problem(overrides: list[str], error: Exception, sources: Sequence[Any]) -> str:
    """Why a job's config does not compose, in one line: the row file's own problem where the job names a
    row file that has one (ablate.config.rows.row_file_problem), else the first line of Hydra's message."""
    from ablate.config.rows import row_file_problem

    rows = [o.split("=", 1)[1] for o in overrides if o.split("=", 1)[0] == MODEL_GROUP]
    for row in rows[-1:]:
        for src in sources:
            path = os.path.join(src.path, MODEL_GROUP, f"{row}.yaml")
            if src.scheme() == "file" and os.path.isfile(path):
                problem = row_file_problem(path)
                if problem:
                    return problem
                break
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


# ----------------------------------------------------------------------------------------------------------
# `model=<group>` in the sweep's own (primary) config: see the module docstring.
