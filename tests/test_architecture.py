"""The package's structure: no import cycle between muflow's modules, no module or function
too long.

The import graph is read from the source with :mod:`ast`, so it holds every import a module
can run: at the top, inside functions (late imports) and under ``if TYPE_CHECKING:``.

What counts as an edge from module ``m``:

- ``import a.b.c`` and ``from a.b.c import name``: an edge to ``a.b.c`` (``name`` may be a
  submodule, ``from a.b import c``: then the edge goes to ``a.b.c`` as well); relative
  imports are resolved against ``m``'s package first;
- the packages around the target (``a`` and ``a.b`` above), whose ``__init__`` Python runs
  first, unless they also enclose ``m``. A package's ``__init__`` importing its own
  submodules (its public facade) and a submodule importing a sibling are the normal
  shape of a package and no cycle; but a module outside ``a.b`` that imports ``a.b.c``
  runs ``a/b/__init__.py`` too, and a cycle through that ``__init__`` fails at import
  time as any other (``config`` importing ``selection.grid`` while ``selection``'s
  ``__init__`` imports back from ``config`` did).
"""

from __future__ import annotations

import ast
from pathlib import Path

import muflow

PACKAGE = Path(muflow.__file__).parent
#: The longest a module under muflow/ may be: past it, it holds more than one job.
MAX_LINES = 500
#: The longest a function may be outside the compiled kernels (``*_compiled.py``, whose
#: loops stay whole so that numba compiles them as one): past it, name its steps.
MAX_FUNCTION_LINES = 120


def module_files(package: Path = PACKAGE) -> dict[str, Path]:
    """Dotted module name -> source file, for every module under ``package``."""
    modules = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _known(name: str, modules) -> str | None:
    """The longest prefix of ``name`` that is one of ``modules`` (``a.b.f`` for a function f
    of ``a.b`` is ``a.b``), or None when it names nothing of ours."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _targets(node, module: str, is_package: bool, modules) -> set[str]:
    """The modules of ours that one import statement of ``module`` names."""
    if isinstance(node, ast.Import):
        return {t for alias in node.names if (t := _known(alias.name, modules))}
    if node.level:
        package = module.split(".") if is_package else module.split(".")[:-1]
        base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
    else:
        base = node.module
    found = set()
    for alias in node.names:
        target = _known(f"{base}.{alias.name}", modules) or _known(base, modules)
        if target:
            found.add(target)
    return found


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the modules of ours it imports (see the module docstring for the rule)."""
    graph = {}
    for module, path in modules.items():
        edges = set()
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for target in _targets(node, module, path.name == "__init__.py", modules):
                edges.add(target)
                parts = target.split(".")
                for k in range(1, len(parts)):
                    package = ".".join(parts[:k])
                    if package in modules and not (module + ".").startswith(package + "."):
                        edges.add(package)
        edges.discard(module)
        graph[module] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm,
    iterative), each sorted: every module of one imports every other, directly or not."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def describe(component: list[str], graph) -> str:
    """The edges inside one cycle, one line each, for the failure message."""
    inside = set(component)
    return "\n".join(f"  {m} -> {', '.join(sorted(graph[m] & inside))}" for m in component)


# -- the checker checks what it should ------------------------------------------------------
def _package(tmp_path, files: dict[str, str]) -> dict[str, Path]:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return module_files(tmp_path / "pkg")


def test_a_late_import_back_is_a_cycle(tmp_path):
    modules = _package(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/low.py": "def f():\n    from pkg.high import g\n",
        "pkg/high.py": "from pkg import low\n",
    })
    assert cycles(import_graph(modules)) == [["pkg.high", "pkg.low"]]


def test_relative_and_dotted_imports_resolve(tmp_path):
    modules = _package(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/sub/__init__.py": "",
        "pkg/sub/a.py": "from . import b\nfrom ..c import thing\n",
        "pkg/sub/b.py": "import pkg.c\n",
        "pkg/c.py": "x = 1\n",
    })
    graph = import_graph(modules)
    assert graph["pkg.sub.a"] == {"pkg.sub.b", "pkg.c"}
    assert graph["pkg.sub.b"] == {"pkg.c"}
    assert cycles(graph) == []


def test_a_facade_importing_its_submodules_is_no_cycle_but_a_way_back_in_from_outside_is(tmp_path):
    files = {
        "pkg/__init__.py": "",
        "pkg/sel/__init__.py": "from pkg.sel.grid import Grid\n",
        "pkg/sel/grid.py": "from pkg.sel.scoring import s\nclass Grid: pass\n",
        "pkg/sel/scoring.py": "s = 1\n",
        "pkg/config.py": "from pkg.sel.grid import Grid\n",
    }
    assert cycles(import_graph(_package(tmp_path, files))) == []
    files["pkg/sel/__init__.py"] += "from pkg.config import load\n"
    assert cycles(import_graph(_package(tmp_path, files))) == [["pkg.config", "pkg.sel"]]


# -- muflow -------------------------------------------------------------------------------
def test_no_import_cycle_between_muflow_modules():
    graph = import_graph(module_files())
    assert len(graph) > 50 and graph["muflow.model"], "the graph was not read"
    found = cycles(graph)
    assert not found, "import cycles (every module of a group imports the others):\n" + \
        "\n".join(describe(c, graph) for c in found)


def test_no_module_under_muflow_is_longer_than_500_lines():
    long = {str(path.relative_to(PACKAGE.parent)): n for path in module_files().values()
            if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split them by job): {long}"


def long_functions(path: Path, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """``name (lines)`` of every function of ``path`` longer than ``limit`` lines, its
    docstring and decorators' lines after the ``def`` included."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return [f"{node.name} ({length})" for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and (length := node.end_lineno - node.lineno + 1) > limit]


def test_a_long_function_is_found(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("def short():\n    pass\n\n\ndef long():\n" + "    x = 1\n" * 5)
    assert long_functions(path, limit=5) == ["long (6)"]


def test_no_function_outside_the_compiled_kernels_is_longer_than_120_lines():
    long = {str(path.relative_to(PACKAGE.parent)): found for path in module_files().values()
            if not path.name.endswith("_compiled.py") and (found := long_functions(path))}
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines (name their steps): {long}"
