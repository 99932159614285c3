"""The import graph has no circles, the library never imports pytest's glue,
and the plugin's machinery never imports the fixtures or a family: read from
the source with the standard library alone. The glue is two parts:
``wanbench/pytest_plugin/`` (options, hooks, scheduling, reporting, the gate)
and the top-level ``fixtures/`` (shipped as ``wanbench.fixtures``)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "wanbench"
#: the checkout's fixtures/, the ``wanbench.fixtures`` package (setup.py maps it)
FIXTURES = ROOT / "fixtures"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] == "fixtures":
        parts.insert(0, "wanbench")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """Modules of ``modules`` that ``path`` imports, at any depth of the file
    (a lazy import inside a function still makes a circle)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            # `from pkg import submodule` depends on the submodule, not on what
            # pkg/__init__.py re-exports; `from pkg import name` on pkg
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        for t in targets:
            while t and t not in modules:
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


#: pytest's glue, inside the package since it is a pytest11 plugin: not "the library"
GLUE = ("wanbench.fixtures", "wanbench.pytest_plugin")


def is_glue(module: str) -> bool:
    return any(module == g or module.startswith(g + ".") for g in GLUE)


def graph(*, glue: bool = False) -> dict[str, set[str]]:
    """The import graph of the library (with ``glue``: of the pytest glue too)."""
    files = sorted(PACKAGE.rglob("*.py")) + sorted(FIXTURES.rglob("*.py"))
    modules = {module_name(f) for f in files}
    return {module_name(f): imports_of(f, modules) for f in files if glue or not is_glue(module_name(f))}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def test_no_import_circles_inside_the_library() -> None:
    found = cycles(graph())
    assert not found, "import circles: " + "; ".join(" <-> ".join(c) for c in found)


def test_no_import_circles_in_the_plugin_and_fixtures_either() -> None:
    found = cycles(graph(glue=True))
    assert not found, "import circles: " + "; ".join(" <-> ".join(c) for c in found)


def test_the_machinery_never_imports_the_fixtures() -> None:
    """The hub knows the fixture modules and families only by name (its
    ``pytest_plugins`` table); what they add reaches it through wanbench's hooks."""
    g = graph(glue=True)
    assert "wanbench.pytest_plugin.reporting" in g
    assert "wanbench.fixtures.tpcc" in g
    bad = {m: sorted(t for t in targets if t.startswith("wanbench.fixtures"))
           for m, targets in g.items() if m.startswith("wanbench.pytest_plugin")}
    assert not {m: t for m, t in bad.items() if t}, bad


def test_the_library_never_imports_the_pytest_glue() -> None:
    g = graph(glue=True)
    assert "wanbench.fixtures.cluster" in g, "the glue was not found where the plugin keeps it"
    bad = {m: sorted(t for t in targets if is_glue(t)) for m, targets in g.items() if not is_glue(m)}
    assert not {m: t for m, t in bad.items() if t}, bad


def test_the_checker_finds_a_circle_and_lazy_imports() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    g = graph()
    assert "wanbench.gate.budgets" in g["wanbench.gate.verdict"]


#: the most lines a module of the package (or of fixtures/) may have: past it, split it by what it does
MAX_LINES = 500


def test_no_module_is_over_the_size_limit() -> None:
    files = sorted(PACKAGE.rglob("*.py")) + sorted(FIXTURES.rglob("*.py"))
    big = {module_name(f): n for f in files if (n := len(f.read_text().splitlines())) > MAX_LINES}
    assert not big, f"modules over {MAX_LINES} lines: {big}"
