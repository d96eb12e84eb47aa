"""The run's typed configuration: the dataclasses are the source of truth, Hydra YAML overrides them
(`register_configs` stores RunConfig as Hydra's schema; `to_dataclass` reads a composed or recorded
config back)."""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from omegaconf import DictConfig, OmegaConf, ValidationError

DEFAULT_TASK = "translation"  # the paper's; a record without a `task` field is of this task too


class ConfigError(ValueError):
    """A bad value; the message names the config key."""


@dataclass
class ArchConfig:
    """An architecture and its step count; the defaults are the paper's base model (Table 3, first row)."""

    n_layers: int = 6  # N
    decoder_layers: int | None = None  # the decoder's N where it differs (an option, not a Table 3 row)
    d_model: int = 512
    d_ff: int = 2048
    n_heads: int = 8  # h
    d_k: int = 64
    d_v: int = 64
    dropout: float = 0.1  # P_drop
    label_smoothing: float = 0.1  # eps_ls
    train_steps: int = 100_000  # the row's own column: 100K, 300K for big
    positional: str = "sinusoidal"  # sinusoidal (paper) | learned (row E) | rotary | none
    norm: str = "post"  # post (paper) | pre (an option)
    attn_dropout: float = 0.0
    relu_dropout: float = 0.0
    max_positions: int = 1024  # learned positions only
    strict_heads: bool = True  # require h * d_v = d_model, as every row of Table 3 has it
    # the components (options, not Table 3 rows; docs/models.md): a scale keeps their values
    ffn: str = "relu"  # relu (paper) | gelu | swish | glu | bilinear | geglu | reglu | swiglu
    norm_type: str = "layer"  # layer (paper's LayerNorm) | rms (RMSNorm)
    tie_embeddings: bool = True  # one matrix for source, target and output (paper) | false: three


PAPER_BASE = ArchConfig()


def default_results() -> str:
    """The folder of run folders when none is given: $ABLATE_RESULTS, else `results` (as RunConfig's)."""
    return os.environ.get("ABLATE_RESULTS", "results")


# This machine's cache (prepared corpora, vocabularies, downloads, content fingerprints), as a config reads it
# where nothing names another: $ABLATE_CACHE, else ~/.cache/ablate. A record never names it (store.py).
DEFAULT_CACHE = "${oc.env:ABLATE_CACHE,${oc.env:HOME}/.cache/ablate}"


def default_cache() -> str:
    """This machine's cache folder, as DEFAULT_CACHE resolves here and now."""
    if "ABLATE_CACHE" in os.environ:
        return os.environ["ABLATE_CACHE"]
    return os.path.join(os.environ.get("HOME") or os.path.expanduser("~"), ".cache", "ablate")


MIN_VOCAB = 8  # data.vocab_size: below this no corpus fits (4 special pieces: pad, unk, bos, eos)


@dataclass
class ModelConfig(ArchConfig):
    """One row of Table 3 at the paper's scale; a row file states only what differs from base."""

    name: str = "base"  # row id: base, A1..A4, B1, B2, C1..C7, D1..D4, E, big, or a user's own
    group: str = "base"  # Table 3 group: base, A, B, C, D, E, big, or a user's label
    # the model (config/arch.py): the package's Transformer, whose keys are the ones above, or a
    # researcher's module:Class, whose own keys are `args` (each a change from its config's defaults)
    arch: str = "transformer"
    args: dict[str, Any] = field(default_factory=dict)
    criterion: str = "label_smoothed"  # the training loss: the paper's (5.4), or a module:Class
    # the criterion's own keys beyond eps_ls (a loss weight), each a keyword of its class's constructor
    criterion_args: dict[str, Any] = field(default_factory=dict)
    # the run's keys this row sets beyond the model's (`schedule: {warmup_steps: 100}`, `optim: {...}`,
    # `data: {train_fraction: 0.1}`, `task_cfg: {...}`): applied over the recipe and the experiment, as
    # given under every recipe and scale; a key the command line gives wins (jobs.sweep.apply_row_run)
    run: dict[str, Any] = field(default_factory=dict)
    # keys given on the command line (model.KEY=...): taken as they are under any recipe, not as a change
    # from the paper's base; ablate.run fills it in
    explicit: list[str] = field(default_factory=list)


