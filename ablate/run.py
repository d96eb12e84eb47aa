"""`python -m ablate.run [overrides]` and `python -m ablate.run -m model=A1,A2,C3 ...`: a thin Hydra entry
over
train(cfg) -> result record."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from ablate.config import ConfigError, RunConfig, register_configs
from ablate.sweep import member_config, outcome

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


def _record_rejection(cfg: RunConfig | None, e: BaseException) -> str | None:
    """A sweep member rejected before training (bad config or data) still gets a failed record, so the
    report shows it and a re-run of the sweep retries it. Returns its run id, where the config has one."""
    from ablate import results

    if cfg is None:
        return None
    try:
        path = results.run_dir(cfg) / results.RECORD_NAME
        if not path.is_file():  # else training wrote its own record
            results.atomic_write_json(
                path, results.new_record(cfg, "failed", reason=_first_line(e), finished=results.now())
            )
        return results.run_id(cfg)
    except Exception:  # noqa: BLE001 - the error itself has been printed; recording it is best effort
        return None


def _first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__


def _f1_line(m: dict) -> str:
    return (
        f"dev F1     {m['f1']:.2f}  (EVALB, COLLINS.prm; <= 40 words: {m.get('f1_le40', float('nan')):.2f}; "
        f"{m.get('n_repaired', 0)} outputs repaired)"
    )


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(dcfg: DictConfig) -> dict | None:
    """One run; in a sweep, returns its outcome (ablate.sweep) for the sweep's closing line."""
    from hydra.core.hydra_config import HydraConfig

    from ablate import results
    from ablate.train import train

    hc = HydraConfig.get()
    multirun = hc.mode.name == "MULTIRUN"
    launcher = hc.runtime.choices.get("hydra/launcher")
    cfg = None
    try:
        cfg = member_config(dcfg, list(hc.overrides.task), launcher, hc.sweep.dir if multirun else None)
        rec = train(cfg)
    except (ConfigError, ValueError, OSError) as e:
        print(f"error: {_first_line(e)}", file=sys.stderr)
        if multirun:  # the record says why; the other jobs of the sweep go on
            run_id = _record_rejection(cfg, e) or " ".join(hc.overrides.task)
            return outcome(run_id, "failed", _first_line(e))
        sys.exit(2)
    except Exception as e:  # noqa: BLE001 - one failing sweep member must not stop the others
        print(f"error: run failed: {type(e).__name__}: {_first_line(e)}", file=sys.stderr)
        if multirun:
            run_id = results.run_id(cfg) if cfg is not None else " ".join(hc.overrides.task)
            return outcome(run_id, "failed", f"{type(e).__name__}: {_first_line(e)}")
        sys.exit(1)
    rec["_dir"] = str(results.run_dir(cfg))
    print(summary(rec))
    m = rec.get("metrics", {})
    return outcome(rec["run_id"], rec["status"], rec.get("reason"), dev_bleu=m.get("dev_bleu"))


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
