"""Hydra launcher `hydra/launcher: ablate_gpus` (conf/hydra/launcher/gpus.yaml): joblib's launcher with
`jobs_per_device`. See gpus_launcher.py."""
