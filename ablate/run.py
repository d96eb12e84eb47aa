"""`python -m ablate.run [overrides]` and `python -m ablate.run -m model=A1,A2,C3 ...`: a thin Hydra entry
over
train(cfg) -> result record."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from ablate.config import ConfigError, register_configs, to_dataclass

register_configs()


def summary(rec: dict) -> str:
    m = rec.get("metrics", {})
    lines = [
        f"run        {rec['run_id']}  ({rec['status']})",
        f"dev PPL    {m.get('dev_ppl', float('nan')):.3f}  (per wordpiece, no label smoothing)",
        f"dev BLEU   {m.get('dev_bleu', float('nan')):.2f}  {m.get('dev_bleu_signature', '')}",
        *([_f1_line(m)] if "f1" in m else []),
        f"params     {rec.get('params', 0):,}  (at paper scale: {rec.get('params_paper_scale', 0):,})",
        f"steps      {rec.get('steps', 0)}  tokens/s {rec.get('tokens_per_s', 0):,.0f}  "
        f"wall {rec.get('wall_time_s', 0):.0f}s  device {rec.get('device', '?')}",
        f"files      {rec.get('_dir', '')}",
    ]
    return "\n".join(lines)


def _record_rejection(dcfg: DictConfig, e: BaseException) -> None:
    """A sweep member rejected before training (bad config or data) still gets a failed record, so the
    report shows it and a re-run of the sweep retries it."""
    from ablate import results

    try:
        cfg = to_dataclass(dcfg)
        path = results.run_dir(cfg) / results.RECORD_NAME
        if path.is_file():
            return  # training wrote its own record
        results.atomic_write_json(
            path, results.new_record(cfg, "failed", reason=_first_line(e), finished=results.now())
        )
    except Exception:  # noqa: BLE001 - the error itself has been printed; recording it is best effort
        pass


def explicit_model_keys(overrides: list[str]) -> list[str]:
    """The row keys a command line sets (`model.dropout=0.3`): they win over the row's relative meaning
    under a recipe's own base (config.row_arch)."""
    keys = []
    for o in overrides:
        key = o.lstrip("+~").split("=", 1)[0]
        if key.startswith("model.") and key.count(".") == 1:
            keys.append(key.removeprefix("model."))
    return sorted(set(keys))


def _first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__


def _f1_line(m: dict) -> str:
    return (
        f"dev F1     {m['f1']:.2f}  (EVALB, COLLINS.prm; <= 40 words: {m.get('f1_le40', float('nan')):.2f}; "
        f"{m.get('n_repaired', 0)} outputs repaired)"
    )


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(dcfg: DictConfig) -> float | None:
    from hydra.core.hydra_config import HydraConfig

    from ablate import results
    from ablate.train import train

    hc = HydraConfig.get()
    multirun = hc.mode.name == "MULTIRUN"
    try:
        cfg = to_dataclass(dcfg)
        cfg.model.explicit = sorted(set(cfg.model.explicit) | set(explicit_model_keys(hc.overrides.task)))
        if hc.runtime.choices.get("hydra/launcher") == "gpus" and cfg.trainer.device_pool is None:
            cfg.trainer.device_pool = []  # every GPU of the machine (devices.pool)
        if multirun and cfg.sweep_name is None:
            cfg.sweep_name = hc.sweep.dir.rstrip("/").split("/")[-1]
        rec = train(cfg)
    except (ConfigError, ValueError, OSError) as e:
        print(f"error: {_first_line(e)}", file=sys.stderr)
        if multirun:
            _record_rejection(dcfg, e)
            return None  # the record says why; the other jobs of the sweep go on
        sys.exit(2)
    except Exception as e:  # noqa: BLE001 - one failing sweep member must not stop the others
        print(f"error: run failed: {type(e).__name__}: {_first_line(e)}", file=sys.stderr)
        if multirun:
            return None
        sys.exit(1)
    rec["_dir"] = str(results.run_dir(cfg))
    print(summary(rec))
    m = rec.get("metrics", {})
    return m.get("f1") if cfg.task == "parsing" else m.get("dev_bleu")


def results_dir_problem(argv: list[str]) -> str | None:
    """Hydra makes its folder under results_dir before any code of ours runs, so a results_dir it cannot
    create ends in a traceback of Hydra's: check it first and say it in one line."""
    value = next((a.split("=", 1)[1] for a in argv if a.lstrip("+").startswith("results_dir=")), "results")
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


if __name__ == "__main__":
    if problem := results_dir_problem(sys.argv[1:]):
        print(f"error: {problem}", file=sys.stderr)
        sys.exit(2)
    main()
