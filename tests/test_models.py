"""A researcher's own model and criterion (docs/models.md): the registry resolves them as `task=` is
resolved, the Transformer goes through it with the identities of its runs unchanged, a model's own keys
are checked and scaled as it declares them, its search state agrees with its teacher-forced pass, its
criterion's auxiliary term is what it says, and what cannot load or lacks what a command needs is refused
in one line (exit 2)."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from terminal import AS_TYPED

from ablate.config import ConfigError, ModelConfig, RunConfig, ScaleConfig, build_model, validate, varied
from ablate.config.arch import SEARCH, TRAINING, arch_of, criterion_of, model_config, own_values
from ablate.nn.decode import CachedStepper, beam_search
from ablate.nn.loss import LabelSmoothedCrossEntropy, label_smoothed_loss
from ablate.nn.model import Transformer, count_parameters
from ablate.records import identity

ROOT = Path(__file__).resolve().parents[1]
USER_MODEL = ROOT / "tests" / "user_model"
sys.path.insert(0, str(USER_MODEL))
GRU = "gru_model:GRUSeq2Seq"
ZLOSS = "gru_model:ZLossCrossEntropy"


def gru_cfg(args=None, scale=None, **model) -> RunConfig:
    model = {"name": "g", "group": "gru", "arch": GRU, "criterion": ZLOSS, **model}
    row = ModelConfig(args=dict(args or {}), **model)
    return RunConfig(model=row, scale=scale or ScaleConfig())


def test_the_transformer_is_the_registrys_default_and_names_no_new_key():
    cfg = RunConfig()
    assert arch_of("transformer").cls is Transformer and isinstance(build_model(cfg, 50), Transformer)
    # what check_arch takes as given for the package's own model and loss, without loading them
    assert not arch_of("transformer").lacks(TRAINING + SEARCH) and criterion_of("label_smoothed")
    assert identity.identity_dict(cfg) == {}  # the defaults name no key: base's id is what it was
    a1 = identity.identity_dict(replace(cfg, model=ModelConfig(name="A1", group="A", n_heads=1, d_k=512)))
    assert a1 == {"model.name": "A1", "model.group": "A", "model.n_heads": 1, "model.d_k": 512}


def test_a_researchers_model_and_its_keys_are_in_its_identity():
    ident = identity.identity_dict(gru_cfg({"layers": 1}))
    assert ident["model.arch"] == GRU and ident["model.criterion"] == ZLOSS
    assert ident["model.args"] == {"layers": 1}
    assert identity.run_id(gru_cfg({"layers": 1})) != identity.run_id(gru_cfg())


def test_a_models_widths_and_depths_take_the_scales_ratios_and_rates_do_not():
    scale = ScaleConfig(name="s", width=0.25, depth=0.5, steps=1.0)
    v = own_values(gru_cfg({"d_model": 64, "layers": 4, "dropout": 0.3}, scale))
    assert v == {"d_model": 16, "layers": 2, "dropout": 0.3, "attention": True}
    given = gru_cfg({"d_model": 64}, scale, explicit=["args.d_model"])  # the command line's: as given
    assert own_values(given)["d_model"] == 64
    assert model_config(gru_cfg(scale=scale), 300).vocab_size == 300  # from the data
    assert varied(gru_cfg({"attention": False, "layers": 2}).model) == ["arch", "criterion", "args.attention"]


@pytest.mark.parametrize(
    "change, says",
    [
        (dict(arch="nope_module:Model"), "model.arch=nope_module:Model: cannot load it (ModuleNotFoundError"),
        (dict(arch="Transformer"), "model.arch=Transformer: not one of the package's (transformer) nor a"),
        (dict(arch="gru_model:GRUConfig"), "model.arch=gru_model:GRUConfig: not a torch.nn.Module subclass"),
        (dict(criterion="gru_model:Nope"), "model.criterion=gru_model:Nope: cannot load it (AttributeError"),
        (dict(args={"layer": 1}), "model.args.layer (set by row g): not a key of GRUConfig (did you mean "),
        (dict(args={"vocab_size": 9}), "model.args.vocab_size (set by row g): not a key of GRUConfig"),
        # each value of the model's own keys is of its config's type (an int is a number; a bool is not)
        (
            dict(args={"layers": "abc"}),
            "model.args.layers='abc' (set by row g): not an integer, the type of ",
        ),
        (dict(args={"layers": 2.5}), "model.args.layers=2.5 (set by row g): not an integer, the type of "),
        (dict(args={"dropout": True}), "model.args.dropout=True (set by row g): not a number, the type of "),
        (
            dict(args={"attention": "no"}),
            "model.args.attention='no' (set by row g): not a boolean, the type ",
        ),
        (
            dict(args={"d_model": "x"}, explicit=["args.d_model"]),
            "model.args.d_model='x' (set by the command ",
        ),
        (dict(d_k=32), "model.d_k: a key of the transformer; model.arch=gru_model:GRUSeq2Seq takes its own"),
    ],
)
def test_what_cannot_load_or_is_not_its_models_key_is_one_line(change, says):
    cfg = gru_cfg()
    cfg.model = replace(cfg.model, **change)
    with pytest.raises(ConfigError) as e:
        validate(cfg)
    assert str(e.value).startswith(says) and "\n" not in str(e.value)


def test_a_transformer_row_takes_no_args():
    cfg = RunConfig(model=ModelConfig(args={"d_model": 64}))
    with pytest.raises(ConfigError, match=r"^model.args.d_model: model.arch=transformer takes its keys as"):
        validate(cfg)


def test_a_width_or_depth_the_scale_rounds_to_the_bases_is_refused_naming_the_key():
    tiny = ScaleConfig(name="tiny", width=0.0625, depth=0.1667, steps=0.0002)
    with pytest.raises(ConfigError) as e:
        validate(gru_cfg({"layers": 1}, tiny))
    assert str(e.value) == (
        "row g under recipe=paper scale=tiny: model.args.layers=1 gives 1, the same as its base's, so the "
        "row would not differ from its base in layers (choose another scale, or set the key on the command "
        "line)"
    )
    validate(gru_cfg({"layers": 1}, replace(tiny, depth=1.0)))  # at full depth it keeps its meaning
    validate(gru_cfg({"attention": False}, tiny))  # not a size: no ratio can take it away


def _module_file(tmp_path, body: str) -> str:
    (tmp_path / "my_models.py").write_text(textwrap.dedent(body))
    sys.path.insert(0, str(tmp_path))
    return "my_models"


def test_a_model_that_declares_a_key_its_config_lacks_or_cannot_be_searched_is_refused(tmp_path):
    mod = _module_file(
        tmp_path,
        """
        from gru_model import GRUSeq2Seq

        class Typo(GRUSeq2Seq):
            widths = ("d_modle",)

        class TrainOnly(GRUSeq2Seq):
            step = None
        """,
    )
    with pytest.raises(ConfigError, match=r"^model.arch=my_models:Typo: widths names 'd_modle', not a key"):
        arch_of(f"{mod}:Typo")
    with pytest.raises(ConfigError) as e:
        validate(gru_cfg(arch=f"{mod}:TrainOnly"))
    assert str(e.value).startswith(
        f"model.arch={mod}:TrainOnly: it has no step, and a run's dev evaluation searches (the search"
    )


@pytest.mark.parametrize("attention", [True, False])
def test_the_grus_search_state_agrees_with_its_teacher_forced_pass(attention):
    """Step by step on its cache, each beam row reordered as a search does, the GRU gives the logits of
    its training pass over the same prefix: beam search searches the model it trained."""
    torch.manual_seed(0)
    model = build_model(gru_cfg({"d_model": 16, "attention": attention}), 30).eval()
    src = torch.tensor([[5, 6, 7, 2], [8, 9, 2, 0]])
    tgt = torch.tensor([[1, 11, 12, 13], [1, 14, 15, 16]])
    want = model.logits(model(src, tgt))  # (2, 4, V)
    stepper = CachedStepper(model)
    cache = stepper.start(src, 4, beams=2)  # rows 0, 1: sentence 0; rows 2, 3: sentence 1
    cache = stepper.reorder(cache, torch.tensor([1, 0, 3, 2]), same_source=True)
    for t in range(4):
        got = stepper.step(tgt[:, t].repeat_interleave(2), cache)  # (4, V)
        torch.testing.assert_close(got[0::2], want[:, t], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(got[1::2], want[:, t], rtol=1e-5, atol=1e-5)
    out = beam_search(stepper, src, torch.tensor([4, 3]), 1, 2, beam=3)
    assert len(out.tokens) == 2 and torch.isfinite(out.scores).all()


def test_the_default_criterion_is_the_papers_loss_and_zloss_adds_its_term():
    torch.manual_seed(0)
    model = build_model(gru_cfg({"d_model": 8}), 20)
    hidden = torch.randn(2, 3, 8)
    target = torch.tensor([[4, 5, 0], [6, 7, 8]])
    real = target != 0
    logits = model.logits(hidden[real])
    want = label_smoothed_loss(logits, target[real], 0.1, 0)
    plain = LabelSmoothedCrossEntropy(0.1, 0)(model, hidden, target)
    torch.testing.assert_close(plain.total(), want.smoothed)
    assert plain.aux == {} and int(plain.tokens) == 5
    from gru_model import ZLossCrossEntropy

    z = ZLossCrossEntropy(0.1, 0)(model, hidden, target)
    lse = torch.log(torch.exp(logits.double()).sum(-1))  # log Z of each real token, by hand
    torch.testing.assert_close(z.aux["zloss"].double(), 1e-3 * (lse**2).sum(), rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(z.total(), want.smoothed + z.aux["zloss"])
    torch.testing.assert_close(z.nll, want.nll)  # perplexity's NLL: no smoothing, no auxiliary term


def test_the_transformers_criterion_projects_through_its_output_matrix():
    """Its fast path (the kept logits buffer over the tied embedding) is the plain projection's loss."""
    torch.manual_seed(0)
    model = build_model(replace(RunConfig(), scale=ScaleConfig(width=1 / 16, depth=1 / 6)), 40)
    hidden = torch.randn(2, 3, model.cfg.d_model, requires_grad=True)
    target = torch.tensor([[4, 5, 0], [6, 7, 8]])
    real = target != 0
    want = label_smoothed_loss(model.logits(hidden[real]), target[real], 0.1, 0)
    got = LabelSmoothedCrossEntropy(0.1, 0)(model, hidden, target)
    torch.testing.assert_close(got.smoothed, want.smoothed)