@dataclass
class ScaleConfig:
    """Shrinks a row for a smaller machine. `paper` is all ones."""

    name: str = "paper"
    width: float = 1.0  # multiplies d_model, d_ff, d_k, d_v
    depth: float = 1.0  # multiplies N (rounded, at least 1)
    steps: float = 1.0  # multiplies the row's train_steps


@dataclass
class DataConfig:
    name: str = "builtin"  # builtin | files | multi30k | wmt14_en_de | wsj | wsj_semi
    src_lang: str = "en"
    tgt_lang: str = "de"
    train_src: str | None = None  # data=files: line-aligned text, .gz allowed
    train_tgt: str | None = None
    dev_src: str | None = None
    dev_tgt: str | None = None
    test_src: str | None = None
    test_tgt: str | None = None
    root: str | None = None  # a folder of prepared/raw files (multi30k, wmt14)
    builtin_train: int = 30_000
    builtin_dev: int = 500
    builtin_test: int = 500
    builtin_seed: int = 1234
    vocab_size: int = 37_000  # shared source/target sentencepiece vocabulary (5.1: about 37000 BPE tokens)
    spm_model_type: str = "bpe"
    spm_sentences: int = 2_000_000  # sentences sampled to learn the vocabulary
    max_len: int = 256  # training pairs longer than this (wordpieces, either side) are dropped
    max_len_ratio: float = 9.0  # and pairs whose length ratio exceeds this
    cache_dir: str = DEFAULT_CACHE
    num_workers: int = 0
    # BPE-dropout (Provilkov et al. 2020; not in the paper, off): each epoch the training text is segmented
    # again with each merge dropped with this probability; dev/test and decoding keep the deterministic one
    bpe_dropout: float = 0.0
    bpe_dropout_sides: str = "both"  # both | src (the target side keeps the segmentation it is tested on)


@dataclass
class TrainConfig:
    max_tokens: int = 4096  # padded tokens per side per micro-batch on one device
    batch_tokens: int = 25_000  # target tokens per optimizer step over all devices (5.1: ~25000 + 25000)
    grad_clip: float = 0.0  # the paper states none
    max_steps: int | None = None  # overrides row.train_steps * scale.steps
    max_minutes: float | None = None  # stop at this much training time, restarts included
    # a schedule that decays to an end (cosine, linear): a time budget. The decay reaches 0 when this much
    # training time (dev passes included) is spent, or at the last step if that comes first, and training
    # stops there. The step it ends at depends on the machine's speed: such a run is not bit-reproducible
    # on another machine.
    budget_minutes: float | None = None
    val_every: int = 1000  # optimizer steps between dev evaluations
    # decode the dev set every N evaluations during training, for the task's metrics (0: only at the end)
    decode_every: int = 0
    checkpoint_every: int = 1000  # optimizer steps between checkpoints
    keep_checkpoints: int = 5  # newest step checkpoints kept (5 for base, 20 for big: checkpoint averaging)
    average_last: int = 0  # average the last N checkpoints at the end (Table 3 used none)
    on_nonfinite: str = "stop"  # stop | skip: what a NaN/inf loss does
    compile: bool = False  # torch.compile the model


