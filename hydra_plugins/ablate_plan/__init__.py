"""Hydra launcher `hydra/launcher=plan` (what `--plan` selects): each job's plan line, nothing trained. See
plan_launcher.py."""