def _run(args, env, ok=(0,), module=True):
    # a session of its own: the run's Ctrl-C (ABLATE_FAULT_SIGINT_AT_STEP) does not reach pytest
    p = subprocess.run([sys.executable, *["-m"] * module, *args], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=600, **AS_TYPED)  # fmt: skip
    assert p.returncode in ok, (args, p.returncode, p.stderr[-3000:])
    return p


def test_the_command_line_refuses_a_model_that_cannot_load_and_a_row_key_in_one_line(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(USER_MODEL), ABLATE_RESULTS=str(tmp_path / "r"))
    common = [f"hydra.searchpath=[file://{USER_MODEL}/conf]", "logger=none", "recipe=tiny", "scale=tiny"]
    p = _run(["ablate.run", *common, "model=gru", "model.arch=gru_model:Nope"], env, ok=(2,))
    assert p.stderr.strip().splitlines()[-1] == (
        "error: model.arch=gru_model:Nope: cannot load it (AttributeError: module 'gru_model' has no "
        "attribute 'Nope')"
    )
    p = _run(["ablate.run", *common, "model=gru_1layer"], env, ok=(2,))
    last = p.stderr.strip().splitlines()[-1]
    assert "model.args.layers=1 gives 1, the same as its base's" in last and "Traceback" not in p.stderr
    assert not list(tmp_path.rglob("record.json"))


