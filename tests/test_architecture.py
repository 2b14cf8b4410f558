"""The house's shape, checked: no import loops, small modules, tiers that only look down.

Read from the source with `ast`, so nothing is imported here. The loop
check reads every import (inside functions and `if TYPE_CHECKING:` blocks
too: a lazy import that closes a loop only hides it, and issue 25 found
four such loops). The tier checks read module-level imports only (an import
inside a function is a deliberate, lazy edge: optional back-ends, torch).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("planopt", "solvers")
# A module longer than this states why at its top ("NOTE (size)").
MAX_LINES = 400
# Modules being split right now, each with where it goes (emptied as they land).
SPLITTING: dict[str, str] = {}


def _modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


# Loops the runtime's own branch (issue 25, fix-runtime) breaks: each pair's edges
# are left out of the every-import check until it lands. Empty this then.
PENDING_RUNTIME_LOOPS: tuple[tuple[str, str], ...] = ()  # none left


def _top_level_imports(path: Path, name: str, known: set[str], *, every: bool = False) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree) if every else tree.body:
        if isinstance(node, ast.If) and not every:  # `if TYPE_CHECKING:` blocks are not run
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                base = f"{base}.{node.module}" if node.module else base
            # `from pkg import submodule` loads the submodule; any other name, the module
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                for alias in node.names
            ]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def _graph(*, every: bool = False) -> dict[str, set[str]]:
    """Module -> modules it imports: at module level, or with `every` anywhere in it."""
    modules = _modules()
    known = set(modules)
    return {
        name: _top_level_imports(path, name, known, every=every) for name, path in modules.items()
    }


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_import_graph_has_no_loops():
    cycle = _cycle(_graph())
    assert cycle is None, " -> ".join(cycle or [])


def test_no_import_closes_a_loop_not_even_inside_a_function():
    graph = _graph(every=True)
    for a, b in PENDING_RUNTIME_LOOPS:
        graph[a].discard(b)
        graph[b].discard(a)
    cycle = _cycle(graph)
    assert cycle is None, " -> ".join(cycle or [])


def test_the_every_import_graph_sees_imports_inside_functions():
    graph = _graph(every=True)
    # `planopt.api.lower_bound` imports the relaxation inside the function.
    assert "solvers.model.relaxation" in graph["planopt.api"]
    assert "solvers.model.relaxation" not in _graph()["planopt.api"]


def test_the_cycle_finder_finds_a_loop():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_the_solvers_table_does_not_import_the_registry():
    assert not _graph()["solvers"] & {"planopt.registry"}


def test_the_cbc_path_and_the_planner_do_not_need_torch():
    graph = _graph()
    for name, imports in graph.items():
        if not name.startswith("planopt.runtime"):
            assert not {i for i in imports if i.startswith("planopt.runtime")}, name


@pytest.mark.parametrize("name", sorted(_modules()))
def test_a_long_module_says_why(name):
    path = _modules()[name]
    lines = path.read_text(encoding="utf-8").splitlines()
    if name in SPLITTING:
        pytest.skip(f"being split {SPLITTING[name]}")
    if len(lines) > MAX_LINES:
        docstring = ast.get_docstring(ast.parse("\n".join(lines))) or ""
        assert "NOTE (size)" in docstring, f"{path.relative_to(ROOT)} has {len(lines)} lines"
