"""The package's files beside pyproject.toml's metadata: `ablate` and `hydra_plugins` as found, and the
configs the commands compose (conf/, at the repository's top level) inside the package as `ablate/conf`,
so an installed wheel carries them (ablate.config.study.package_conf finds either place)."""

from setuptools import find_namespace_packages, setup

setup(
    packages=[*find_namespace_packages(include=["ablate*", "hydra_plugins*"]), "ablate.conf"],
    package_dir={"ablate.conf": "conf"},
)
