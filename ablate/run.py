"""`python -m ablate.run [overrides]` and `python -m ablate.run -m model=A1,A2,C3 ...`: a thin Hydra entry
over
train(cfg) -> result record."""

from __future__ import annotations

import sys

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
        f"params     {rec['params']:,}  (at paper scale: {rec['params_paper_scale']:,})",
        f"steps      {rec.get('steps', 0)}  tokens/s {rec.get('tokens_per_s', 0):,.0f}  "
        f"wall {rec.get('wall_time_s', 0):.0f}s  device {rec.get('device', '?')}",
        f"files      {rec.get('_dir', '')}",
    ]
    return "\n".join(lines)


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(dcfg: DictConfig) -> float | None:
    from hydra.core.hydra_config import HydraConfig

    from ablate import results
    from ablate.train import train

    hc = HydraConfig.get()
    multirun = hc.mode.name == "MULTIRUN"
    try:
        cfg = to_dataclass(dcfg)
        if multirun and cfg.sweep_name is None:
            cfg.sweep_name = hc.sweep.dir.rstrip("/").split("/")[-1]
        rec = train(cfg)
    except (ConfigError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        if multirun:
            return None  # the record says why; the other jobs of the sweep go on
        sys.exit(2)
    except Exception as e:  # noqa: BLE001 - one failing sweep member must not stop the others
        print(f"error: run failed: {type(e).__name__}: {e}", file=sys.stderr)
        if multirun:
            return None
        sys.exit(1)
    rec["_dir"] = str(results.run_dir(cfg))
    print(summary(rec))
    return rec.get("metrics", {}).get("dev_bleu")


if __name__ == "__main__":
    main()
