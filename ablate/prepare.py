"""Prepare a corpus once, before training: download, verify, clean, learn the shared vocabulary, encode.

    python -m ablate.prepare data=wmt14_en_de                   # WMT14 En-De, ~4.5M pairs (downloads ~1.7 GB)
    python -m ablate.prepare data=wmt14_en_de data.root=RAW data.cache_dir=CACHE data.spm_sentences=1000000
    python -m ablate.prepare --data wmt14_en_de --root RAW --cache CACHE
    python -m ablate.prepare data=multi30k [data.root=DIR]       # downloads Multi30k when DIR is absent/empty
    python -m ablate.prepare data=files data.train_src=T.en data.train_tgt=T.de data.dev_src=D.en
        data.dev_tgt=D.de                                         # big local files, streamed
    python -m ablate.prepare task=my_task:MyTask data=my_source   # a source a task brings (Task.sources)
    python -m ablate.prepare hydra.searchpath=[file://my/conf] experiment=mine   # the corpus a run trains on

Overrides are the `data.*` keys of conf/data/<name>.yaml and ablate.config.DataConfig (the `data.` prefix is
optional); any data.name of ablate.data.corpora.SOURCES can be prepared, and with task=NAME (as ablate.run
takes it: built-in, entry point or module:Class) any source that task brings. With experiment= (and
hydra.searchpath= for a researcher's config folder) the data config is the one `python -m ablate.run` with
the same keys composes, and its task's. The result is the folder
training uses (ablate.data.corpora.prepare_corpus: spm.model, {train,dev,test}.npz, {split}.{src,tgt}.txt,
meta.json) under <cache>/data/<key>/; its path is printed last. A second call with the same settings and the
same file contents finds it and does nothing; one that finds it incomplete (a file deleted) says which file
and prepares it again. Training prepares its corpus itself the same way, but never downloads Multi30k.

data.root for wmt14_en_de: a Prepared folder (used as is), or the folder that holds (or receives) the raw
archives and extracted text (default <cache>/raw/wmt14_en_de). data.train_src/train_tgt (and dev/test)
replace the downloaded training (dev/test) files with local line-aligned files.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from ablate.config import DEFAULT_TASK, ConfigError, DataConfig, RunConfig, typed_task_cfg
from ablate.config.study import current_study, enter, package_conf
from ablate.data.corpora import prepare_corpus, source
from ablate.data.sources import DataError
from ablate.data.tokenizer import VocabError

CONF = package_conf() / "data"


def load_config(name: str, overrides: list[str]) -> DataConfig:
    """DataConfig defaults <- conf/data/<name>.yaml (the study's, else the package's) <- overrides
    (data.key=value or key=value)."""
    cfg = OmegaConf.structured(DataConfig)
    study = current_study().conf
    folders = ([study / "data"] if study is not None else []) + [CONF]  # the study's first, as Hydra's
    yaml = next((f / f"{name}.yaml" for f in folders if (f / f"{name}.yaml").is_file()), None)
    if yaml is not None:
        cfg = OmegaConf.merge(cfg, OmegaConf.load(yaml))
    dotlist = [o.removeprefix("data.") for o in overrides]
    cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist(dotlist), {"name": name})
    obj = OmegaConf.to_object(cfg)
    assert isinstance(obj, DataConfig)
    return obj


# Keys of a run's command that name its config as `python -m ablate.run` composes it: with one of them
# the corpus is the one that run trains on (its experiment's data keys, the researcher's config folders).
RUN_KEYS = ("experiment", "hydra.searchpath")


def run_config(overrides: list[str]) -> RunConfig:
    """The config (its data, task and the task's own keys) of the run `python -m ablate.run <overrides>`
    names; the `data.` prefix of a data key is optional here too."""
    from hydra import compose, initialize_config_dir

    from ablate.config import register_configs, to_dataclass
    from ablate.run import experiment_problem

    if problem := experiment_problem(overrides):
        raise ConfigError(problem)
    fields = set(DataConfig.__dataclass_fields__)
    given = [f"data.{o}" if o.split("=", 1)[0] in fields else o for o in overrides]
    register_configs()
    try:
        with initialize_config_dir(str(CONF.parent), version_base="1.3"):
            cfg = to_dataclass(compose("config", overrides=given))
    except (ConfigError, OmegaConfBaseException):
        raise  # said in one line below
    except Exception as e:  # noqa: BLE001 - Hydra's composition errors, said in one line
        lines = str(e).strip().splitlines()
        raise ConfigError(lines[0] if lines else type(e).__name__) from None
    return cfg


def parse_args(argv: list[str]) -> tuple[str, list[str], str | None]:
    p = argparse.ArgumentParser(prog="python -m ablate.prepare", description=__doc__.split("\n")[0])
    p.add_argument("overrides", nargs="*", help="data=NAME, data.KEY=VALUE and task_cfg.KEY=VALUE overrides")
    p.add_argument("--data", help="corpus: wmt14_en_de, multi30k, files, ... (same as data=NAME)")
    p.add_argument("--root", help="same as data.root=DIR")
    p.add_argument("--cache", help="same as data.cache_dir=DIR")
    a = p.parse_intermixed_args(argv)
    name, task = a.data, None
    rest = []
    for o in a.overrides:
        if "=" not in o:
            p.error(f"{o!r} is not KEY=VALUE")
        if o.startswith("data="):
            name = o.split("=", 1)[1]
        elif o.startswith("task="):
            task = o.split("=", 1)[1]
        else:
            rest.append(o)
    if a.root:
        rest.append(f"root={a.root}")
    if a.cache:
        rest.append(f"cache_dir={a.cache}")
    if not name and not any(o.split("=", 1)[0] in RUN_KEYS for o in rest):
        p.error("say which corpus: data=wmt14_en_de (or --data), or a run's experiment=NAME")
    return name, rest, task


INTERRUPTED = "interrupted by Ctrl-C; nothing half-prepared is kept: the same command prepares the corpus"


def main(argv: list[str] | None = None) -> int:
    name, overrides, task = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        enter()  # the study's task imports by name
        from ablate.tasks import task_of

        if any(o.split("=", 1)[0] in RUN_KEYS for o in overrides):  # the corpus of a run's command
            run = run_config([f"task={task}"] * bool(task) + [f"data={name}"] * bool(name) + overrides)
            task_of(run.task)  # registers the data sources it brings
        else:
            if task:
                task_of(task)
            own = [o.removeprefix("task_cfg.") for o in overrides if o.startswith("task_cfg.")]
            cfg = load_config(name, [o for o in overrides if not o.startswith("task_cfg.")])
            source(cfg)  # a source no task brings is named first, before the task's own keys are read
            run = RunConfig(data=cfg, task=task or DEFAULT_TASK)
            run.task_cfg = typed_task_cfg(run.task, OmegaConf.to_container(OmegaConf.from_dotlist(own)))
        download = source(run.data).download
        prepared = prepare_corpus(replace(run, data=download(run, print)) if download else run)
    except KeyboardInterrupt:  # one line: a corpus folder appears whole or not at all (binarize.build)
        print(f"[ablate] stopped: {INTERRUPTED}", file=sys.stderr, flush=True)
        return 130
    except (ConfigError, DataError, VocabError, ValueError, OSError, OmegaConfBaseException) as e:
        # one line, as `python -m ablate.run` says it: the key, file or line at fault
        lines = str(e).strip().splitlines()
        print(f"error: {lines[0] if lines else type(e).__name__}", file=sys.stderr)
        return 2
    meta = prepared.meta
    for split, m in meta["splits"].items():
        drops = ", ".join(f"{k} {v:,}" for k, v in sorted(m["dropped"].items())) or "none"
        print(
            f"{split:5s} {m['pairs']:>10,} pairs  {m['src_tokens']:>12,} + {m['tgt_tokens']:>12,} "
            f"wordpieces  dropped: {drops}"
        )
    print(f"vocabulary {meta['vocab_size']:,}  corpus_key {meta['corpus_key']}")
    print(prepared.root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
