"""`python -m ablate.run <overrides> --plan` (`-m ... hydra/launcher=plan`), or `python -m ablate.jobs.plan
<overrides>`: each run a command would train, and what training it would do, without training anything.

One line a job: row, seed, preset, the model it would build (after recipe and scale), its run id, and
`finished`, `to resume from step k`, `to retry (failed: ...)`, `to train`, `being run by another process`
or `refused: <the reason training would give>`. The identity is the one training uses
(ablate.jobs.sweep.member_config, ablate.records.identity.run_id), so the plan and the run agree on what is
finished. The sweep ends with one line of counts; the exit status is 2 when any job is refused, else 0.
The launcher `hydra/launcher=plan` (hydra_plugins/ablate_plan) prints each job's line; `--plan` selects it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from omegaconf import DictConfig

from ablate.config import (
    ConfigError,
    RunConfig,
    build_model,
    effective_model,
    preset_name,
    total_steps,
    validate,
    varied,
)
from ablate.config.arch import DEFAULT_ARCH, own_values
from ablate.errors import first_line
from ablate.jobs.estimate import Estimate, Timing
from ablate.records import folder, identity, store
from ablate.records.staleness import why_stale

FLAG = "--plan"
LAUNCHER = "hydra/launcher=plan"
FINISHED, TO_RESUME, TO_RETRY, TO_TRAIN, BUSY, REFUSED = (
    "finished",
    "to resume",
    "to retry",
    "to train",
    "being run by another process",
    "refused",
)


def row_problem(cfg: RunConfig) -> str | None:
    """A row file that changes nothing from base would train a copy of base under another name. A name
    an experiment gives its model (`model: {name: parsing}`, the architecture in its recipe) is a label,
    not a row file: left alone."""
    if cfg.model.name != "base" and not varied(cfg.model) and _row_file(cfg) == cfg.model.name:
        return (
            f"model={cfg.model.name}: its row file varies nothing from base (a row states the keys it "
            "changes; base itself is model=base)"
        )
    return None


def _row_file(cfg: RunConfig) -> str:
    """The row file the composed config took its `model` from (Hydra's choice of the group)."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return cfg.model.name
    return str(HydraConfig.get().runtime.choices.get("model", cfg.model.name))


def model_text(cfg: RunConfig) -> str:
    """The model a run would build: layers, widths, heads, dropout, steps (the vocabulary comes with the
    data). A researcher's model: its name and its own keys as it builds them."""
    if cfg.model.arch != DEFAULT_ARCH:
        own = ", ".join(f"{k} {v}" for k, v in own_values(cfg).items())
        return f"{cfg.model.arch}: {own}, {total_steps(cfg):,} steps"
    m = effective_model(cfg, 0)
    dec = m.n_dec_layers if m.n_dec_layers not in (None, m.n_layers) else None
    layers = f"N {m.n_layers}" + (f" (decoder {dec})" if dec is not None else "")
    return (
        f"{layers}, d_model {m.d_model}, d_ff {m.d_ff}, h {m.n_heads}, d_k {m.d_k}, d_v {m.d_v}, "
        f"P_drop {m.dropout:g}, {m.positional} positions, {m.norm}-LN, {total_steps(cfg):,} steps"
    )


def state(cfg: RunConfig) -> tuple[str, str]:
    """(word, detail) for the run `cfg` names: what the same command without --plan would do with it."""

    problem = row_problem(cfg)
    if problem:
        return REFUSED, problem
    try:
        validate(cfg)
        run = identity.run_dir(cfg)  # a data source's fingerprint reads its files: missing ones refuse
    except (ConfigError, ValueError, OSError) as e:
        return REFUSED, first_line(e)
    path = run / store.RECORD_NAME
    if path.is_file() and cfg.resume:
        try:
            rec = store.read_record(path)
        except store.RecordError as e:
            return REFUSED, str(e)
        if rec["status"] == "finished":
            stale = why_stale(rec)
            return FINISHED, f" ({stale}: resume=false trains it again)" if stale else ""
        if rec["status"] == "running" and folder.is_running(run):
            return BUSY, ""
    step = _checkpoint_step(run / "checkpoints") if cfg.resume else None
    if step is not None:
        return TO_RESUME, f" from step {step}"
    if path.is_file() and cfg.resume:
        rec = store.read_record(path)
        if rec["status"] == "failed":
            return TO_RETRY, f" (failed: {first_line(rec.get('reason') or 'no reason given')})"
    return TO_TRAIN, ""


def _preset(cfg: RunConfig) -> str:
    """As records name it (ablate.jobs.estimate.timing): the recipe+scale, one name where both agree."""
    return cfg.scale.name if cfg.recipe == cfg.scale.name else f"{cfg.recipe}+{cfg.scale.name}"


def _overrides_text(cfg: RunConfig) -> str:
    """The job's overrides as its command gave them (Hydra's), else its row and seed."""
    import shlex

    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        given = HydraConfig.get().overrides
        task = [o for o in given.task if not o.startswith("results_dir=")]
        task += [o for o in given.hydra if o.startswith("hydra.searchpath=")]  # a researcher's configs
        return " ".join(shlex.quote(o) for o in task)
    return f"model={cfg.model.name} seed={cfg.seed}"


_TIMINGS: dict[tuple[str, ...], list[Timing]] = {}


def _timings(*folders: str) -> list[Timing]:
    """The timings of the finished records under `folders` (read once a process)."""
    if folders not in _TIMINGS:
        from ablate.jobs.estimate import timing

        found = []
        for f in (Path(f) for f in folders if Path(f).is_dir()):
            found += [t for r in store.find_records(f)[0] if (t := timing(r)) is not None]
        _TIMINGS[folders] = found
    return _TIMINGS[folders]


def _checkpoint_step(ckpt_dir: Path) -> int | None:
    """The step a run would resume from, by the names of its checkpoints (last.ckpt: the newest of them,
    or step 0 where it is the only one)."""
    step = folder.newest_step(ckpt_dir)
    if step is not None:
        return step
    return 0 if (ckpt_dir / "last.ckpt").is_file() else None


def line(cfg: RunConfig) -> tuple[str, str, Estimate | None]:
    """(the plan's line for this job, its state word, the estimate of its time where it would train)."""

    word, detail = state(cfg)
    if word == REFUSED:
        return f"[plan] {cfg.model.name} s{cfg.seed}  {preset_name(cfg)}  refused: {detail}", word, None
    est = None
    if word in (TO_TRAIN, TO_RESUME, TO_RETRY):
        done = _checkpoint_step(identity.run_dir(cfg) / "checkpoints") if word == TO_RESUME else 0
        est = run_estimate(cfg, done or 0)
    return (
        (
            f"[plan] {cfg.model.name} s{cfg.seed}  {preset_name(cfg)}  {model_text(cfg)}  "
            f"{identity.run_id(cfg)}  {word}{detail}" + (f"  {est.text()}" if est else "")
        ),
        word,
        est,
    )


def run_estimate(cfg: RunConfig, done_steps: int = 0) -> Estimate:
    """This run's wall time on this machine (ablate.jobs.estimate), from the finished records of its
    results folder and of the calibration folder beside it (`<results_dir>.calibration`: where the
    command of an unknown estimate measures)."""
    import torch

    from ablate.jobs.estimate import MEASURE_STEPS, estimate
    from ablate.nn.model import count_parameters
    from ablate.records.store import machine

    with torch.device("meta"):
        params = count_parameters(build_model(cfg, cfg.data.vocab_size))
    cpu = cfg.trainer.accelerator == "cpu" or not torch.cuda.is_available()
    threads = cfg.trainer.threads or torch.get_num_threads()
    device = f"cpu ({threads} threads)" if cpu else torch.cuda.get_device_name(0)
    calibration = f"{cfg.results_dir}.calibration"
    command = (
        f"python -m ablate.run {_overrides_text(cfg)} train.max_steps={MEASURE_STEPS} "
        f"train.budget_minutes=null train.average_last=0 results_dir={calibration}"
    )  # a measurement of steps: no step checkpoint to average, no test split to decode
    if cfg.train.budget_minutes is not None:  # it trains for its budget, however many steps that is
        budget = cfg.train.budget_minutes
        return Estimate(budget * 60, "budget", f"train.budget_minutes={budget:g}, plus setup and evaluations")
    return estimate(
        cfg.model.name, _preset(cfg), f"{machine()['cpu']}; {device}", total_steps(cfg) - done_steps,
        params, _timings(cfg.results_dir, calibration), command,
    )  # fmt: skip


def summary(
    words: list[str], estimates: list[float | None] = (), parallel: int = 1, how: str = ""
) -> tuple[str, bool]:
    """('plan of 4 runs: 1 finished, 2 to train, 1 refused; ~1 h 10 min at 2 at a time (...)', none
    refused?). The total: the known estimates run `parallel` at a time; jobs of unknown time counted."""
    from ablate.jobs.estimate import duration, makespan

    order = (FINISHED, TO_RESUME, TO_RETRY, BUSY, TO_TRAIN, REFUSED)
    counts = [f"{words.count(w)} {w}" for w in order if words.count(w)]
    n = len(words)
    text = f"plan of {n} run{'s' if n != 1 else ''}: {', '.join(counts) or 'nothing'}"
    known = [s for s in estimates if s is not None]
    unknown = sum(1 for w, s in zip(words, estimates, strict=False) if w in _TRAINS and s is None)
    if known or unknown:
        at = f"{parallel} at a time" + (f", {how}" if how else "")
        text += f"; ~{duration(makespan(known, parallel))} of wall time at {at}" if known else ""
        text += f" ({unknown} of unknown time, more)" if unknown and known else ""
        text += f"; {unknown} run(s) of unknown time" if unknown and not known else ""
    return text, REFUSED not in words


_TRAINS = (TO_TRAIN, TO_RESUME, TO_RETRY)


def planned_argv(argv: list[str], parallel: tuple[int, str] = (1, "")) -> list[str]:
    """The command line `--plan` stands for: the same overrides as a multirun under `hydra/launcher=plan`,
    in place of the launcher it names (and that launcher's settings). Beside Hydra's own printing options
    (--cfg, --info, --help) the command is left to print what it prints."""
    if any(a.split("=", 1)[0] in _PRINTING for a in argv):
        return [a for a in argv if a != FLAG]
    kept = [
        a for a in argv if a != FLAG and not a.lstrip("+~").startswith(("hydra/launcher=", "hydra.launcher."))
    ]
    at = _after_overrides(kept)
    n, how = parallel  # of the launcher the command names (hydra_plugins.ablate_plan.parallelism)
    launcher = [LAUNCHER, f"hydra.launcher.parallel={n}", f'hydra.launcher.parallel_from="{how}"']
    if any(a in ("-m", "--multirun") or a.lstrip("+").upper() == "HYDRA.MODE=MULTIRUN" for a in kept):
        return [*kept[:at], *launcher, *kept[at:]]
    return ["-m", *kept[:at], *launcher, "hydra.launcher.single_run=true", *kept[at:]]


_PRINTING = {"--cfg", "-c", "--info", "-i", "--help", "-h", "--hydra-help", "--shell-completion", "-sc"}


# Hydra's options that take a value: the value is not an override
_VALUED = {"--config-dir", "-cd", "--config-path", "-cp", "--config-name", "-cn", "--cfg", "-c", "--package",
           "-p", "--experimental-rerun"}  # fmt: skip


def _after_overrides(argv: list[str]) -> int:
    """Where more overrides go: after the command line's own (Hydra's parser takes them as one run of
    positional arguments), or at the end where it has none."""
    last = None
    for i, a in enumerate(argv):
        if not a.startswith("-") and not (i and argv[i - 1] in _VALUED):
            last = i
    return len(argv) if last is None else last + 1


def job(dcfg: DictConfig, overrides: list[str], launcher: str | None) -> tuple[str, dict]:
    """(the plan's line, the job's outcome for the sweep's closing line) of one composed job."""
    from ablate.jobs.sweep import member_config, outcome

    try:
        cfg = member_config(dcfg, overrides, launcher)
    except (ConfigError, ValueError) as e:
        name = label(overrides)
        return f"[plan] {name}  refused: {first_line(_cause(e))}", outcome(name, REFUSED)
    text, word, est = line(cfg)
    name = cfg.model.name if word == REFUSED else identity.run_id(cfg)
    return text, outcome(name, word, estimate_s=est.seconds if est else None)


def label(overrides: list[str]) -> str:
    """How a job that has no run id yet is named: its `model=` override, else all of its overrides."""
    return next((o for o in overrides if o.startswith("model=")), " ".join(overrides))


def _cause(e: BaseException) -> BaseException:
    """What a config's interpolation raised (a group named as a row), not OmegaConf's wrapper of it."""
    from omegaconf.errors import InterpolationResolutionError

    while isinstance(e, InterpolationResolutionError) and (e.__cause__ or e.__context__):
        e = e.__cause__ or e.__context__
    return e


def main() -> None:
    """`python -m ablate.jobs.plan <ablate.run's arguments>`: ablate.run as `python -m` runs it (Hydra finds
    conf/ beside the script it runs), with --plan."""
    import runpy

    sys.argv = [sys.argv[0], *sys.argv[1:], FLAG]
    runpy.run_module("ablate.run", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
