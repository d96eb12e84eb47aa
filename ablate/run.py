"""`python -m ablate.run [overrides]` and `python -m ablate.run -m model=A1,A2,C3 ...`: a thin Hydra entry
over
train(cfg) -> result record."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from ablate.cluster.cpu_load import busy_cores_note, wait_without_spinning
from ablate.config import DEFAULT_TASK, ConfigError, RunConfig, default_results, register_configs
from ablate.config.study import current_study, enter, package_conf
from ablate.errors import first_line, os_error_line, typed_line
from ablate.jobs import plan
from ablate.jobs.sweep import member_config, outcome
from ablate.records.status import CTRL_C
from ablate.records.trust import TASK, importable, not_ours
from ablate.tasks import task_of

register_configs()


def summary(rec: dict) -> str:
    m = rec.get("metrics", {})
    task = rec.get("task") or DEFAULT_TASK
    lines = [
        f"run        {rec['run_id']}  ({rec['status']})",
        f"dev PPL    {m.get('dev_ppl', float('nan')):.3f}  (per wordpiece, no label smoothing)",
        *(task_of(task).summary(m) if importable(TASK, task) else [f"task       {not_ours(task)}"]),
        f"params     {rec.get('params', 0):,}  (at paper scale: {rec.get('params_paper_scale', 0):,})",
        f"steps      {rec.get('steps', 0)}  tokens/s {rec.get('tokens_per_s', 0):,.0f}  "
        f"wall {rec.get('wall_time_s', 0):.0f}s  device {rec.get('device', '?')}",
        f"files      {rec.get('_dir', '')}",
    ]
    return "\n".join(lines)


def _check_threads(cfg: RunConfig) -> None:
    """Say so where this CPU run's threads and the machine's other running threads do not fit its cores
    (under SLURM the job's CPUs are its own: not checked)."""
    if cfg.trainer.accelerator not in ("cpu", "auto") or os.environ.get("SLURM_JOB_ID"):
        return
    import torch

    if cfg.trainer.accelerator == "auto" and torch.cuda.is_available():
        return
    threads = cfg.trainer.threads or torch.get_num_threads()
    if note := busy_cores_note(threads * cfg.trainer.devices):
        print(note, flush=True)


@hydra.main(version_base="1.3", config_path=str(package_conf()), config_name="config")
def main(dcfg: DictConfig) -> dict | None:
    """One run; in a sweep, returns its outcome (ablate.jobs.sweep) for the sweep's closing line."""
    from hydra.core.hydra_config import HydraConfig

    from ablate.jobs.train import record_rejection, settle_running, train
    from ablate.records import identity, tracking

    tracking.quiet_third_party()
    hc = HydraConfig.get()
    multirun = hc.mode.name == "MULTIRUN"
    launcher = hc.runtime.choices.get("hydra/launcher")
    cfg = None
    try:
        cfg = member_config(dcfg, list(hc.overrides.task), launcher)
        if problem := plan.row_problem(cfg):
            raise ConfigError(problem)
        _check_threads(cfg)
        rec = train(cfg)
    except SystemExit as e:  # Lightning answers Ctrl-C in fit with exit(1), raised while handling it
        if isinstance(e.__context__, KeyboardInterrupt):  # training recorded it as interrupted
            raise KeyboardInterrupt from None
        raise
    except (ConfigError, ValueError, OSError) as e:
        line = os_error_line(e) if isinstance(e, OSError) else _error_line(e)
        print(f"error: {line}", file=sys.stderr)
        if isinstance(e, OSError):
            settle_running(cfg, line)
        if multirun:  # the record says why; the other jobs of the sweep go on
            run_id = record_rejection(cfg, e) or " ".join(hc.overrides.task)
            return outcome(run_id, "failed", line)
        sys.exit(2)
    except Exception as e:  # noqa: BLE001 - one failing sweep member must not stop the others
        print(f"error: run failed: {typed_line(e)}", file=sys.stderr)
        if multirun:
            run_id = identity.run_id(cfg) if cfg is not None else " ".join(hc.overrides.task)
            return outcome(run_id, "failed", typed_line(e))
        sys.exit(1)
    rec["_dir"] = str(identity.run_dir(cfg))
    print(summary(rec))
    return outcome(rec["run_id"], rec["status"], rec.get("reason"))


def results_dir_problem(argv: list[str]) -> str | None:
    """Hydra makes its folder under results_dir before any code of ours runs, so a results_dir it cannot
    create ends in a traceback of Hydra's: check it first and say it in one line."""
    given = (a.split("=", 1)[1] for a in argv if a.lstrip("+").startswith("results_dir="))
    value = next(given, default_results())
    if "${" in value:
        return None  # an interpolation: Hydra resolves it
    existing = Path(value).absolute()
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        return f"results_dir={value}: {existing} is a file, not a folder"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"results_dir={value}: {existing} is not writable"
    return None


def row_file_problem(argv: list[str]) -> str | None:
    """A single run's row file that does not compose (a YAML error, a misspelt key): Hydra would answer
    with a traceback; say it in one line naming the file and line. (In a sweep the sweeper refuses such a
    job alone.)"""
    from ablate.config.rows import row_file_problem as problem

    rows = [a.split("=", 1)[1] for a in argv if a.startswith("model=")]
    if not rows:
        return None
    for folder in config_dirs(argv):
        path = Path(folder) / "model" / f"{rows[-1]}.yaml"
        if path.is_file():
            return problem(path)
    return None


_HYDRA_FLAGS = ("--help", "-h", "--hydra-help", "--info", "-i", "--cfg", "-c", "--shell-completion", "-sc")


def config_dirs(argv: list[str]) -> list[Path]:
    """The config folders Hydra searches, first to last: `--config-dir`, the study's conf/ (the study the
    command is in), the user's folders of `hydra.searchpath=[file://...]` (a researcher's own experiments
    and rows), then the package's conf/."""
    dirs = [b for a, b in zip(argv, argv[1:], strict=False) if a in ("--config-dir", "-cd")]
    dirs += [a.split("=", 1)[1] for a in argv if a.startswith("--config-dir=")]
    dirs += [str(conf)] if (conf := current_study().conf) is not None else []
    for a in argv:
        key, _, value = a.lstrip("+").partition("=")
        if key == "hydra.searchpath":
            from hydra_plugins.ablate_sweeper.row_groups import searchpath_entries

            entries = searchpath_entries(value)
            dirs += [e.removeprefix("file://") for e in entries if not e.startswith("pkg://")]
    return [Path(d) for d in dirs] + [package_conf()]


def experiment_problem(argv: list[str]) -> str | None:
    """`experiment=<name>` or `data=<name>` without its file in any config folder: Hydra takes a missing
    optional group in silence, and names a missing data file in a traceback."""
    *theirs, ours = config_dirs(argv)
    for group in ("experiment", "data"):
        folders = [f for f in theirs if (f / group).is_dir()] + [ours]
        shown = [str(f) for f in folders[:-1]] + ["conf"]  # the project's own, as the repository names it
        for o in argv:
            key, _, value = o.partition("=")
            files = [f / group / f"{value}.yaml" for f in folders]
            if key == group and value and not any(p.is_file() for p in files):
                names = sorted({p.stem for f in folders for p in (f / group).glob("*.yaml")})
                where = " or ".join(f"{d}/{group}/{value}.yaml" for d in shown)
                hint = "; a task's own source is chosen by data.name=<its name>" if group == "data" else ""
                kind = {"experiment": "experiments", "data": "data groups"}[group]
                return f"{group}={value}: no file {where} ({kind}: {', '.join(names)}){hint}"
    return None


def _error_line(e: BaseException) -> str:
    """A run's refusal in one line; a config that does not resolve (OmegaConf's error) as Hydra's would."""
    from omegaconf.errors import OmegaConfBaseException

    return _composition_line(e) if isinstance(e, OmegaConfBaseException) else first_line(e)


QUOTE_HINT = (
    "a value with spaces or characters other than letters, digits and -_./ takes quotes, inside the "
    "shell's: \"data.train_src='my file.txt'\""
)


def _override_problem(override: str, message: str) -> str:
    """Hydra's override parser's message in one line: the override, and what it could not read there."""
    lines = [ln for ln in message.splitlines() if ln.strip() and not ln.startswith("See https://")]
    lexer = "LexerNoViableAltException: "
    if lines[0].startswith(lexer) and len(lines) > 1 and lines[1].strip() == "^":
        at = lines[1].index("^") - len(lexer)
        return f"{override}: unexpected {override[at]!r}" if 0 <= at < len(override) else lines[0]
    said = ": ".join(lines)
    return said if override in said else f"{override}: {said}"


def _composition_line(e: BaseException) -> str:
    """Hydra's message, the cause it names and the options it lists, in one line: what keeps a config
    from composing (Hydra hands it over under HYDRA_FULL_ERROR instead of printing it in several lines)."""
    from hydra.errors import OverrideParseException

    if isinstance(e, OverrideParseException):  # the lexer: a value the shell split, or an unquoted character
        return f"{_override_problem(e.override, str(e))} ({QUOTE_HINT})"
    text = str(e).strip()
    first = text.splitlines()[0] if text else type(e).__name__
    if "Available options in" in text:
        body = text.split("Available options in", 1)[1].split("Config search path:", 1)[0]
        options = [ln.strip() for ln in body.splitlines()[1:] if ln.strip()]
        return f"{first} (options: {', '.join(options)})"
    prefix = "ValueError raised while resolving interpolation: "
    first = first.removeprefix(prefix)
    cause = e.__cause__ or e.__context__
    said = str(cause).strip().splitlines()[0] if cause is not None and str(cause).strip() else ""
    said = said.removeprefix(prefix)
    line = f"{first.rstrip('.')}: {said}" if said and said not in first else first
    if "is not in struct" in line:  # a key the config has no place for yet: Hydra adds one with a leading +
        line += " (a new key takes a leading +, as in +hydra.launcher.additional_parameters.account=x)"
    return line


# joblib's loky launcher has a resource tracker process that outlives this one. After Ctrl-C it frees
# the semaphores of the workers it stopped and warns about each on our stderr, after our last line.
# The freeing is its job and needs no word; the filter reaches it through the interpreter flags that
# Python gives the processes it spawns (subprocess._args_from_interpreter_flags).
QUIET_CHILD_WARNINGS = "ignore:resource_tracker:UserWarning"


def entry(argv: list[str]) -> None:
    """The command line: checks Hydra would answer with a traceback, --plan, then Hydra's main."""
    try:
        enter()  # the study's modules import by name, here and in the processes this one starts
    except ConfigError as e:  # a study.yaml that does not read
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    multirun = any(a in ("-m", "--multirun") for a in argv)
    if multirun and any(a == "--cfg" or a.startswith("--cfg=") or a == "-c" for a in argv):
        print(
            "error: --cfg prints the config of one run; for a sweep, --plan lists each run it would train",
            file=sys.stderr,
        )
        sys.exit(2)
    if (
        problem := (None if plan.FLAG in argv else results_dir_problem(argv))  # a plan writes nothing
        or experiment_problem(argv)
        or (None if multirun else row_file_problem(argv))
    ):
        print(f"error: {problem}", file=sys.stderr)
        sys.exit(2)
    if multirun and QUIET_CHILD_WARNINGS not in sys.warnoptions:
        sys.warnoptions.append(QUIET_CHILD_WARNINGS)
    if plan.FLAG in argv:
        from hydra_plugins.ablate_plan.plan_launcher import parallelism

        argv = plan.planned_argv(argv, parallelism(argv))
    from hydra_plugins.ablate_sweeper.row_groups import with_group_sources

    sys.argv = [sys.argv[0], *with_group_sources(argv)]  # a researcher's row groups, as the project's
    # Hydra composes each config once, and raises what keeps one from composing (its documented switch)
    # instead of printing it in several lines: said here in one.
    os.environ["HYDRA_FULL_ERROR"] = "1"
    wait_without_spinning(argv)  # before torch loads OpenMP, which reads its wait policy once
    try:
        main()
    except KeyboardInterrupt:  # Ctrl-C: one line, not the tracebacks of every layer it passed through
        print(f"[ablate] stopped: {CTRL_C}", file=sys.stderr, flush=True)
        sys.exit(130)
    except Exception as e:  # noqa: BLE001 - main() answers for a run; what reaches here is Hydra's
        print(f"error: {_composition_line(e)}", file=sys.stderr, flush=True)
        sys.exit(2)


def cli() -> None:
    """The console script `ablate-run`, as `python -m ablate.run`."""
    entry(sys.argv[1:])


if __name__ == "__main__":
    cli()