def test_a_row_files_bad_value_or_misspelt_key_names_the_file_and_the_type(tmp_path):
    """A key a row file sets under model.args, wrong in type or in name: one line naming the file that set
    it (a row on its defaults list included), the key and the type; exit 2, no record."""
    rows = tmp_path / "conf" / "model"
    rows.mkdir(parents=True)
    (rows / "gru_wide.yaml").write_text(
        "defaults:\n  - gru\n  - _self_\nname: gru_wide\nargs: {d_model: wide}\n"
    )
    (rows / "gru_two.yaml").write_text(
        "defaults:\n  - gru_wide\n  - _self_\nname: gru_two\nargs: {layer: 2}\n"
    )
    env = dict(os.environ, PYTHONPATH=str(USER_MODEL), ABLATE_RESULTS=str(tmp_path / "r"))
    search = f"hydra.searchpath=[file://{tmp_path / 'conf'},file://{USER_MODEL}/conf]"
    for row, said in [
        ("gru_wide", f"error: model.args.d_model='wide' (set by row file {rows / 'gru_wide.yaml'}): not an "
                     "integer, the type of GRUConfig.d_model"),
        ("gru_two", f"error: model.args.d_model='wide' (set by row file {rows / 'gru_wide.yaml'}): not an "
                    "integer, the type of GRUConfig.d_model"),  # the row it builds on set it
    ]:  # fmt: skip
        p = _run(["ablate.run", search, "experiment=gru", "logger=none", f"model={row}"], env, ok=(2,))
        assert p.stderr.strip().splitlines()[-1] == said and "Traceback" not in p.stderr
    (rows / "gru_wide.yaml").write_text(
        "defaults:\n  - gru\n  - _self_\nname: gru_wide\nargs: {d_model: 32}\n"
    )
    p = _run(["ablate.run", search, "experiment=gru", "logger=none", "model=gru_two"], env, ok=(2,))
    assert p.stderr.strip().splitlines()[-1] == (
        f"error: model.args.layer (set by row file {rows / 'gru_two.yaml'}): not a key of GRUConfig (did you "
        "mean layers?)"
    )
    assert not list(tmp_path.rglob("record.json"))


