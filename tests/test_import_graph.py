"""The import graph of solutions/ and labs/: no circles, and the layers point one way.

Read from the source with ``ast`` (every ``import`` and ``from ... import``, also those inside a
function), so a lazy import that closes a circle counts as one.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _graph() -> dict[str, set[str]]:
    paths = [*ROOT.glob("solutions/**/*.py"), *ROOT.glob("labs/**/*.py")]
    modules = {}
    for path in paths:
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        modules[name] = path
    edges: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                subs = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in modules]
                # "from package import submodule" imports the submodule (and the package's __init__,
                # which may not import back into it)
                targets = subs if len(subs) == len(node.names) else [node.module, *subs]
            else:
                continue
            edges[name] |= {t for t in targets if t in modules and t != name}
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def _reach(edges: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for w in edges[todo.pop()] - seen:
            seen.add(w)
            todo.append(w)
    return seen


def test_no_import_circles() -> None:
    assert _cycles(_graph()) == []


def test_solutions_never_imports_labs() -> None:
    edges = _graph()
    assert [(m, t) for m in edges if m.startswith("solutions") for t in edges[m] if t.startswith("labs")] == []


def test_the_worker_on_one_stream_loads_nothing_of_the_cluster() -> None:
    reached = _reach(_graph(), "solutions.worker")
    assert {"solutions.cluster_router", "solutions.cluster_site", "solutions.slot_map", "solutions.shards"} & reached \
        == set()


def test_experiments_never_import_the_bench() -> None:
    """The bench measures what the experiments show; the ceiling and the worker runs live below both."""
    edges = _graph()
    upward = [(m, t) for m in edges if m.startswith("labs.experiments") for t in edges[m] if t.startswith("labs.bench")]
    assert upward == []
