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

from ablate.config import ConfigError, RunConfig, effective_model, preset_name, total_steps, validate, varied
from ablate.errors import first_line
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
    data)."""
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


def _checkpoint_step(ckpt_dir: Path) -> int | None:
    """The step a run would resume from, by the names of its checkpoints (last.ckpt: the newest of them,
    or step 0 where it is the only one)."""
    step = folder.newest_step(ckpt_dir)
    if step is not None:
        return step
    return 0 if (ckpt_dir / "last.ckpt").is_file() else None


def line(cfg: RunConfig) -> tuple[str, str]:
    """(the plan's line for this job, its state word)."""

    word, detail = state(cfg)
    if word == REFUSED:
        return f"[plan] {cfg.model.name} s{cfg.seed}  {preset_name(cfg)}  refused: {detail}", word
    return (
        f"[plan] {cfg.model.name} s{cfg.seed}  {preset_name(cfg)}  {model_text(cfg)}  "
        f"{identity.run_id(cfg)}  {word}{detail}"
    ), word


def summary(words: list[str]) -> tuple[str, bool]:
    """('plan of 4 runs: 1 finished, 2 to train, 1 refused', none refused?)."""
    order = (FINISHED, TO_RESUME, TO_RETRY, BUSY, TO_TRAIN, REFUSED)
    counts = [f"{words.count(w)} {w}" for w in order if words.count(w)]
    n = len(words)
    return f"plan of {n} run{'s' if n != 1 else ''}: {', '.join(counts) or 'nothing'}", REFUSED not in words


def planned_argv(argv: list[str]) -> list[str]:
    """The command line `--plan` stands for: the same overrides as a multirun under `hydra/launcher=plan`,
    in place of the launcher it names (and that launcher's settings). Beside Hydra's own printing options
    (--cfg, --info, --help) the command is left to print what it prints."""
    if any(a.split("=", 1)[0] in _PRINTING for a in argv):
        return [a for a in argv if a != FLAG]
    kept = [
        a for a in argv if a != FLAG and not a.lstrip("+~").startswith(("hydra/launcher=", "hydra.launcher."))
    ]
    at = _after_overrides(kept)
    if any(a in ("-m", "--multirun") or a.lstrip("+").upper() == "HYDRA.MODE=MULTIRUN" for a in kept):
        return [*kept[:at], LAUNCHER, *kept[at:]]
    return ["-m", *kept[:at], LAUNCHER, "hydra.launcher.single_run=true", *kept[at:]]


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
    text, word = line(cfg)
    return text, outcome(cfg.model.name if word == REFUSED else identity.run_id(cfg), word)


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
