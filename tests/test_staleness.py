"""A record is stale when result code its task runs changed: decided file by file, from the hashes each
record stores (`code_files`), so that editing the parser leaves translation records current."""

import os
import subprocess
import sys
from pathlib import Path

from ablate.records import store as results
from ablate.records.store import stale_code, task_runs

ROOT = Path(__file__).resolve().parents[1]
TODAY = {"model.py": "aaa", "lit.py": "bbb", "parsing/linearize.py": "ccc"}


def rec(task, files, code_hash="old"):
    return {"run_id": "r", "status": "finished", "task": task, "code_files": files, "code_hash": code_hash}


def test_the_files_a_task_runs():
    assert task_runs("translation", "model.py") and task_runs("parsing", "model.py")
    assert not task_runs("translation", "parsing/tree.py") and task_runs("parsing", "parsing/tree.py")


def test_a_parser_edit_leaves_translation_current_and_stales_parsing():
    edited = {**TODAY, "parsing/linearize.py": "ddd"}
    assert stale_code(rec("translation", TODAY), edited, "new") is None
    assert stale_code(rec("parsing", TODAY), edited, "new") == "code changed: parsing/linearize.py"


def test_shared_code_edited_added_or_removed_stales_every_task():
    for task in ("translation", "parsing"):
        assert stale_code(rec(task, TODAY), {**TODAY, "model.py": "x"}, "new") == "code changed: model.py"
        assert stale_code(rec(task, TODAY), {**TODAY, "beam.py": "x"}, "new") == "code changed: beam.py"
        gone = {k: v for k, v in TODAY.items() if k != "lit.py"}
        assert stale_code(rec(task, TODAY), gone, "new") == "code changed: lit.py"
        assert stale_code(rec(task, TODAY), dict(TODAY), "new") is None


def test_a_record_without_file_hashes_compares_the_one_hash():
    legacy = {"run_id": "r", "status": "finished", "code_hash": "abc"}
    assert stale_code(legacy, TODAY, "abc") is None
    assert stale_code(legacy, TODAY, "def") == "code abc != def"


def test_a_record_holds_the_hash_of_each_result_file():
    files = results.code_file_hashes()
    parts = [f"{n}#parsing" for n in ("config.py", "evaluate.py", "lit.py", "worker.py")]
    assert sorted(files) == sorted([*results.code_files(), *parts])
    import hashlib

    lines = (ROOT / "ablate" / "model.py").read_bytes().splitlines(keepends=True)
    assert files["model.py"] == hashlib.sha256(b"".join(x for x in lines if x.strip())).hexdigest()[:12]
    bad = {"run_id": "r", "status": "finished", "code_files": ["model.py"]}
    assert results.record_problem(bad) == '"code_files" is a list, not an object'


