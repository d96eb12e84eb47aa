"""Hydra launcher `hydra/launcher: ablate_slurm` (conf/hydra/launcher/slurm.yaml): one SLURM job per sweep
member through submitit, its request checked before submission, jobs requeued until their runs finish.
See slurm_launcher.py."""
