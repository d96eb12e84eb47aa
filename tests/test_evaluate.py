"""Table 2 protocol: checkpoint averaging and the two BLEU figures."""

import subprocess
import sys
from pathlib import Path

import pytest
import sacrebleu
import torch

from ablate.tasks.bleu import _COMPOUND, tokenized_bleu
from ablate.training.evaluation import average_checkpoints

ROOT = Path(__file__).resolve().parents[1]


def test_average_is_the_elementwise_mean(tmp_path):
    paths = []
    for i, w in enumerate([1.0, 2.0, 6.0]):
        p = tmp_path / f"step{i}.ckpt"
        torch.save({"state_dict": {"model.w": torch.full((2, 2), w), "model.b": torch.tensor([w, -w])}}, p)
        paths.append(p)
    avg = average_checkpoints(paths)
    assert torch.equal(avg["model.w"], torch.full((2, 2), 3.0))
    assert torch.equal(avg["model.b"], torch.tensor([3.0, -3.0]))


def test_compound_splitting_as_in_tensor2tensor():
    assert _COMPOUND.sub(r"\1 ##AT##-##AT## \2", "Mitte-Links") == "Mitte ##AT##-##AT## Links"
    assert tokenized_bleu(
        ["Die Mitte-Links-Regierung sagt: Nein."], ["Die Mitte-Links-Regierung sagt: Nein."], "de"
    ) == pytest.approx(100.0)
    # Tokenized BLEU counts the split pieces: a hypothesis missing one compound part scores below sacreBLEU's
    # 13a tokenization, which keeps "Mitte-Links" whole.
    hyp, ref = ["Die Mitte-Rechts Regierung"], ["Die Mitte-Links Regierung"]
    assert tokenized_bleu(hyp, ref, "de") != sacrebleu.corpus_bleu(hyp, [ref]).score


