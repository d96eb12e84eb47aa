"""train(cfg) -> result record: run (or skip, or resume) the run a config names, on one or several devices.

The run's identity (records.identity.run_id) names its folder: a finished run is skipped, an interrupted
one goes on from its checkpoint, and a lock keeps two processes from running the same identity at once.
The work itself is training.fit.run_worker (build, fit, evaluate); cluster.ddp.spawn_job starts one
worker per device.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from ablate import cluster
from ablate.cluster import gpu_pool
from ablate.cluster.ddp import spawn_job
from ablate.config import RunConfig, validate
from ablate.config.study import SEARCH_PROVIDER as STUDY_PROVIDER
from ablate.config.study import package_conf
from ablate.data.datamodule import prepare_corpus
from ablate.errors import doing, first_line
from ablate.jobs.sweep import launcher_setting
from ablate.records import folder, identity, status, store
from ablate.records.staleness import outside_facts, why_stale
from ablate.training.callbacks import Preempted
from ablate.training.fit import run_worker
from ablate.training.hardware import check_accelerator


def train(cfg: RunConfig, jobs_per_device: int | None = None) -> dict:
    """Run (or skip, or resume) the run this config names; return its result record. `jobs_per_device`:
    under hydra/launcher=gpus, how many jobs share one device (default: hydra.launcher.jobs_per_device)."""
    check_accelerator(cfg.trainer.accelerator, cfg.trainer.device_pool)  # the machine first: no GPU, no run
    validate(cfg)
    jobs_per_device = jobs_per_device or launcher_setting("jobs_per_device", 1)
    job = cluster.job()  # its signals (a time limit's warning), its threads, what follows a stop
    job.install()
    job.set_threads(cfg)
    try:
        with doing(f"training the run in {identity.run_dir(cfg)}"):
            rec = _train(cfg, jobs_per_device)
    except Preempted as stop:  # stopped at a checkpoint on a signal: the job decides what follows
        job.after_stop(identity.run_dir(cfg), stop.step)
        raise
    job.after_finish(identity.run_dir(cfg), rec)
    return rec


def _train(cfg: RunConfig, jobs_per_device: int) -> dict:
    out = identity.run_dir(cfg)
    if cluster.job().ranks_started():  # a worker of a job whose launcher already holds the run
        return run_worker(cfg, prepare_corpus(cfg))
    out.parent.mkdir(parents=True, exist_ok=True)
    with folder.run_lock(out) as held:
        if not held:  # another process (a second sweep, a second joblib worker) is running this identity
            print(f"[ablate] {identity.run_id(cfg)} is being run by another process; skipped")
            rec_path = out / store.RECORD_NAME
            if rec_path.is_file():
                return store.read_record(rec_path)
            return {
                "run_id": identity.run_id(cfg),
                "row": cfg.model.name,
                "status": "running",
                "task": cfg.task,
            }
        return _train_locked(cfg, out, jobs_per_device)


def _train_locked(cfg: RunConfig, out: Path, jobs_per_device: int) -> dict:
    rec_path = out / store.RECORD_NAME
    if cfg.resume and rec_path.is_file():
        rec = store.read_record(rec_path)
        if rec["status"] == "finished":
            print(stale_line(rec) or f"[ablate] {rec['run_id']} already finished: {rec_path} (skipped)")
            return rec
    if not cfg.resume and out.exists():  # start afresh, but keep what was there
        kept = out.with_name(f"{out.name}.old-{time.strftime('%Y%m%d-%H%M%S')}")
        os.replace(out, kept)
        print(f"[ablate] resume=false: previous run folder kept as {kept}")
    prepared = prepare_corpus(cfg)  # once, before any worker starts
    if cfg.trainer.device_pool is not None:  # hydra/launcher=gpus: jobs side by side, each on its own ids
        ids = gpu_pool.pool(cfg.trainer.device_pool)
        lock_dir, k = Path(cfg.results_dir) / ".devices", jobs_per_device
        with gpu_pool.acquire(ids, cfg.trainer.devices, lock_dir, per_device=k) as mine:
            shared = f" (each shared by up to {k} jobs)" if k > 1 else ""
            print(f"[ablate] {identity.run_id(cfg)}: devices {mine}{shared}")
            return spawn_job(cfg, out, gpu_pool.child_env(mine, k))
    if cfg.trainer.devices * cfg.trainer.num_nodes > 1:
        return spawn_job(cfg, out)
    return run_worker(cfg, prepared, {"estimate": _estimate(cfg), **_launch_facts(cfg)})


def _launch_facts(cfg: RunConfig) -> dict:
    """What a new record keeps of how its run was launched (`launch`: the command a report prints for
    more of its cells starts from it) and, for a task outside the package, of the files it read there."""
    launched = launch()
    config_files = launched["config_files"] if launched else []
    return {"launch": launched, **outside_facts(cfg.task, config_files, model_code(cfg))}


def model_code(cfg: RunConfig) -> tuple[str, ...]:
    """The folders of the row's model and criterion where they are a researcher's (a module:Class outside
    the package): their records go stale when that code changes."""
    from ablate.config.arch import ARCHS, CRITERIA, researchers_folder

    pairs = ((cfg.model.arch, ARCHS), (cfg.model.criterion, CRITERIA))  # loaded already: the row checked them
    return tuple(dict.fromkeys(f for name, ours in pairs for f in researchers_folder(name, ours)))


def launch() -> dict | None:
    """What the command gave Hydra for this run: its own overrides (row and seed among them), the config
    folders typed on its command line (`hydra.searchpath`, as absolute `file://` entries; the study's own
    folder is found again by the study's rule, ablate.config.study, and is not among them), and the
    config files its defaults list composed from the researcher's folders (the study's and those typed).
    None outside a Hydra job."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return None
    hc = HydraConfig.get()
    project = package_conf().resolve()
    folders, typed = [], []  # the researcher's config folders in Hydra's order; those the command typed
    for source in hc.runtime.config_sources:
        path = Path(source.path).resolve() if source.schema == "file" else None
        if path is not None and path != project and path not in folders:
            folders.append(path)
            if source.provider != STUDY_PROVIDER:
                typed.append(path)
    return {
        "overrides": list(hc.overrides.task),
        "searchpath": [f"file://{f}" for f in typed],
        "config_files": _composed(hc, [project, *folders]),
    }


