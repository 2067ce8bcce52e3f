"""The package's import graph has no cycles, and every module imports on its own in a fresh interpreter."""
import ast
import subprocess
import sys
from pathlib import Path


import xe2rt

PACKAGE = Path(xe2rt.__file__).resolve().parent


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(name: str) -> set[str]:
    """Package modules `name` imports at module level or in functions (any import counts: a cycle through a
    function-level import is still a cycle of responsibilities). A package's own __init__ is not an edge of its
    submodules (Python imports parents first by design)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            targets = [stem] + [f"{stem}.{a.name}" for a in node.names]
        for target in targets:
            if target in MODULES and target != name:
                found.add(target)
    return found


def find_cycles(graph: dict) -> list[list[str]]:
    state, cycles = {}, []

    def visit(node, stack):
        state[node] = "open"
        for dep in sorted(graph[node]):
            if state.get(dep) == "open":
                cycles.append(stack[stack.index(dep):] + [dep])
            elif dep not in state:
                visit(dep, stack + [dep])
        state[node] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    return cycles




def package_cycles() -> list[list[str]]:
    """Edges into a package's __init__ are left out: Python runs a package's __init__ before any of its submodules,
    and xe2rt/__init__ re-exports from all of them by design. Every other edge is a real dependency."""
    graph = {name: {d for d in imports_of(name) if MODULES[d].name != "__init__.py"} for name in MODULES}
    return find_cycles(graph)


def test_no_import_cycles():
    assert package_cycles() == []


def test_cycle_finder_finds_a_cycle():
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]


def test_every_module_imports():
    """Every module, including those xe2rt/__init__ does not import, in one fresh interpreter."""
    names = sorted(n for n in MODULES if n != "xe2rt.__main__")
    code = "import importlib\nfor n in %r: importlib.import_module(n)" % names
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=PACKAGE.parent)
    assert proc.returncode == 0, proc.stderr[-1500:]