FLAKY = """
    import os

    from gru_model import GRUSeq2Seq, ZLossCrossEntropy
    from ablate.nn.loss import LabelSmoothedCrossEntropy


    class Flaky(GRUSeq2Seq):
        \"\"\"Its forward fails at the call BREAK_AT names (a bug the researcher then fixes).\"\"\"
        calls = 0

        def forward(self, src, tgt_in):
            Flaky.calls += self.training
            if self.training and Flaky.calls == int(os.environ.get("BREAK_AT", "0")):
                raise ValueError("the researcher's bug")
            return super().forward(src, tgt_in)


    class TensorLoss(ZLossCrossEntropy):
        def __call__(self, model, hidden, target):
            return super().__call__(model, hidden, target).total()


    class Plain:
        \"\"\"A criterion that subclasses nothing of the package's: no skipped().\"\"\"

        def __init__(self, label_smoothing, pad_id):
            self.inner = LabelSmoothedCrossEntropy(label_smoothing, pad_id)

        def __call__(self, model, hidden, target):
            return self.inner(model, hidden, target)
    """


def test_a_researchers_failing_model_or_criterion_is_one_line_with_its_place_and_the_fixed_code_resumes(
    tmp_path,
):
    (tmp_path / "my_code.py").write_text(textwrap.dedent(FLAKY))
    line = next(n for n, t in enumerate(textwrap.dedent(FLAKY).splitlines(), 1) if "raise ValueError" in t)
    env = dict(
        os.environ, PYTHONPATH=f"{USER_MODEL}{os.pathsep}{tmp_path}", ABLATE_RESULTS=str(tmp_path / "r")
    )
    common = [f"hydra.searchpath=[file://{USER_MODEL}/conf]", "experiment=gru", "logger=none", "model=gru",
              "trainer.threads=1", "trainer.progress_bar=false", "train.checkpoint_every=5"]  # fmt: skip
    flaky = [*common, "model.arch=my_code:Flaky"]
    p = _run(["ablate.run", *flaky], dict(env, BREAK_AT="8"), ok=(2,))
    said = (f"model.arch=my_code:Flaky: its forward raised ValueError: the researcher's bug at "
            f"{tmp_path / 'my_code.py'}:{line}")  # fmt: skip
    assert p.stderr.strip().splitlines()[-1] == f"error: {said}" and "Traceback" not in p.stderr
    (record,) = (tmp_path / "r").rglob("record.json")
    rec = json.loads(record.read_text())
    assert rec["status"] == "failed" and rec["reason"] == f"CodeError: {said}"
    p = _run(["ablate.run", *flaky], env)  # fixed: the same command resumes from its checkpoint
    assert "resuming from" in p.stdout and "(step 5)" in p.stdout
    assert json.loads(record.read_text())["status"] == "finished"

    p = _run(["ablate.run", *common, "model.criterion=my_code:TensorLoss", "seed=2"], env, ok=(2,))
    assert p.stderr.strip().splitlines()[-1] == (
        "error: model.criterion=my_code:TensorLoss: TensorLoss returned Tensor, not ablate.nn.loss.LossSums "
        "(docs/models.md)"
    )
    # under train.on_nonfinite=skip a criterion without skipped() is skipped over, as the base's is
    skip = [*common, "model.criterion=my_code:Plain", "seed=3", "train.on_nonfinite=skip"]
    p = _run(["ablate.run", *skip], dict(env, ABLATE_FAULT_NAN_AT_STEP="3"))
    assert "non-finite loss, micro-batch skipped" in p.stdout