def test_a_translation_run_imports_no_parser_code(tmp_path):
    """The fact TASK_ONLY_CODE rests on, measured in a real run: Python's own import log (-X importtime)
    of `ablate.run` training and evaluating a translation model names no ablate.tasks.parsing module."""
    cmd = [sys.executable, "-X", "importtime", "-m", "ablate.run", "scale=tiny", "recipe=tiny", "logger=none",
           f"results_dir={tmp_path}/r", f"data.cache_dir={tmp_path}/c", "train.max_steps=2",
           "trainer.threads=1"]  # fmt: skip
    p = subprocess.run(cmd, cwd=ROOT, env=dict(os.environ), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    imported = {ln.split("|")[-1].strip() for ln in p.stderr.splitlines() if ln.startswith("import time:")}
    assert "ablate.training.fit" in imported and "ablate.nn.model" in imported  # the log is read right
    assert not [m for m in imported if m.startswith("ablate.tasks.parsing")]
    (path,) = (tmp_path / "r").rglob("record.json")
    assert results.read_record(path)["code_files"] == results.code_file_hashes()


def test_definitions_that_decide_no_result_are_left_out_of_their_files_hash(tmp_path):
    """Editing evaluate.py's command line (main) leaves the file's result hash as it was; editing the
    function that decodes and scores (evaluate_run), or a line between definitions, changes it."""
    source = (ROOT / "ablate" / "evaluate.py").read_text()
    (tmp_path / "evaluate.py").write_text(source)
    before = results.result_source("evaluate.py", tmp_path)
    assert before == results.result_source("evaluate.py") and b"def main(" not in before
    assert b"def evaluate_run(" in before

    def edited(old: str, new: str) -> bytes:
        assert source.count(old) == 1
        (tmp_path / "evaluate.py").write_text(source.replace(old, new))
        return results.result_source("evaluate.py", tmp_path)

    parse = "    args = ap.parse_args(argv)\n"
    assert edited(parse, parse + "    print(args)\n") == before
    assert edited("def evaluate_run(", "def evaluate_run(  \n") != before
    assert edited("\n\ndef main(", "\nX = 1\n\ndef main(") != before


def test_every_definition_named_as_deciding_no_result_exists():
    import ast

    for name, defs in results.NOT_RESULT_DEFS.items():
        assert name in results.code_files()
        top = {n.name for n in ast.parse((ROOT / "ablate" / name).read_text()).body if hasattr(n, "name")}
        assert set(defs) <= top, f"{name}: {set(defs) - top} is not a top-level definition"


def test_the_parsers_config_fields_are_hashed_apart_from_the_rest_of_config_py(tmp_path):
    """A new or edited parsing field changes the part "config.py#parsing" (which only parsing runs run) and
    leaves "config.py" as it was; an edit to any other field changes "config.py" and not the part."""
    import dataclasses
    import hashlib

    from ablate.config import DataConfig, DecodeConfig

    fields = {f.name for cls in (DataConfig, DecodeConfig) for f in dataclasses.fields(cls)}
    assert set(results.PARSING_FIELDS) <= fields
    text = (ROOT / "ablate" / "config.py").read_text()

    def parts(source: str) -> tuple[str, str]:
        (tmp_path / "config.py").write_text(source)
        return tuple(
            hashlib.sha256(results.result_source(n, tmp_path)).hexdigest()
            for n in results._parts("config.py")
        )

    general, parsing = parts(text)
    edited = text.replace("constituent_pairs: bool = False", "constituent_pairs: bool = True")
    assert parts(edited)[0] == general and parts(edited)[1] != parsing
    edited = text.replace("max_len: int = 256", "max_len: int = 255")
    assert parts(edited)[0] != general and parts(edited)[1] == parsing
    assert not task_runs("translation", "config.py#parsing") and task_runs("parsing", "config.py#parsing")


def test_only_the_parser_reads_the_parsing_fields():
    """What PARSING_FIELDS rests on: outside ablate/tasks/parsing/, result code reads those fields only in the
    treebank's fingerprint, which only the wsj sources call, and inside the blocks that only parsing runs
    run (`if cfg.task == "parsing"`, hashed apart too). Python's parser finds every `.field`."""
    import ast

    readers = set()
    for name in results.code_files():
        if name.startswith("parsing/"):
            continue
        tree = ast.parse((ROOT / "ablate" / name).read_text())
        guarded = results._parsing_lines(tree, name)
        for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
            for a in ast.walk(fn):
                if (
                    isinstance(a, ast.Attribute)
                    and a.attr in results.PARSING_FIELDS
                    and a.lineno - 1 not in guarded
                ):
                    readers.add(f"{name}:{fn.name}")
    assert readers == {"data/corpora.py:_parsing_fingerprint"}


def test_blocks_only_parsing_runs_run_are_hashed_apart(tmp_path):
    """An edit inside `if cfg.task == "parsing":` (alone or with `and ...`) changes the part
    "<file>#parsing" and leaves the file's hash as it was; an edit outside changes the file; a block with
    an else is no such block (a translation run runs the else)."""
    import hashlib

    text = (ROOT / "ablate" / "worker.py").read_text()
    guard = '    if cfg.task == "parsing":\n'
    assert text.count(guard) == 1

    def parts(source: str) -> tuple[str, ...]:
        (tmp_path / "worker.py").write_text(source)
        return tuple(
            hashlib.sha256(results.result_source(n, tmp_path)).hexdigest()
            for n in ("worker.py", "worker.py#parsing")
        )

    general, parsing = parts(text)
    inside = text.replace(guard, guard + "        x = 1\n")
    assert parts(inside)[0] == general and parts(inside)[1] != parsing
    both = text.replace(guard, '    if cfg.task == "parsing" and cfg.seed:\n')
    assert parts(both)[0] == general
    outside = text.replace(guard, "    x = 1\n" + guard)
    assert parts(outside)[0] != general and parts(outside)[1] == parsing
    body = text[text.index(guard) + len(guard) :].split("\n    module = ")[0]
    with_else = text.replace(guard + body, guard + body + "\n    else:\n        pass")
    assert with_else != text and parts(with_else)[0] != general
    assert set(results._parts("worker.py")) == {"worker.py", "worker.py#parsing"}
    assert not task_runs("translation", "worker.py#parsing") and task_runs("parsing", "worker.py#parsing")
