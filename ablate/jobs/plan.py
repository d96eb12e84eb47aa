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

import functools
import json
import math
import sys
from dataclasses import asdict
from pathlib import Path

from omegaconf import DictConfig

from ablate.config import (
    ConfigError,
    RunConfig,
    build_model,
    effective_model,
    model_config,
    preset_name,
    row_arch,
    step_tokens,
    total_steps,
    validate,
    varied,
)
from ablate.config.arch import DEFAULT_ARCH, DEFAULT_CRITERION, own_values
from ablate.errors import first_line
from ablate.jobs.command import override, run_command
from ablate.jobs.estimate import MEASURE_STEPS, Count, Estimate, Timing, transformer_macs
from ablate.nn.config import TransformerConfig
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
    from ablate.config.study import current_study

    m = cfg.model
    changes = varied(m) or m.run or m.criterion_args
    # a study's reference may be base under its paper's name (Shazeer's relu): a row, not a copy
    if m.name not in ("base", current_study().reference) and not changes and _row_file(cfg) == m.name:
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
    """The model a run would build and how it trains it: layers, widths, heads, dropout, label smoothing,
    positions, norm, the FFN's kind and untied embeddings where they are not the paper's, steps (the
    vocabulary comes with the data). A researcher's model: its name and its own keys as it
    builds them; a criterion other than the paper's, named."""
    eps = f"eps_ls {row_arch(cfg).label_smoothing:g}"
    loss = f", criterion {cfg.model.criterion}" if cfg.model.criterion != DEFAULT_CRITERION else ""
    if cfg.model.arch != DEFAULT_ARCH:
        own = ", ".join(f"{k} {v}" for k, v in own_values(cfg).items())
        return f"{cfg.model.arch}: {own}, {eps}{loss}, {total_steps(cfg):,} steps"
    m = effective_model(cfg, 0)
    dec = m.n_dec_layers if m.n_dec_layers not in (None, m.n_layers) else None
    layers = f"N {m.n_layers}" + (f" (decoder {dec})" if dec is not None else "")
    norm = f"{m.norm}-LN" if m.norm_type == "layer" else f"{m.norm}-RMSNorm"
    ffn = f", {m.ffn} FFN" if m.ffn != "relu" else ""  # the components that are not the paper's, named
    tied = ", untied embeddings" if not m.tie_embeddings else ""
    return (
        f"{layers}, d_model {m.d_model}, d_ff {m.d_ff}, h {m.n_heads}, d_k {m.d_k}, d_v {m.d_v}, "
        f"P_drop {m.dropout:g}, {eps}, {m.positional} positions, {norm}{ffn}{tied}{loss}, "
        f"{total_steps(cfg):,} steps"
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


def _command_overrides(overrides: list[str]) -> list[str]:
    """A job's overrides as its command gave them, less its results folder, with the command's own
    config folders (a researcher's `hydra.searchpath`)."""
    from hydra.core.hydra_config import HydraConfig

    task = [o for o in overrides if not o.startswith(("results_dir=", "hydra.", "hydra/"))]
    if HydraConfig.initialized():
        task += [o for o in HydraConfig.get().overrides.hydra if o.startswith("hydra.searchpath=")]
    return task


_TIMINGS: dict[tuple[str, ...], list[Timing]] = {}
# the dev PPLs of the finished records of a results folder (not its calibrations: a few dozen steps), by
# folders: {(row, preset, model): PPLs}
_DEV_PPL: dict[tuple[str, ...], dict[tuple[str, str, str], list[float]]] = {}
_UNREADABLE: dict[str, None] = {}  # the records an estimate could not read, in the order met (one line each)


def _timings(*folders: str) -> list[Timing]:
    """The timings of the finished records under `folders` (read once a process), each with its model's
    cost a step (`record_cost`, counted where an estimate needs it); the records that cannot be read are
    kept for the plan's closing lines."""
    if folders not in _TIMINGS:
        from ablate.jobs.estimate import timing

        found, ppls = [], _DEV_PPL.setdefault(folders, {})
        for f in (Path(f) for f in folders if Path(f).is_dir()):
            records, errors = store.find_records(f)
            _UNREADABLE.update(dict.fromkeys(first_line(e) for e in errors))
            for rec in records:
                if (t := timing(rec, functools.partial(record_cost, rec))) is not None:
                    found.append(t)
                    ppl = (rec.get("metrics") or {}).get("dev_ppl")
                    if f == Path(folders[0]) and isinstance(ppl, int | float):
                        ppls.setdefault((t.row, t.preset, t.model), []).append(float(ppl))
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
    est, learns = None, ""
    if word in _TRAINS:
        done = _checkpoint_step(identity.run_dir(cfg) / "checkpoints") if word == TO_RESUME else 0
        est = run_estimate(cfg, done or 0)
        learns = not_learning(cfg)
    return (
        (
            f"[plan] {cfg.model.name} s{cfg.seed}  {preset_name(cfg)}{varies_text(cfg)}  {model_text(cfg)}  "
            f"{identity.run_id(cfg)}  {word}{detail}"
            + (f"  {est.text()}" if est else "")
            + (f"  {learns}" if learns else "")
        ),
        word,
        est,
    )


def varies_text(cfg: RunConfig) -> str:
    """'  sets <the row's run keys>  varies <the command line's keys>': what tells this job from the
    others of its sweep beyond the row and the seed ('' where nothing does)."""
    from ablate.jobs.sweep import _flat

    own = [f"{k}={v}" for k, v in _flat(cfg.model.run).items()] if cfg.model.run else []
    return (f"  sets {' '.join(own)}" if own else "") + (
        f"  varies {' '.join(cfg.varies)}" if cfg.varies else ""
    )


def run_estimate(cfg: RunConfig, done_steps: int = 0) -> Estimate:
    """This run's wall time on this machine (ablate.jobs.estimate), from the finished records of its
    results folder and of the calibration folder beside it (`<results_dir>.calibration`, where the plan's
    calibration command measures)."""
    from ablate.jobs.estimate import estimate

    if cfg.train.budget_minutes is not None:  # it trains for its budget, however many steps that is
        budget = cfg.train.budget_minutes
        return Estimate(budget * 60, "budget", f"train.budget_minutes={budget:g}, plus setup and evaluations")
    timings = _timings(cfg.results_dir, calibration_dir(cfg.results_dir))
    cost = functools.partial(_step_cost, cfg)  # counted only where no record of the row gives the time
    preset = store.preset_key(cfg.recipe, cfg.scale.name)
    steps = total_steps(cfg) - done_steps
    unknown = "the calibration below gives one"
    return estimate(cfg.model.name, preset, this_machine(cfg), steps, cost, timings, unknown, _model_of(cfg))


def _model_of(cfg: RunConfig) -> str:
    """The run's model as its record will say it (ablate.jobs.estimate.model_key)."""
    from ablate.jobs.estimate import model_key

    return model_key(asdict(model_config(cfg, cfg.data.vocab_size)))


# A dev PPL at or above this fraction of the unigram model's: the row predicts little beyond how often
# each wordpiece occurs (a model that learned the target's bigrams is well below it)
UNIGRAM_NEAR = 0.9


def not_learning(cfg: RunConfig) -> str:
    """'does not learn under this preset: ...' where the row's own finished records (of its model, in its
    results folder) under this preset end at a dev PPL of at least UNIGRAM_NEAR x the unigram model's of
    the run's prepared corpus (`unigram_ppl`); '' where they do not, where it has none, or where the corpus
    is not prepared yet."""
    folders = (cfg.results_dir, calibration_dir(cfg.results_dir))
    _timings(*folders)
    row, preset, model = cfg.model.name, store.preset_key(cfg.recipe, cfg.scale.name), _model_of(cfg)
    own = [ps for (r, s, m), ps in _DEV_PPL[folders].items() if (r, s) == (row, preset) and m in ("", model)]
    ppls = [p for ps in own for p in ps]
    if not ppls or (unigram := unigram_ppl(cfg)) is None:
        return ""
    near = [p for p in ppls if p >= UNIGRAM_NEAR * unigram]
    if not near:
        return ""
    return (
        f"(does not learn under this preset: {len(near)} of its {len(ppls)} record(s) end at dev PPL "
        f"{min(near):.1f} or more, the target's unigram model's {unigram:.1f}; a stalled or diverging "
        "model takes a lower schedule.scale, a longer schedule.warmup_steps or train.grad_clip)"
    )


@functools.cache
def _unigram_ppl(root: str) -> float | None:
    """The dev perplexity, per wordpiece and end of sentence as dev PPL counts them, of the unigram model
    of the prepared corpus at `root`: each target wordpiece at its training frequency, add-one."""
    import math

    import numpy as np

    from ablate.data.binarize import load_npz_mmap
    from ablate.data.tokenizer import EOS

    try:
        vocab = int(json.loads((Path(root) / "meta.json").read_text())["vocab_size"])
        train, dev = (load_npz_mmap(Path(root) / f"{split}.npz") for split in ("train", "dev"))
    except (OSError, ValueError, KeyError):
        return None
    counts = np.bincount(train["tgt_tokens"], minlength=vocab).astype(np.float64)
    counts[EOS] += len(train["tgt_offsets"]) - 1  # one end of sentence a target sentence
    logp = np.log(counts + 1.0) - math.log(counts.sum() + len(counts))
    dev_logp = logp[dev["tgt_tokens"]].sum() + (len(dev["tgt_offsets"]) - 1) * logp[EOS]
    return math.exp(-dev_logp / (len(dev["tgt_tokens"]) + len(dev["tgt_offsets"]) - 1))


def unigram_ppl(cfg: RunConfig) -> float | None:
    """`_unigram_ppl` of the run's prepared corpus (data.root where it is a prepared folder, else the
    cache's folder of its data), None where it is not prepared: the plan prepares nothing."""
    from ablate.data.corpora import corpus_cache_key

    root = Path(cfg.data.root) if cfg.data.root else None
    if root is None or not (root / "meta.json").is_file():
        try:
            root = Path(cfg.data.cache_dir) / "data" / corpus_cache_key(cfg)
        except (ValueError, OSError):
            return None
    return _unigram_ppl(str(root)) if (root / "meta.json").is_file() else None


def calibration_dir(results_dir: str) -> str:
    """Where calibrations of a results folder's runs lie (their records, apart from the table's)."""
    return f"{results_dir}.calibration"


@functools.cache
def _machine(accelerator: str, threads: int | None) -> str:
    """The CPU and device as records name them (`machine.cpu; device`); torch asked only where the config
    does not say (a sweep of CPU jobs at trainer.threads=1 plans without importing it)."""
    if accelerator == "cpu" and threads:
        return f"{store.machine()['cpu']}; cpu ({threads} threads)"
    import torch

    cpu = accelerator == "cpu" or not torch.cuda.is_available()
    threads = threads or torch.get_num_threads()
    device = f"cpu ({threads} threads)" if cpu else torch.cuda.get_device_name(0)
    return f"{store.machine()['cpu']}; {device}"


def this_machine(cfg: RunConfig) -> str:
    return _machine(cfg.trainer.accelerator, cfg.trainer.threads)


_COUNTS: dict[str, Count] = {}  # a step counted, by its model's config and the step's tokens


def step_macs(cfg: RunConfig) -> float:
    """The multiply-accumulates of one training step of the run's model, to rank rows by size: the
    Transformer's from its config (ablate.jobs.estimate.transformer_macs: no torch), another model's
    counted (`step_count`)."""
    if cfg.model.arch == DEFAULT_ARCH:
        return transformer_macs(effective_model(cfg, cfg.data.vocab_size), step_tokens(cfg))
    try:
        return step_count(cfg).macs
    except Exception:  # noqa: BLE001 - a model that cannot be counted ranks last
        return math.inf


def step_count(cfg: RunConfig) -> Count:
    """One training step of the run's model at its step's tokens, counted (ablate.jobs.estimate.count);
    once a model a process."""
    if cfg.model.arch == DEFAULT_ARCH:
        return _transformer_count(effective_model(cfg, cfg.data.vocab_size), step_tokens(cfg))
    fields = {"arch": cfg.model.arch, **own_values(cfg), "vocab": cfg.data.vocab_size}
    return _counted(fields, lambda: build_model(cfg, cfg.data.vocab_size), step_tokens(cfg))


def _step_cost(cfg: RunConfig) -> float | None:
    """The run's cost a step, None where its model cannot be counted on the meta device (a model whose
    construction or forward reads its tensors' values): its estimate then takes a calibration."""
    try:
        return step_count(cfg).cost
    except Exception:  # noqa: BLE001 - a researcher's code may raise anything; the plan goes on
        return None


def _transformer_count(model: TransformerConfig, tokens: int) -> Count:
    from ablate.nn.model import Transformer

    return _counted({"arch": DEFAULT_ARCH, **asdict(model)}, lambda: Transformer(model), tokens)


def _counted(fields: dict, build, tokens: int) -> Count:
    from ablate.jobs.estimate import count

    key = _model_key({**fields, "tokens": tokens})
    if key not in _COUNTS:
        _COUNTS[key] = count(build, tokens)
    return _COUNTS[key]


def record_cost(rec: dict) -> float | None:
    """A record's model's cost a step (ablate.jobs.estimate.Count.cost): the Transformer's from the
    record's model (`model_effective`) and its step's tokens (`batch`), another model's from its config;
    None where the record lacks them or its model cannot be built here."""
    from ablate.records.trust import record_config

    cfg = rec.get("config") or {}
    arch = (cfg.get("model") or {}).get("arch", DEFAULT_ARCH)
    tokens = (rec.get("batch") or {}).get("max_tokens_per_step")
    try:
        if arch == DEFAULT_ARCH and rec.get("model_effective") and tokens:
            return _transformer_count(TransformerConfig(**rec["model_effective"]), int(tokens)).cost
        return step_count(record_config(rec)).cost  # a record naming code not this study's: none
    except Exception:  # noqa: BLE001 - a record this process cannot count is left out of the estimates
        return None


def _model_key(fields: dict) -> str:
    return json.dumps(fields, sort_keys=True)


def calibration(cfg: RunConfig, overrides: list[str]) -> dict:
    """What the plan's closing line needs to name one calibration for a job of unknown time: its preset
    and folders, its row's size, and the command that measures the row here: MEASURE_STEPS steps, no
    step checkpoint to average, no test split to decode, into this machine's own calibration folder, from
    its first step (resume=false: what an earlier calibration of the row left there, a record cut short
    or a stopped run, is set aside, not read)."""
    from ablate.jobs.estimate import machine_folder

    here = this_machine(cfg)
    into = f"{calibration_dir(cfg.results_dir)}/{machine_folder(here)}"
    measure = [f"train.max_steps={MEASURE_STEPS}", "train.budget_minutes=null", "train.average_last=0"]
    command = run_command(
        [*_command_overrides(overrides), *measure, "resume=false", override("results_dir", into)]
    )
    size = step_macs(cfg) * total_steps(cfg)
    preset = store.preset_key(cfg.recipe, cfg.scale.name)
    folders = [cfg.results_dir, calibration_dir(cfg.results_dir)]
    return {"preset": preset, "folders": folders, "row": cfg.model.name, "size": size, "command": command}


def summary(outcomes: list[dict], refused: int = 0, parallel: int = 1, how: str = "") -> tuple[str, bool]:
    """('plan of 4 runs: 1 finished, 2 to train, 1 refused; ~1 h 10 min at 2 at a time (...)', none
    refused?) for the jobs' outcomes and the jobs refused before them. The total: the known estimates run
    `parallel` at a time in the sweep's order; jobs of unknown time counted, and the one calibration
    command (per preset) that gives each of them an estimate."""
    from ablate.jobs.estimate import duration, makespan

    words = [o["status"] for o in outcomes] + [REFUSED] * refused
    order = (FINISHED, TO_RESUME, TO_RETRY, BUSY, TO_TRAIN, REFUSED)
    counts = [f"{words.count(w)} {w}" for w in order if words.count(w)]
    n = len(words)
    text = f"plan of {n} run{'s' if n != 1 else ''}: {', '.join(counts) or 'nothing'}"
    known = [o["estimate_s"] for o in outcomes if o.get("estimate_s") is not None]
    unknown = [o for o in outcomes if o["status"] in _TRAINS and o.get("estimate_s") is None]
    if known or unknown:
        at = f"{parallel} at a time" + (f", {how}" if how else "")
        text += f"; ~{duration(makespan(known, parallel))} of wall time at {at}" if known else ""
        text += f" ({len(unknown)} of unknown time, more)" if unknown and known else ""
        text += f"; {len(unknown)} run(s) of unknown time" if unknown and not known else ""
    unread = "".join(f"{e}: left out of the estimates\n[plan] " for e in _UNREADABLE)
    # the counts last: the plan's closing line
    return unread + _calibrations(unknown) + text, REFUSED not in words


def _calibrations(unknown: list[dict]) -> str:
    """For the jobs of unknown time, one calibration command per preset: the row the most other machines
    ran, the cheapest of those (ablate.jobs.estimate.calibration_row); with it every job has an estimate."""
    from ablate.jobs.estimate import calibration_row

    by: dict[str, list[dict]] = {}
    for o in unknown:
        if o.get("calibration"):
            by.setdefault(o["calibration"]["preset"], []).append(o["calibration"])
    text = ""
    for preset, cals in by.items():
        rows = {c["row"]: (c["size"], 1) for c in cals}
        row = calibration_row(rows, _timings(*cals[0]["folders"]), preset)
        chosen = next(c for c in cals if c["row"] == row)
        n = len(cals)
        text += (
            f"{n} run{'s' * (n > 1)} of {preset} without an estimate: this calibration "
            f"({MEASURE_STEPS} steps of {row}) gives each one:\n    {chosen['command']}\n[plan] "
        )
    return text


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
    extra = {"estimate_s": est.seconds if est else None}
    if est is not None and est.seconds is None:
        extra["calibration"] = calibration(cfg, overrides)
    return text, outcome(name, word, **extra)


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
