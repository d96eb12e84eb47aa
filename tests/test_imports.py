"""The package's modules import one another without cycles, counting imports inside functions too (a lazy
import hides a cycle from Python, not from a reader). Read from the source with ast: nothing is imported."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "ablate"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str], name: str | None = None) -> set[str]:
    """The package modules a file imports (`from ablate.x import y` counts ablate.x.y when y is a module),
    relative imports (`from ..records import store`) resolved from the file's module `name` (default: its
    name in the package)."""
    name = _module_name(path) if name is None else name
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            names = [module] + [f"{module}.{a.name}" for a in node.names]
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


ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"


def layers() -> dict[str, int]:
    """package or module -> its layer, read from the table of docs/architecture.md."""
    import re

    out = {}
    for line in ARCHITECTURE.read_text().splitlines():
        m = re.match(r"\|\s*(\d+)\s*\|([^|]*)\|", line)
        if m:
            for name in re.findall(r"`([\w.]+)`", m.group(2)):
                out[name] = int(m.group(1))
    return out


def layer_of(module: str, table: dict[str, int]) -> int | None:
    parts = module.split(".")
    for i in range(len(parts), 0, -1):
        if ".".join(parts[:i]) in table:
            return table[".".join(parts[:i])]
    return None


def test_no_layer_imports_a_higher_one():
    table = layers()
    assert table["ablate.nn"] < table["ablate.records"] < table["ablate.report"] < table["ablate.run"]
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    plugins = PACKAGE.parent / "hydra_plugins"
    files |= {".".join(p.relative_to(plugins.parent).with_suffix("").parts): p for p in plugins.rglob("*.py")}
    modules = set(files) | {"ablate"}
    unplaced = sorted(m for m in files if layer_of(m, table) is None and m != "ablate")
    assert not unplaced, f"modules in no layer of {ARCHITECTURE.name}: {unplaced}"
    wrong = upward_imports(files, modules, table)
    assert not wrong, "\n".join(wrong)


def upward_imports(files: dict[str, Path], modules: set[str], table: dict[str, int]) -> list[str]:
    """'m (layer i) imports d (layer j)' for each import of a module of `files` ({module: file}) into a
    higher layer of `table`."""
    return sorted(
        f"{m} (layer {layer_of(m, table)}) imports {d} (layer {layer_of(d, table)})"
        for m, p in files.items()
        for d in _imports(p, modules, m)
        if layer_of(d, table) is not None and layer_of(d, table) > (layer_of(m, table) or 0)
    )


def test_the_layer_checker_finds_an_upward_import(tmp_path):
    """A package of two layers: nn's model imports the report absolutely, its loss relatively (up two
    levels), its package's __init__ relatively from a sibling of the report, its config inside a
    function; the report imports nn (downward: allowed). The checker names the four upward imports."""
    table = {"ablate.nn": 1, "ablate.report": 9}
    assert layer_of("ablate.nn.model", table) == 1 and layer_of("ablate.report", table) == 9
    assert layer_of("ablate.other", table) is None
    sources = {
        "ablate/__init__.py": "",
        "ablate/nn/__init__.py": "from ..report import decide\n",
        "ablate/nn/model.py": "import ablate.report.decide\n",
        "ablate/nn/loss.py": "from ..report.decide import decide\n",
        "ablate/nn/config.py": "def f():\n    from ..report import decide\n",
        "ablate/report/__init__.py": "",
        "ablate/report/decide.py": "from ..nn import model\nfrom . import __init__\n",
    }
    files = {}
    for rel, text in sources.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        parts = Path(rel).with_suffix("").parts
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    assert upward_imports(files, set(files), table) == [
        "ablate.nn (layer 1) imports ablate.report (layer 9)",  # the package the names come from
        "ablate.nn (layer 1) imports ablate.report.decide (layer 9)",
        "ablate.nn.config (layer 1) imports ablate.report (layer 9)",
        "ablate.nn.config (layer 1) imports ablate.report.decide (layer 9)",
        "ablate.nn.loss (layer 1) imports ablate.report.decide (layer 9)",
        "ablate.nn.model (layer 1) imports ablate.report.decide (layer 9)",
    ]


def test_hydra_s_plugin_scan_imports_no_torch():
    """Hydra imports every plugin module at each command's start (`hydra_plugins.*`): the sweeper's module
    imports neither torch nor Lightning, as hydra-submitit-launcher keeps submitit out of its scan."""
    import subprocess
    import sys

    code = (
        "import sys, hydra_plugins.ablate_sweeper.ablate_sweeper as m; "
        "print(sorted(n for n in ('torch', 'pytorch_lightning', 'wandb') if n in sys.modules))"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=PACKAGE.parent)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip() == "[]"


def test_a_tasks_tables_are_report_code_resolved_by_the_report():
    """`Task.tables` names its functions by string: the report resolves them (ablate.report.tables), and each
    built-in task's table lies at the report's layer, so the rule above checks what it imports."""
    import ablate.tasks
    from ablate.tasks import BUILTIN, task_of

    table = layers()
    assert not hasattr(ablate.tasks, "table")  # no resolver below the report
    for name in BUILTIN:
        for command, where in task_of(name).tables.items():
            module = where.partition(":")[0]
            assert (PACKAGE.parent / (module.replace(".", "/") + ".py")).is_file(), (name, command)
            assert layer_of(module, table) == layer_of("ablate.report.tables", table), (name, command, module)
