"""Prepare a corpus once, before training: download, verify, clean, learn the shared vocabulary, encode.

    python -m ablate.prepare data=wmt14_en_de                   # WMT14 En-De, ~4.5M pairs (downloads ~1.7 GB)
    python -m ablate.prepare data=wmt14_en_de data.root=RAW data.cache_dir=CACHE data.spm_sentences=1000000
    python -m ablate.prepare --data wmt14_en_de --root RAW --cache CACHE
    python -m ablate.prepare data=multi30k [data.root=DIR]       # downloads Multi30k when DIR is absent/empty
    python -m ablate.prepare data=files data.train_src=T.en data.train_tgt=T.de data.dev_src=D.en
        data.dev_tgt=D.de                                         # big local files, streamed

Overrides are the `data.*` keys of conf/data/<name>.yaml and ablate.config.DataConfig (the `data.` prefix is
optional). The result is a Prepared folder (ablate.data.datamodule: spm.model, {train,dev,test}.npz,
{split}.{src,tgt}.txt, meta.json) under <cache>/data/<key>/; its path is printed last. A second call with
the same settings finds it and does nothing.

data.root for wmt14_en_de: a Prepared folder (used as is), or the folder that holds (or receives) the raw
archives and extracted text (default <cache>/raw/wmt14_en_de). data.train_src/train_tgt (and dev/test)
replace the downloaded training (dev/test) files with local line-aligned files.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from ablate.config import ConfigError, DataConfig
from ablate.data import binarize, wmt14
from ablate.data.sources import DataError
from ablate.data.tokenizer import VocabError, file_lock

CONF = Path(__file__).resolve().parents[1] / "conf" / "data"
PREP_VERSION = 1  # bump when the output of the streaming build changes
SPLITS = ("train", "dev", "test")


def is_prepared(folder: Path) -> bool:
    return all((Path(folder) / f).is_file() for f in ("meta.json", "spm.model", "train.npz", "dev.npz"))


def prepare(cfg: DataConfig, spec: wmt14.Spec | None = None, log=print) -> Path:
    """Build (once) and return the Prepared folder for this data config."""
    if cfg.name == "multi30k":
        return _prepare_multi30k(cfg, log)
    if cfg.name not in ("wmt14_en_de", "files"):
        raise ConfigError(f"data.name={cfg.name!r}: ablate.prepare handles wmt14_en_de, multi30k and files")
    if cfg.root and is_prepared(Path(cfg.root)):
        log(f"{cfg.root}: already prepared, nothing to do")
        return Path(cfg.root)
    spec = spec or wmt14.WMT14_EN_DE
    local = {
        split: (getattr(cfg, f"{split}_src"), getattr(cfg, f"{split}_tgt"))
        for split in SPLITS
        if getattr(cfg, f"{split}_src") or getattr(cfg, f"{split}_tgt")
    }
    for split, (s, t) in local.items():
        if not (s and t):
            raise ConfigError(f"data.{split}_src and data.{split}_tgt must be given together")
    if cfg.name == "files":
        if "train" not in local or "dev" not in local:
            raise ConfigError("data=files needs data.train_src/train_tgt and data.dev_src/dev_tgt")
        from_spec: set[str] = set()
    else:
        from_spec = {p.split for p in spec.parts} - set(local)

    key = _prepared_key(cfg, spec if from_spec else None, local)
    out = Path(cfg.cache_dir) / "data" / key
    with file_lock(out.parent / f".{key}.lock"):
        if is_prepared(out):
            log(f"{out}: already prepared, nothing to do")
            return out
        for stale in out.parent.glob(f".tmp-{key}-*"):  # an interrupted build (we hold the lock)
            shutil.rmtree(stale, ignore_errors=True)
        t0 = time.perf_counter()
        splits: dict[str, list[binarize.PairSource]] = {}
        extra: dict = {"prepare_version": PREP_VERSION}
        if from_spec:
            raw = Path(cfg.root) if cfg.root else Path(cfg.cache_dir) / "raw" / spec.name
            fetched = wmt14.fetch(spec, raw, cfg.src_lang, cfg.tgt_lang, log)
            for split in from_spec:
                splits[split] = [binarize.PairSource(s, t, n) for s, t, n in fetched.files[split]]
            extra["source"] = spec.name
            extra["raw_dir"] = str(raw)
        for split, (s, t) in local.items():
            splits[split] = [binarize.PairSource(Path(s), Path(t))]
        corpus_key = spec.key(cfg.src_lang, cfg.tgt_lang) if not local else None
        binarize.build(out, splits, settings(cfg), corpus_key=corpus_key, log=log, extra_meta=extra)
        log(f"prepared in {time.perf_counter() - t0:,.0f} s")
    return out


def settings(cfg: DataConfig) -> binarize.Settings:
    return binarize.Settings(
        cache_dir=cfg.cache_dir,
        vocab_size=cfg.vocab_size,
        model_type=cfg.spm_model_type,
        spm_sentences=cfg.spm_sentences,
        max_len=cfg.max_len,
        max_len_ratio=cfg.max_len_ratio,
        src_lang=cfg.src_lang,
        tgt_lang=cfg.tgt_lang,
    )


def _prepared_key(cfg: DataConfig, spec: wmt14.Spec | None, local: dict) -> str:
    """Cheap (no reading of the corpus): the settings that shape the output, the spec's verified identity
    and the size and mtime of local files."""
    fields = {
        k: getattr(cfg, k)
        for k in (
            "name",
            "src_lang",
            "tgt_lang",
            "vocab_size",
            "spm_model_type",
            "spm_sentences",
            "max_len",
            "max_len_ratio",
        )
    }
    fields["version"] = PREP_VERSION
    fields["spec"] = spec.key(cfg.src_lang, cfg.tgt_lang) if spec else None
    for split, pair in sorted(local.items()):
        for p in pair:
            st = Path(p).stat() if Path(p).is_file() else None
            fields[f"{split}:{Path(p).resolve()}"] = (st.st_size, st.st_mtime_ns) if st else None
    return "s" + hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:15]


def _prepare_multi30k(cfg: DataConfig, log) -> Path:
    from ablate.data.datamodule import prepare_corpus

    default = Path(cfg.cache_dir) / "raw" / "multi30k"
    root = Path(cfg.root) if cfg.root else default
    langs = (cfg.src_lang, cfg.tgt_lang)
    empty = not root.is_dir() or not any(root.iterdir())
    if empty or (root == default and not wmt14.multi30k_complete(root, langs)):
        wmt14.fetch_multi30k(root, langs, log)
    prepared = prepare_corpus(replace(cfg, root=str(root)))
    log(f"train with: data=multi30k data.root={root}")
    return prepared.root


# ----------------------------------------------------------------------------------------------------------
# Command line


def load_config(name: str, overrides: list[str]) -> DataConfig:
    """DataConfig defaults <- conf/data/<name>.yaml <- overrides (data.key=value or key=value)."""
    cfg = OmegaConf.structured(DataConfig)
    yaml = CONF / f"{name}.yaml"
    if yaml.is_file():
        cfg = OmegaConf.merge(cfg, OmegaConf.load(yaml))
    dotlist = [o.removeprefix("data.") for o in overrides]
    cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist(dotlist), {"name": name})
    obj = OmegaConf.to_object(cfg)
    assert isinstance(obj, DataConfig)
    return obj


def parse_args(argv: list[str]) -> tuple[str, list[str]]:
    p = argparse.ArgumentParser(prog="python -m ablate.prepare", description=__doc__.split("\n")[0])
    p.add_argument("overrides", nargs="*", help="data=NAME and data.KEY=VALUE overrides")
    p.add_argument("--data", help="corpus: wmt14_en_de, multi30k or files (same as data=NAME)")
    p.add_argument("--root", help="same as data.root=DIR")
    p.add_argument("--cache", help="same as data.cache_dir=DIR")
    a = p.parse_intermixed_args(argv)
    name = a.data
    rest = []
    for o in a.overrides:
        if "=" not in o:
            p.error(f"{o!r} is not KEY=VALUE")
        if o.startswith("data="):
            name = o.split("=", 1)[1]
        else:
            rest.append(o)
    if a.root:
        rest.append(f"root={a.root}")
    if a.cache:
        rest.append(f"cache_dir={a.cache}")
    if not name:
        p.error("say which corpus: data=wmt14_en_de (or --data)")
    return name, rest


def main(argv: list[str] | None = None) -> int:
    name, overrides = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        cfg = load_config(name, overrides)
        out = prepare(cfg)
    except (ConfigError, DataError, VocabError, OmegaConfBaseException) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    meta = json.loads((out / "meta.json").read_text())
    for split, m in meta["splits"].items():
        drops = ", ".join(f"{k} {v:,}" for k, v in sorted(m["dropped"].items())) or "none"
        print(
            f"{split:5s} {m['pairs']:>10,} pairs  {m['src_tokens']:>12,} + {m['tgt_tokens']:>12,} "
            f"wordpieces  dropped: {drops}"
        )
    print(f"vocabulary {meta['vocab_size']:,}  corpus_key {meta['corpus_key']}")
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