def _composed(hc, folders: list[Path]) -> list[str]:
    """The files of the researcher's folders (all of `folders` but the first, the project's) that this
    run's defaults list composed: each config is the first folder's that has it, as Hydra looks it up."""
    from hydra.core.global_hydra import GlobalHydra

    try:
        loader = GlobalHydra.instance().config_loader()
        overrides = [*hc.overrides.hydra, *hc.overrides.task]
        found = loader.compute_defaults_list(hc.job.config_name, overrides, hc.mode)
    except Exception:  # noqa: BLE001 - a record never fails for a note beside it: no files named
        return []
    out = []
    for d in found.defaults:
        files = [f / f"{d.config_path}.yaml" for f in folders] if d.config_path else []
        first = next((f for f in files if f.is_file()), None)
        if first is not None and first.parents[len(Path(d.config_path).parts) - 1] != folders[0]:
            out.append(str(first))
    return out


def stale_line(rec: dict) -> str | None:
    """What a command says of a finished run it skips that is stale: why, and how to train it again (None
    where it is current)."""
    if stale := why_stale(rec):
        return (
            f"[ablate] {rec['run_id']} is finished but stale ({stale}): skipped; the same command with "
            "resume=false trains it again (its folder kept beside)"
        )
    return None


def _estimate(cfg: RunConfig) -> dict | None:
    """The estimate of this run's time its plan line gives (ablate.jobs.plan), kept in its record; a run
    never waits on it: where it cannot be made, the record says none."""
    from ablate.jobs.plan import run_estimate

    try:
        return run_estimate(cfg).as_record()
    except Exception:  # noqa: BLE001 - an estimate is a note beside the run, never a reason to stop it
        return None


def record_rejection(cfg: RunConfig | None, e: BaseException) -> str | None:
    """A sweep member rejected before training (bad config or data) still gets a failed record, so the
    report shows it and a re-run of the sweep retries it. Returns its run id, where the config has one."""
    if cfg is None:
        return None
    try:
        path = identity.run_dir(cfg) / store.RECORD_NAME
        if status.on_disk(path) is None:  # else training wrote its own record
            status.transition(path, "reject", store.new_record(cfg), first_line(e))
        return identity.run_id(cfg)
    except Exception:  # noqa: BLE001 - the error itself has been printed; recording it is best effort
        return None


def settle_running(cfg: RunConfig | None, reason: str) -> None:
    """A run that stopped on an OSError (a full disk) may have failed to write its failure too, leaving its
    record `running`: now that the process no longer trains it, it says failed with the reason (where the
    disk lets it; the same command retries it either way)."""
    if cfg is None:
        return
    run = identity.run_dir(cfg)
    try:
        if not folder.is_running(run):
            status.settle(run / store.RECORD_NAME, "fail", reason)
    except Exception:  # noqa: BLE001 - best effort: the error itself has been printed
        pass
