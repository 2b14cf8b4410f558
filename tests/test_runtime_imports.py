"""The runtime's modules import one way, counting every import: lazy and type-only too.

`test_architecture.py` checks the module-level imports of the whole
package. Here, inside `planopt.runtime`, an import in a function or under
`if TYPE_CHECKING:` counts as well (issue 25: executor <-> layers through a
type-only import, swap <-> threadcopies through a lazy one), so the layering
is visible in the imports: a lower module never names a higher one.
"""

from __future__ import annotations

import ast
from pathlib import Path

from test_architecture import _cycle

RUNTIME = Path(__file__).resolve().parents[1] / "planopt" / "runtime"


def _imports(path: Path, known: set[str]) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            base = node.module if not node.level else f"planopt.runtime.{node.module}"
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        found.update(t for t in targets if t in known)
    return found


def runtime_graph() -> dict[str, set[str]]:
    modules = {f"planopt.runtime.{p.stem}": p for p in RUNTIME.glob("*.py") if p.stem != "__init__"}
    known = set(modules)
    return {name: _imports(path, known) - {name} for name, path in modules.items()}


def test_no_runtime_module_imports_one_that_imports_it_back():
    cycle = _cycle(runtime_graph())
    assert cycle is None, " -> ".join(cycle or [])


def test_the_graph_sees_type_only_and_lazy_imports():
    graph = runtime_graph()
    assert "planopt.runtime.threadcopies" in graph["planopt.runtime.engines"]
    assert "planopt.runtime.layers" in graph["planopt.runtime.executor"]
    assert "planopt.runtime.executor" not in graph["planopt.runtime.layers"]
    assert "planopt.runtime.threadcopies" not in graph["planopt.runtime.swap"]
