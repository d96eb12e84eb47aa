"""The study's configs on Hydra's search path: a command of ablate's (its primary config the package's
conf/) run in a study (ablate.config.study's rule: `$ABLATE_STUDY`, else the nearest `study.yaml` up from the
current folder) finds the study's experiments and rows first, with no `hydra.searchpath` typed, and imports
its modules by name (`study.enter`). Other Hydra apps are left alone. Imported by Hydra's plugin scan: free
of torch, no `from __future__`."""

import os
from pathlib import Path

from hydra.core.config_search_path import ConfigSearchPath, SearchPathQuery
from hydra.plugins.search_path_plugin import SearchPathPlugin

from ablate.config.study import SEARCH_PROVIDER as PROVIDER
from ablate.config.study import enter, package_conf
from hydra_plugins.ablate_sweeper.row_groups import GROUP_SCHEME
from hydra_plugins.ablate_sweeper.rows import MODEL_GROUP


def is_ablate(search_path: ConfigSearchPath) -> bool:
    """Whether the app's primary config folder is the package's conf/ (an ablate command)."""
    ours = package_conf().resolve()
    for el in search_path.get_path():
        path = (el.path or "").removeprefix("file://")  # a config_path given absolute has no scheme
        if el.provider == "main" and path and "://" not in path:
            return Path(path).resolve() == ours
    return False


class StudySearchPath(SearchPathPlugin):
    """`file://<study>/conf` (or the study's `pkg://` entry) before the app's own conf/; `ablaterows://` after
    it for the groups of the study's rows (hydra_plugins.ablate_sweeper.row_groups)."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        if not is_ablate(search_path):
            return
        study = enter()
        for entry in study.searchpath:
            search_path.prepend(PROVIDER, entry, anchor=SearchPathQuery(provider="main"))
        if study.conf is not None and os.path.isdir(os.path.join(study.conf, MODEL_GROUP)):
            search_path.append(PROVIDER, f"{GROUP_SCHEME}://{study.conf}")
