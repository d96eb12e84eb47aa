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

`-m model=B` (one group, no comma) is not a sweep to Hydra, which composes the sweep's own config with it
before any sweeper runs; so a config source (`ablaterows://`, added after the app's conf/ by a search path
plugin, listing nothing) answers `model/<group>` for each group that is not a row with a stand-in whose
`name` fails to resolve: a single run `model=B` without -m stops with "model=B is a group ..." instead.

This module is imported by Hydra's plugin scan on every start: keep it free of torch and of `ablate`, and
without `from __future__ import annotations` (the scan executes it before it is in sys.modules, and
@dataclass then fails on string annotations, which would stop every run).
"""

import itertools
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.config_search_path import ConfigSearchPath
from hydra.core.config_store import ConfigStore
from hydra.core.object_type import ObjectType
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, ValueType
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn
from hydra.errors import ConfigCompositionException, HydraException
from hydra.plugins.config_source import ConfigLoadError, ConfigResult, ConfigSource
from hydra.plugins.launcher import Launcher
from hydra.plugins.search_path_plugin import SearchPathPlugin
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict

from ablate.config.rows import TABLE3_ROWS, group_order, ordered, resolve_row, row_order

MODEL_GROUP = "model"

PAPER_ROWS = TABLE3_ROWS  # Table 3 top to bottom; a user's rows come after these


class UnknownRowError(ConfigCompositionException):
    """A `model=` value that is neither a row nor a group; printed by Hydra as one line."""


def rows_and_groups(load: Callable[[str], DictConfig | None], names: Iterable[str]) -> dict[str, str]:
    """{row: group} for the row files `names`, in table order. A row without `group:` takes the group of the
    row it builds on (rows.resolve_row: its defaults list, as in composition), else "base"."""

    def raw(name: str) -> dict | None:
        try:
            cfg = load(name)
        except Exception:  # noqa: BLE001 - a row file that does not load fails its own jobs, not the listing
            return None
        return OmegaConf.to_container(cfg) if isinstance(cfg, DictConfig) else None

    return {n: str(resolve_row(n, raw).get("group", "base")) for n in ordered(names)}


def rows_in_dir(conf_dir: str | Path) -> dict[str, str]:
    """{row: group} for <conf_dir>/model/*.yaml (no Hydra needed)."""
    d = Path(conf_dir) / MODEL_GROUP

    def load(name: str) -> DictConfig | None:
        cfg = OmegaConf.load(d / f"{name}.yaml")
        return cfg if isinstance(cfg, DictConfig) else None

    return rows_and_groups(load, (p.stem for p in d.glob("*.yaml")))


def rows_from_sources(sources: Sequence[Any]) -> dict[str, str]:
    """{row: group} from Hydra's config sources (the search path: conf/, pkg://, the ConfigStore), the first
    source that has a row wins, as in Hydra's repository."""
    names: set[str] = set()
    for src in sources:
        if src.is_group(MODEL_GROUP):
            names.update(src.list(config_path=MODEL_GROUP, results_filter=ObjectType.CONFIG))

    def load(name: str) -> DictConfig | None:
        path = f"{MODEL_GROUP}/{name}"
        for src in sources:
            if src.is_config(path):
                cfg = src.load_config(config_path=path).config
                return cfg if isinstance(cfg, DictConfig) else None
        return None

    return rows_and_groups(load, names)


def groups_of(rows: Mapping[str, str]) -> dict[str, list[str]]:
    """{group: [rows in table order]}, groups in table order."""
    out: dict[str, list[str]] = {}
    for g in sorted(set(rows.values()), key=group_order):
        out[g] = sorted((r for r, rg in rows.items() if rg == g), key=row_order)
    return out


def expand_models(values: Sequence[str], rows: Mapping[str, str]) -> list[str]:
    """The rows that `model=<values>` means: a row name stays itself, a group name becomes its rows (table
    order); the order of `values` is kept and a row given twice appears once. Raises UnknownRowError naming
    the value, the valid rows and the groups."""
    groups = groups_of(rows)
    out: list[str] = []
    for v in values:
        if v in rows:
            names = [v]
        elif v in groups:
            names = groups[v]
        else:
            only_groups = [g for g in groups if g not in rows]
            raise UnknownRowError(
                f"{MODEL_GROUP}={v}: no row or group named '{v}' in conf/{MODEL_GROUP}/. "
                f"Rows: {', '.join(rows)}. Groups: {', '.join(only_groups) or '(none)'}"
                " (a group is the `group:` key of a row file)."
            )
        out.extend(n for n in names if n not in out)
    return out


def expand_override_lines(
    lines: Sequence[str], parser: OverridesParser, rows: Callable[[], Mapping[str, str]]
) -> list[str]:
    """Rewrite each `model=...` line (a value or a comma/choice() sweep) into explicit rows; other lines,
    glob()/range() sweeps and `~model` are returned as given. `rows()` is called only when needed."""
    out: list[str] = []
    for line in lines:
        ov: Override = parser.parse_override(line)
        values = _model_values(ov)
        if values is None:
            out.append(line)
            continue
        expanded = expand_models(values, rows())
        shuffle = ov.is_choice_sweep() and getattr(ov.value(), "shuffle", False)
        value = ",".join(expanded)
        if shuffle:
            value = f"shuffle({value})"
        out.append(f"{ov.get_key_element()}={value}")
    return out


def _model_values(ov: Override) -> list[str] | None:
    if ov.key_or_group != MODEL_GROUP or ov.is_delete() or ov.value_type is None:
        return None
    if ov.value_type == ValueType.ELEMENT:
        v = ov.value()
        return [v] if isinstance(v, str) else None
    if ov.value_type in (ValueType.SIMPLE_CHOICE_SWEEP, ValueType.CHOICE_SWEEP):
        return list(ov.sweep_string_iterator())
    return None  # glob(), range(), interval(): Hydra's meaning


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
                dcfg = loader.load_sweep_config(master_config=self.config, sweep_overrides=list(overrides))
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
        return {**outcome(rec["run_id"], "finished", "already finished"), "skipped": True}

    def rows(self) -> dict[str, str]:
        if self._rows is None:
            assert self.hydra_context is not None
            rows = rows_from_sources(self.hydra_context.config_loader.get_sources())
            for folder in _searchpath_folders(self.config):  # a researcher's own rows (hydra.searchpath)
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
            words = [o["status"] for o in outcomes] + [plan.REFUSED] * len(self._rejected)
            estimates = [o.get("estimate_s") for o in outcomes] + [None] * len(self._rejected)
            launcher = self.launcher
            line, none_refused = plan.summary(words, estimates, launcher.parallel, launcher.parallel_from)
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

GROUP_SCHEME = "ablaterows"


def _group_is_not_a_row(group: str, rows: str) -> str:
    raise ValueError(
        f"{MODEL_GROUP}={group} is a Table 3 group ({rows}), not a row: run its rows with "
        f"`-m {MODEL_GROUP}={group}`, or name one row"
    )


def _searchpath_folders(config: DictConfig) -> list[str]:
    """The folders of `hydra.searchpath` (file:// or plain paths) that hold a model/ folder: the config
    loader's own sources do not include them."""
    entries = OmegaConf.select(config, "hydra.searchpath", default=None) if config is not None else None
    entries = entries or []
    folders = (str(e).removeprefix("file://") for e in entries if not str(e).startswith("pkg://"))
    return [f for f in folders if os.path.isdir(os.path.join(f, MODEL_GROUP))]


OmegaConf.register_new_resolver("ablate_group", _group_is_not_a_row, replace=True)


class RowGroupSource(ConfigSource):
    """`<scheme>://<conf dir>`: model/<group> for every group of <conf dir>/model/*.yaml that is not itself a
    row. Lists nothing, so glob(), --help and the sweeper's row list see only the row files."""

    def __init__(self, provider: str, path: str) -> None:
        super().__init__(provider=provider, path=path)
        self._groups: dict[str, list[str]] | None = None

    @staticmethod
    def scheme() -> str:
        return GROUP_SCHEME

    def groups(self) -> dict[str, list[str]]:
        if self._groups is None:
            try:
                rows = rows_in_dir(self.path)
            except Exception:  # noqa: BLE001 - a broken row file is reported when it is composed
                rows = {}
            self._groups = {g: r for g, r in groups_of(rows).items() if g not in rows}
        return self._groups

    def _group_name(self, config_path: str) -> str | None:
        group, _, name = config_path.removesuffix(".yaml").rpartition("/")
        return name if group == MODEL_GROUP and name in self.groups() else None

    def available(self) -> bool:
        return os.path.isdir(os.path.join(self.path, MODEL_GROUP))

    def is_group(self, config_path: str) -> bool:
        return False

    def is_config(self, config_path: str) -> bool:
        return self._group_name(config_path) is not None

    def list(self, config_path: str, results_filter: ObjectType | None) -> list[str]:
        return []

    def load_config(self, config_path: str) -> ConfigResult:
        name = self._group_name(config_path)
        if name is None:
            raise ConfigLoadError(f"{GROUP_SCHEME}: no group {config_path}")
        rows = " ".join(self.groups()[name])
        cfg = OmegaConf.create({"name": f"${{ablate_group:'{name}','{rows}'}}", "group": name})
        return ConfigResult(
            config=cfg,
            path=self.full_path(),
            provider=self.provider,
            header={"package": None},  # what Hydra's sources give a config without a `# @package` line
        )


class RowGroupSearchPath(SearchPathPlugin):
    """Adds `ablaterows://<dir>` after the app's own config dir (a file path with a model/ folder)."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        for el in list(search_path.get_path()):
            if el.provider != "main" or not el.path:
                continue
            path = el.path.removeprefix("file://")
            if "://" not in path and os.path.isdir(os.path.join(path, MODEL_GROUP)):
                search_path.append("ablate-groups", f"{GROUP_SCHEME}://{path}")