@pytest.mark.slow
def test_evaluate_a_run_with_averaging(tmp_path, capsys):
    args = [
        "scale=tiny",
        "recipe=tiny",
        "logger=none",
        "train.checkpoint_every=5",
        f"results_dir={tmp_path}/r",
        f"data.cache_dir={tmp_path}/c",
        "trainer.threads=1",
    ]
    p = subprocess.run(
        [sys.executable, "-m", "ablate.run", *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 0, p.stderr[-2000:]
    run_dir = next(Path(tmp_path, "r").rglob("record.json")).parent
    q = subprocess.run(
        [sys.executable, "-m", "ablate.evaluate", str(run_dir), "--average", "2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert q.returncode == 0, q.stderr[-2000:]
    assert "test_bleu " in q.stdout and "test_bleu_tok" in q.stdout
    import json

    from ablate.records import evaluations
    from ablate.records.evaluations import Protocol

    # The record stays as its run wrote it; the evaluation is a fact of its own under its protocol.
    written = (run_dir / "record.json").read_bytes()
    rec = json.loads(written)
    assert "test_bleu" not in rec["metrics"]
    (ev,) = evaluations.read(run_dir, rec["run_id"])
    assert ev.protocol == Protocol("test", 2) and ev.protocol.steps == (15, 20)
    assert ev.metrics["test_averaged_checkpoints"] == 2 and ev.metrics["test_sentences"] == 40
    hyp = "evaluations/test.avg2/test.avg2.hyp.txt"  # in the evaluation's own folder
    assert ev.files["test_hyp"] == hyp and (run_dir / hyp).is_file()
    assert not ev.by_run and ev.path == run_dir / "evaluations" / "test.avg2.json"
    # A curve point: only checkpoints up to step 10, its own hypotheses file and protocol.
    r = subprocess.run(
        [sys.executable, "-m", "ablate.evaluate", str(run_dir), "--average", "1", "--until-step", "10"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert (run_dir / "evaluations" / "test.step10.avg1" / "test.step10.avg1.hyp.txt").is_file()
    assert (run_dir / "record.json").read_bytes() == written
    both = evaluations.read(run_dir, rec["run_id"])
    assert [e.protocol for e in both] == [Protocol("test", 2), Protocol("test", 1, 10)]
    assert both[0].metrics == ev.metrics  # the earlier evaluation stays as it was
    times = [json.loads(line).get("time_s") for line in (run_dir / "curves.jsonl").read_text().splitlines()]
    assert any(t is not None and t > 0 for t in times)  # the minute axis of benchmarks/multi30k_curve.py
    # What evaluate_run would ignore or clip is refused in one line, before anything is decoded or written.
    from ablate.evaluate import main

    for argv, message in [
        (["--src", "a.txt"], "error: --src needs --ref: a source file is scored against its references"),
        (["--ref", "a.txt"], "error: --ref needs --src: a source file is scored against its references"),
        (["--average", "-1"], "error: --average -1: a number of checkpoints, 0 (last.ckpt) or more"),
        (["--average", "100"], f"error: --average 100: {run_dir / 'checkpoints'} holds 4 step checkpoint(s)"),
        (["--average", "3", "--until-step", "10"], "holds 2 step checkpoint(s) up to step 10"),
        (["--threads", "0"], "error: --threads 0: at least 1"),
    ]:
        assert main([str(run_dir), *argv]) == 2
        err = capsys.readouterr().err
        assert err.strip().endswith(message) and len(err.strip().splitlines()) == 1, (argv, err)
    assert (run_dir / "record.json").read_bytes() == written
    # An ensemble: a second seed searched with the first as one model, kept with the first under a protocol
    # that names it; the same run twice, or a run whose data differ, is refused in one line.
    for extra in (["seed=2"], ["seed=3", "data.vocab_size=200"]):
        p = subprocess.run(
            [sys.executable, "-m", "ablate.run", *args, *extra], cwd=ROOT, capture_output=True, text=True
        )
        assert p.returncode == 0, p.stderr[-2000:]
    second = next(Path(tmp_path, "r").rglob("*-s2/record.json")).parent
    third = next(Path(tmp_path, "r").rglob("*-s3/record.json")).parent
    assert main([str(run_dir), "--average", "2", "--threads", "1", "--ensemble", str(second)]) == 0
    capsys.readouterr()
    ens = evaluations.read(run_dir, rec["run_id"])[-1]
    assert ens.protocol == Protocol("test", 2, None, None, (second.name,))
    assert ens.protocol.tag.startswith("test.avg2.ens2-") and ens.protocol != Protocol("test", 2)
    tag = ens.protocol.tag
    assert (
        ens.files["test_hyp"] == f"evaluations/{tag}/{tag}.hyp.txt"
        and (run_dir / ens.files["test_hyp"]).is_file()
    )
    assert f"an ensemble with {second.name}" in ens.protocol.describe()
    for argv, message in [
        (
            ["--ensemble", str(run_dir)],
            f"error: --ensemble: run {run_dir.name} given twice; an ensemble is of different runs",
        ),
        (
            ["--ensemble", str(third)],
            f"error: {third}: its data config prepares another corpus than the run's",
        ),
        (["--ensemble", str(second), str(second)], f"error: --ensemble: run {second.name} given twice"),
    ]:
        assert main([str(run_dir), "--threads", "1", *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1, (argv, err)
    assert len(evaluations.read(run_dir, rec["run_id"])) == 3  # nothing written by a refusal
    # Two evaluations under one protocol started at once, of the run and of the ensemble: both kept.
    for extra in ([], ["--ensemble", str(second)]):
        cmd = [sys.executable, "-m", "ablate.evaluate", str(run_dir), "--split", "dev", "--average", "2"]
        procs = [
            subprocess.Popen([*cmd, *extra, "--threads", "1"], cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
            for _ in range(2)
        ]  # fmt: skip
        outs = [p.communicate(timeout=300) for p in procs]
        assert [p.returncode for p in procs] == [0, 0] and not any("Traceback" in e for _, e in outs), outs
    dev = [e for e in evaluations.read(run_dir, rec["run_id"]) if e.protocol.split == "dev"]
    assert sorted(len(e.protocol.members) for e in dev) == [0, 0, 1, 1] and len({e.path for e in dev}) == 4
    for members in ((), (second.name,)):
        assert len({e.metrics["dev_bleu"] for e in dev if e.protocol.members == members}) == 1


def test_evaluate_decodes_with_the_runs_threads(tmp_path, monkeypatch):
    """`python -m ablate.evaluate` decodes on trainer.threads of the run (a beam-21 parse of section 23
    on torch's default of every core ran beside a training job), or on --threads."""
    import dataclasses
    import json

    import torch

    from ablate import evaluate
    from ablate.config import RunConfig, TrainerConfig

    cfg = dataclasses.asdict(RunConfig(trainer=TrainerConfig(threads=1)))
    (tmp_path / "record.json").write_text(json.dumps({"run_id": "r", "status": "finished", "config": cfg}))
    seen = []
    monkeypatch.setattr(evaluate, "evaluate_run", lambda *a: seen.append(torch.get_num_threads()) or {})
    before = torch.get_num_threads()
    try:
        assert evaluate.main([str(tmp_path)]) == 0 and evaluate.main([str(tmp_path), "--threads", "2"]) == 0
    finally:
        torch.set_num_threads(before)
    assert seen == [1, 2]


@pytest.mark.parametrize(
    "status", ["running", "interrupted", "preempted", "timed_out", "cancelled", "failed"]
)  # noqa: E501
def test_a_run_that_has_not_finished_is_refused_in_one_line(tmp_path, capsys, status):
    """Its last.ckpt is whatever step it reached: figures of it would shadow the finished run's."""
    import json

    from ablate.evaluate import main

    committed = next(Path(__file__).resolve().parents[1].glob("reports/table3_multi30k/runs/*/*/record.json"))
    rec = {**json.loads(committed.read_text()), "status": status, "steps": 20}
    (tmp_path / "record.json").write_text(json.dumps(rec))
    assert main([str(tmp_path), "--split", "dev"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"error: {tmp_path}: the run is {status} at step 20, not finished: evaluate it once it has finished, "
        "or name a checkpoint with --until-step S (its figures are printed, the record left as it is)"
    )
    assert not (tmp_path / "evaluations.json").exists()


def _write_evaluations(run_dir, writer, n, start, members):
    from ablate.records import evaluations

    start.wait()
    for i in range(n):
        metrics = {"dev_bleu": float(writer * 1000 + i)}
        texts = {"dev_hyp": (".hyp.txt", f"{writer} {i}\n")}
        evaluations.write(
            run_dir, "r", evaluations.Protocol("dev", 2, None, (15, 20), members), metrics, texts=texts
        )


@pytest.mark.parametrize("members", [(), ("r-s2",)], ids=["one run", "an ensemble"])
def test_evaluations_written_at_once_under_one_protocol_are_each_kept(tmp_path, members):
    """Two writers started at once under one protocol (two `ablate.evaluate RUN --split dev --average 2`,
    or two of one ensemble): each evaluation is kept whole under a name of its own, and neither fails."""
    import multiprocessing

    from ablate.records import evaluations

    ctx = multiprocessing.get_context("fork")
    start = ctx.Barrier(2)
    writers = [
        ctx.Process(target=_write_evaluations, args=(tmp_path, w, 100, start, members)) for w in [1, 2]
    ]
    for p in writers:
        p.start()
    for p in writers:
        p.join(timeout=120)
    assert [p.exitcode for p in writers] == [0, 0]
    kept = evaluations.read(tmp_path, "r")
    assert sorted(e.metrics["dev_bleu"] for e in kept) == sorted(
        float(w * 1000 + i) for w in (1, 2) for i in range(100)
    )  # every evaluation once: none lost, none linked under two names
    tag = evaluations.Protocol("dev", 2, members=members).tag
    assert {e.path.name for e in kept} == {f"{tag}.json", *(f"{tag}-{n}.json" for n in range(2, 201))}
    assert [p.name for p in (tmp_path / evaluations.FOLDER).iterdir() if p.name.startswith(".")] == []
    for e in kept:  # each its own hypotheses, in a file no other evaluation names
        writer, i = divmod(int(e.metrics["dev_bleu"]), 1000)
        assert (tmp_path / e.files["dev_hyp"]).read_text() == f"{writer} {i}\n"
    assert len({e.files["dev_hyp"] for e in kept}) == 200


def test_an_evaluation_never_writes_over_the_runs_files_or_another_evaluations(tmp_path, capsys, monkeypatch):
    """`ablate.evaluate --average 0 --split dev` decodes what the run decoded at its end: its hypotheses go
    to a file of the evaluation's own, the run's dev.hyp.txt stays its training run's, and a second
    evaluation under the same protocol takes a name of its own; a stopped one leaves its name free."""
    import json

    from ablate.evaluate import main
    from ablate.records import evaluations, folder

    args = ["scale=tiny", "recipe=tiny", "logger=none", "train.max_steps=6", "train.checkpoint_every=3",
            "trainer.threads=1", f"results_dir={tmp_path}/r", f"data.cache_dir={tmp_path}/c"]  # fmt: skip
    p = subprocess.run([sys.executable, "-m", "ablate.run", *args], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-2000:]
    run_dir = next(Path(tmp_path, "r").rglob("record.json")).parent
    before = {f: (run_dir / f).read_bytes() for f in ("dev.hyp.txt", "dev_sentences.npz", "record.json")}
    mtimes = {f: (run_dir / f).stat().st_mtime_ns for f in before}
    (run_dir / "dev.hyp.txt").write_text("the training run's hypotheses\n")  # told apart from a decode's
    before["dev.hyp.txt"] = (run_dir / "dev.hyp.txt").read_bytes()
    mtimes["dev.hyp.txt"] = (run_dir / "dev.hyp.txt").stat().st_mtime_ns
    # a first evaluation stopped by Ctrl-C after its files were written, before it was kept, and one
    # killed there (its folder left, its lock free): the name stays free for the next
    calls = []

    def stop_at_record(path, obj):
        calls.append(path)
        raise KeyboardInterrupt

    monkeypatch.setattr(folder, "atomic_write_json", stop_at_record)
    assert main([str(run_dir), "--average", "0", "--split", "dev", "--threads", "1"]) == 130
    monkeypatch.undo()
    assert calls and not list((run_dir / "evaluations").glob("*.json"))
    killed = run_dir / "evaluations" / "dev"
    killed.mkdir()
    (killed / evaluations.WRITING).touch()
    (killed / "dev.hyp.txt").write_text("half\n")
    for _ in range(2):
        assert main([str(run_dir), "--average", "0", "--split", "dev", "--threads", "1"]) == 0
    capsys.readouterr()
    assert {f: (run_dir / f).read_bytes() for f in before} == before
    assert {f: (run_dir / f).stat().st_mtime_ns for f in before} == mtimes
    rec = json.loads(before["record.json"])
    kept = evaluations.read(run_dir, rec["run_id"])
    assert [e.path.name for e in kept] == ["dev.json", "dev-2.json"]
    assert [e.files["dev_hyp"] for e in kept] == [
        "evaluations/dev/dev.hyp.txt",
        "evaluations/dev-2/dev.hyp.txt",
    ]
    decoded = [(run_dir / e.files["dev_hyp"]).read_text() for e in kept]
    assert decoded[0] == decoded[1] != before["dev.hyp.txt"].decode()  # the same weights, decoded twice