# The optimizer and the schedule are Hydra `_target_` nodes (conf/optim/, conf/schedule/), built partially
# and completed by the run (ablate/nn/optim.py). Their keys are typed by the target's own signature
# (config/targets.py), not by a dataclass here: `optim=sgd` takes momentum and nesterov, Adam betas and eps.
# None in a config means the paper's (a record written before the groups existed reads so).
PAPER_OPTIM: dict[str, Any] = {
    "_target_": "torch.optim.Adam",  # 5.3: Adam, beta1 0.9, beta2 0.98, epsilon 1e-9
    "_partial_": True,
    "betas": [0.9, 0.98],
    "eps": 1e-9,
}
PAPER_SCHEDULE: dict[str, Any] = {
    "_target_": "ablate.nn.optim.InverseSqrt",  # equation 3, warmup 4000
    "_partial_": True,
    "warmup_steps": 4000,
    "scale": 1.0,
}


@dataclass
class DecodeConfig:
    method: str = "beam"  # beam | greedy
    beam: int = 4  # 6.1
    alpha: float = 0.6  # GNMT length penalty
    max_len_a: float = 1.0  # max output length = a * input length + b (6.1: input + 50)
    max_len_b: int = 50
    dev_limit: int | None = None  # decode only the first N dev sentences (None: all)


@dataclass
class TrainerConfig:
    accelerator: str = "auto"  # cpu | gpu | auto
    devices: int = 1
    num_nodes: int = 1
    # 32-true (the paper's) | bf16-mixed | 16-mixed | auto (bf16-mixed where the device has native bf16)
    precision: str = "32-true"
    strategy: str = "auto"  # auto (ddp for devices > 1, one process group per job) | ddp | ddp_spawn
    progress_bar: bool = True
    threads: int | None = None  # torch intra-op threads on CPU (None: torch's default)
    # hydra/launcher=gpus: the device ids the jobs of a sweep share, each job taking `devices` of them
    # ([]: every GPU of the machine; None: no sharing, the job uses the devices Lightning picks)
    device_pool: list[int] | None = None


@dataclass
class LoggerConfig:
    kind: str = "wandb"  # wandb | csv | none
    project: str = "ablate"
    entity: str | None = None
    group: str | None = None  # default: the sweep (multirun) name
    mode: str = "auto"  # auto (online only with credentials and network) | online | offline | disabled
    probe_timeout_s: float = 3.0
    samples: int = 8  # sample translations logged as a table
    # the run's checkpoints as W&B model artifacts at the end of training (Lightning's log_model=True):
    # ~250 MB each at paper size (base), so off unless asked for
    log_checkpoints: bool = False


@dataclass
class TaskConfig:
    """A task's own keys (`task_cfg.*`): a task's `config` subclasses it; a task without keys has this."""


