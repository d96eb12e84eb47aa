"""Hydra search path plugin: the configs of the study a command is in (ablate.config.study) before the
package's own. See study_searchpath.py."""