def _curves(run: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run / "curves.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k != "time_s"} for r in rows]


@pytest.mark.slow
def test_a_researchers_own_model_goes_through_every_command(tmp_path):
    """docs/models.md's walk-through: the GRU row trained, stopped by Ctrl-C and resumed to the figures of
    an uninterrupted run; a sweep of its rows beside the package's Transformer base, --plan first;
    ablate.evaluate --average 2 of its checkpoints; the metrics table with both architectures."""
    user = tmp_path / "user_model"
    shutil.copytree(USER_MODEL, user, ignore=shutil.ignore_patterns("__pycache__"))
    env = dict(os.environ, PYTHONPATH=str(user), ABLATE_RESULTS=str(tmp_path / "r"))
    env["ABLATE_CACHE"] = str(tmp_path / "c")
    common = [f"hydra.searchpath=[file://{user}/conf]", "experiment=gru", "logger=none",
              "trainer.threads=1", "trainer.progress_bar=false", "data.builtin_train=600"]  # fmt: skip
    _run(["ablate.run", *common, "model=gru", "results_dir=" + str(tmp_path / "whole")], env)
    (whole,) = (tmp_path / "whole" / "gru").glob("gru-*-s1")
    _run(["ablate.run", *common, "model=gru"], dict(env, ABLATE_FAULT_SIGINT_AT_STEP="10"), ok=(130,))
    (run,) = (tmp_path / "r" / "gru").glob("gru-*-s1")
    assert json.loads((run / "record.json").read_text())["status"] == "interrupted"
    _run(["ablate.run", *common, "model=gru"], env)  # the same command resumes from step 10
    rec, ref = (json.loads((d / "record.json").read_text()) for d in (run, whole))
    assert rec["status"] == "finished" and rec["steps"] == 20 and rec["metrics"] == ref["metrics"]
    assert _curves(run) == _curves(whole) and "train_zloss" in _curves(run)[0]  # its criterion's term
    assert rec["model_effective"] == {"vocab_size": 300, "pad_id": 0, "d_model": 16, "layers": 2,
                                      "dropout": 0.1, "attention": True}  # fmt: skip
    assert rec["params"] == count_parameters(build_model(gru_cfg({"d_model": 16}), 300))

    sweep = ["ablate.run", "-m", *common, "model=base,gru,gru_noattn", "seed=1,2"]
    plan = _run([*sweep, "--plan"], env).stdout
    assert (
        "plan of 6 runs: 1 finished, 5 to train" in plan
        and "attention False, eps_ls 0.1, criterion gru_model:ZLossCrossEntropy, 20 steps" in plan
    )
    _run(sweep, env)
    out = _run(["ablate.evaluate", str(run), "--average", "2", "--split", "test", "--threads", "1"], env)
    assert "test_averaged_checkpoints    2" in out.stdout
    report = ["ablate.report", "metrics", "--conf", str(user / "conf" / "model"), "--out", "-"]
    table = _run(report, env).stdout
    assert "| row | seeds | model | params | BLEU dev |" in table
    assert f"| base | 2 | transformer | {_params(tmp_path, 'base')} |" in table
    assert f"| gru_noattn | 2 | gru_model:GRUSeq2Seq | {_params(tmp_path, 'gru_noattn')} |" in table

    # one token of the model's code stales the records of its rows (its files kept in each record), and
    # only those: base is the package's Transformer
    model = user / "gru_model.py"
    model.write_text(model.read_text() + "\nUNUSED = 1\n")
    code = ("import json, sys; from ablate.records.staleness import why_stale; "
            "from ablate.records import trust; trust.allow_folder(sys.argv[2]); "  # its rows: the command's
            "from ablate.records.store import find_records; records = find_records(sys.argv[1])[0]; "
            "print(json.dumps({r['run_id']: why_stale(r) for r in records}))")  # fmt: skip
    stale = json.loads(_run(["-c", code, str(tmp_path / "r"), str(user / "conf")], env, module=False).stdout)
    assert stale and all((why is None) == run_id.startswith("base-") for run_id, why in stale.items()), stale
    # each names the file by its place in the study, never by this machine's path
    assert all("user_model/gru_model.py" in why and str(tmp_path) not in why for why in stale.values() if why)


def _params(tmp_path: Path, row: str) -> str:
    (rec,) = {p.read_text() for p in (tmp_path / "r" / row).glob("*/record.json") if "-s1" in str(p)}
    return f"{json.loads(rec)['params']:,}"