@dataclass
class RunConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    scale: ScaleConfig = field(default_factory=ScaleConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    optim: Any = None  # the optimizer's `_target_` node; None: PAPER_OPTIM
    schedule: Any = None  # the learning-rate schedule's `_target_` node; None: PAPER_SCHEDULE
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    recipe: str = "paper"  # the recipe's name (conf/recipe/); its values are in base, train, data, decode
    base: ArchConfig = field(default_factory=ArchConfig)  # the recipe's base architecture
    seed: int = 1
    task: str = DEFAULT_TASK  # a task of ablate.tasks.BUILTIN, an entry point, or an importable module:Class
    # the task's own keys: its `Task.config` dataclass once typed (`to_dataclass`), a mapping as composed
    task_cfg: Any = field(default_factory=lambda: TaskConfig())
    results_dir: str = "${oc.env:ABLATE_RESULTS,results}"  # where run folders and records go
    sweep_name: str | None = None  # set by the launcher; W&B group
    resume: bool = True  # same identity: skip if finished, resume if interrupted
    experiment: str | None = None
    # the keys the command line set beyond the experiment or preset, the row and the seed, as key=value
    # (`schedule.warmup_steps=10`): what a sweep of such keys varies; ablate.run fills it in
    varies: list[str] = field(default_factory=list)


# Keys that moved, by their old name: its new name, and the value a config left it at. A record keeps the
# names it was written with: `migrate` reads it in the current layout (a value left at the default is
# dropped: the new layout's default is the same), and a run's identity hashes the old names
# (records.identity), so that every run keeps its id.
RENAMED: dict[str, tuple[str, Any]] = {
    "train.bleu_every": ("train.decode_every", 0),
    "data.treebank_dir": ("task_cfg.treebank_dir", None),
    "data.treebank_builtin": ("task_cfg.treebank_builtin", False),
    "data.silver_trees": ("task_cfg.silver_trees", None),
    "data.constituent_pairs": ("task_cfg.constituent_pairs", False),
    "decode.well_formed": ("task_cfg.well_formed", False),
}


# The optimizer's and the schedule's keys as `train` held them before their groups (`optim`, `schedule`),
# with their defaults. A record of that layout reads as the same Adam and schedule (`_legacy_nodes`), and a
# run expressible in it is named by them (records.identity), so that every run keeps its id.
LEGACY_TRAIN = {
    "warmup_steps": 4000,
    "lr_schedule": "inverse_sqrt",
    "lr_scale": 1.0,
    "lr_peak": 7e-4,
    "adam_betas": [0.9, 0.98],
    "adam_eps": 1e-9,
}


def _legacy_nodes(out: dict[str, Any]) -> None:
    """`train`'s legacy keys of a record made into its `optim` and `schedule` nodes, in place."""
    train = out.get("train")
    if not isinstance(train, dict) or not set(LEGACY_TRAIN) & set(train):
        return
    old = {k: train.pop(k, v) for k, v in LEGACY_TRAIN.items()}
    if not out.get("optim"):
        out["optim"] = {**PAPER_OPTIM, "betas": list(old["adam_betas"]), "eps": old["adam_eps"]}
    if not out.get("schedule"):
        sched = {**PAPER_SCHEDULE, "warmup_steps": old["warmup_steps"], "scale": old["lr_scale"]}
        if old["lr_schedule"] == "cosine":  # its rate was lr_peak, whatever lr_scale said
            sched |= {"_target_": "ablate.nn.optim.Cosine", "peak": old["lr_peak"]}
        out["schedule"] = sched


def migrate(config: dict[str, Any]) -> dict[str, Any]:
    """A config (a record's, a composed one) in the current layout: the keys of RENAMED under their new
    names, `train`'s optimizer and schedule keys as the `optim` and `schedule` nodes. A copy; a config in
    the current layout comes back equal."""
    out = copy.deepcopy(config)
    _legacy_nodes(out)
    for old, (new, default) in RENAMED.items():
        group, key = old.split(".")
        node = out.get(group)
        if not isinstance(node, dict) or key not in node:
            continue
        value = node.pop(key)
        new_group, new_key = new.split(".")
        if value != default:
            out.setdefault(new_group, {}).setdefault(new_key, value)
    return out


# The dataclass of a task's own keys, by task name (None: a task without keys). ablate.tasks sets it: a
# task is loaded by name in a layer above this one.
task_config_class: Callable[[str], type | None] | None = None


def typed_task_cfg(task: str, given: Any) -> Any:
    """`task_cfg` as the task's dataclass: the keys given over its defaults, each checked against its type;
    an unknown key or a bad value is refused in one line naming `task_cfg.<key>`."""
    if isinstance(given, TaskConfig):
        return given
    given = dict(given or {})
    if task_config_class is None:  # ablate.tasks not imported: nothing here knows the task's keys yet
        return given
    try:
        cls = task_config_class(task)
    except ValueError:  # a task that does not load: refused where a run starts; a record reads as written
        return given
    cls = cls or TaskConfig
    known = [f.name for f in fields(cls)]
    for key in given:
        if key not in known:
            keys = ", ".join(known) or "it has no keys of its own"
            raise ConfigError(f"task_cfg.{key}: not a key of task={task} ({keys})")
    try:
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(cls), given))
    except ValidationError as e:
        key = e.full_key or next(iter(given), "")
        raise ConfigError(
            f"task_cfg.{key}={given.get(key)!r}: {str(e.msg).splitlines()[0]} (task={task})"
        ) from None


