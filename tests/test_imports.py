"""The package's modules import one another without cycles, counting imports inside functions too (a lazy
import hides a cycle from Python, not from a reader). Read from the source with ast: nothing is imported."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "ablate"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The package modules a file imports (`from ablate.x import y` counts ablate.x.y when y is a module)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        out |= {n for n in names if n in modules}
    return out


def import_graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    modules = set(files)
    # a package's __init__ is not a dependency of its own modules' imports of each other
    return {
        m: {d for d in _imports(p, modules) if d != m and not m.startswith(d + ".")} for m, p in files.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_checker_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles_in_the_package():
    graph = import_graph()
    assert "ablate.training.fit" in graph and "ablate.data.datamodule" in graph["ablate.training.fit"]
    assert cycles(graph) == []


def test_staleness_counts_every_module_that_decides_results():
    """A record is stale when code that decides results changed: every module counts unless it is listed
    as orchestration, logging or the report (results.NOT_RESULT_CODE)."""
    from ablate.records.store import code_files

    files = code_files()
    for name in ("model.py", "lit.py", "data/subword.py", "data/datamodule.py", "worker.py", "config.py"):
        assert name in files
    for name in ("report/table3.py", "run.py", "tracking.py", "rows.py"):
        assert name not in files
    # the model, the data, the parser and the training loop count whole: nothing of them is orchestration
    for folder in ("data", "parsing"):
        assert all(
            f"{folder}/{p.name}" in files for p in (PACKAGE / folder).glob("*.py") if p.name != "__init__.py"
        )
    from ablate.records.store import NOT_RESULT_CODE

    missing = [n for n in NOT_RESULT_CODE if not (PACKAGE / n).exists()]
    assert not missing, f"NOT_RESULT_CODE names files that do not exist: {missing}"