# Nodes whose keys are typed elsewhere: a researcher's model's (`model.args`, config/arch.py), a task's
# (`task_cfg`, typed_task_cfg), the optimizer's and the schedule's (their signature, config/targets.py).
_TYPED_ELSEWHERE = {"model.args", "model.run", "model.criterion_args", "task_cfg", "optim", "schedule"}


def check_known_keys(node: Any, obj: Any = None, prefix: str = "") -> None:
    """Every key of a composed config is one its dataclass has: a key nothing reads (`+train.optimizer=sgd`,
    a misspelt `+model.tie_embedding`) is refused in one line naming it and the nearest known keys, never
    trained past and left out of the run's identity."""
    import difflib

    obj = RunConfig() if obj is None else obj
    known = {f.name: getattr(obj, f.name) for f in fields(obj)}
    # a composed DictConfig, or the dataclass OmegaConf.to_object made of it (a `+key` is an attribute)
    items = vars(node) if hasattr(node, "__dataclass_fields__") else {k: node[k] for k in node}
    for key, value in items.items():
        dotted = f"{prefix}{key}"
        if dotted in _TYPED_ELSEWHERE:
            continue
        if key not in known:
            near = difflib.get_close_matches(str(key), list(known), n=3)
            hint = (
                f"did you mean {' or '.join(prefix + n for n in near)}?"
                if near
                else f"its keys: {', '.join(known)}"
            )
            if key in (
                "optimizer",
                "lr_schedule",
                "warmup_steps",
                "lr_scale",
                "lr_peak",
                "adam_betas",
                "adam_eps",
            ):
                hint += "; the optimizer and the schedule are the groups optim= and schedule="
            raise ConfigError(f"{dotted}: not a key of the run ({hint})")
        if hasattr(known[key], "__dataclass_fields__"):
            check_known_keys(value, known[key], dotted + ".")


def register_configs() -> None:
    from hydra.core.config_store import ConfigStore

    node = OmegaConf.structured(RunConfig)
    node.task_cfg = {}
    OmegaConf.set_struct(node.task_cfg, False)  # a task's own keys are typed once the task is known
    ConfigStore.instance().store(name="schema", node=node)


def to_dataclass(cfg: DictConfig | dict | RunConfig) -> RunConfig:
    """The typed config of a composed or recorded one (an earlier layout migrated), the task's own keys
    typed by its `config` dataclass."""
    if isinstance(cfg, RunConfig):
        cfg.task_cfg = typed_task_cfg(cfg.task, cfg.task_cfg)
        cfg.optim = copy.deepcopy(cfg.optim or PAPER_OPTIM)
        cfg.schedule = copy.deepcopy(cfg.schedule or PAPER_SCHEDULE)
        return cfg
    plain = OmegaConf.to_container(cfg) if isinstance(cfg, DictConfig) else cfg
    plain = migrate(dict(plain))
    given = plain.pop("task_cfg", None)
    obj = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(RunConfig), plain))
    assert isinstance(obj, RunConfig)
    obj.optim = copy.deepcopy(obj.optim or PAPER_OPTIM)
    obj.schedule = copy.deepcopy(obj.schedule or PAPER_SCHEDULE)
    obj.task_cfg = typed_task_cfg(obj.task, given)
    return obj


def flat_fields(obj: Any, prefix: str = "") -> dict[str, Any]:
    """{'model.d_model': 512, ...} for a dataclass tree."""
    out: dict[str, Any] = {}
    for f in fields(obj):
        v = getattr(obj, f.name)
        key = f"{prefix}{f.name}"
        if hasattr(v, "__dataclass_fields__"):
            out.update(flat_fields(v, key + "."))
        else:
            out[key] = v
    return out
