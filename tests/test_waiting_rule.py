"""One way to wait: no hand-written deadline loop outside ``labs/polling.py``.

A deadline loop is a ``while`` whose condition compares a clock (``time.monotonic()``,
``time.time()``, ``time.perf_counter()``, ``loop.time()``) or a deadline taken from one, or whose
body leaves (``break``, ``return``, ``raise``) on such a comparison. Such a loop is what
:func:`labs.polling.wait_until`, :func:`~labs.polling.poll`, :func:`~labs.polling.poll_value`
(and their ``_async`` twins) and :func:`~labs.polling.every` already are, with a message naming
what was awaited; a new one is written with them.

Read from the source with ``ast``; a loop that only schedules (``if now >= next_at: next_at = ...``)
is not a deadline loop.
"""

from __future__ import annotations

import ast
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WAITING_MODULE = "labs/polling.py"
CLOCKS = frozenset({"monotonic", "time", "perf_counter", "monotonic_ns", "perf_counter_ns"})
LEAVES = (ast.Break, ast.Return, ast.Raise)

# Hand-written deadline loops still allowed, one "path::function" each (no whole file). Each entry says
# why: a runtime deadline of a program that cannot import labs.polling, never a wait for a condition
# (issue 41, item 4).
ALLOWED: dict[str, str] = {
    # The student's standalone lab 3 workers import nothing of labs/ (they run outside the repo):
    # the WAL switch's retry is a runtime deadline of the program, not a wait for a condition.
    "labs/lab3/worker_reference.py::open_ledger": "standalone student program",
    "labs/lab3/worker_starter.py::open_ledger": "standalone student program",
    # solutions/ sits below labs/ and cannot import labs.polling: its runtime deadlines (a drain
    # budget, a backoff bound, a breaker's window) are part of the worker, not waits of a lab.
    "solutions/cancelling.py::cancel_and_wait": "solutions/: the drain's cancel budget",
    "solutions/pool.py::Pool.drain": "solutions/: the drain budget (asyncio.wait on the runs)",
    "solutions/cluster_router.py::ShardClient.routed": "solutions/: a command's retry bound (retry_for_s)",
    "solutions/ledger.py::Ledger._db": "solutions/: the WAL switch's busy bound",
}


def _is_clock(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call) or node.args or node.keywords:
        return False
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return name in CLOCKS


def _own_nodes(scope: ast.AST) -> Iterator[ast.AST]:
    """The nodes of ``scope`` outside the functions, lambdas and classes nested in it."""
    todo = list(ast.iter_child_nodes(scope))
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            todo.extend(ast.iter_child_nodes(node))


def _timed_names(scope: ast.AST) -> set[str]:
    """Names assigned from a clock in ``scope`` (``deadline = time.monotonic() + t``), and parameters
    that carry a deadline by name."""
    names: set[str] = set()
    if isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
        names |= {a.arg for a in [*scope.args.args, *scope.args.kwonlyargs] if "deadline" in a.arg}
    for node in _own_nodes(scope):
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign | ast.NamedExpr) and node.value is not None \
                and any(_is_clock(n) for n in ast.walk(node.value)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):  # a, b = clock(), 0
                    pairs = zip(target.elts, node.value.elts, strict=False)
                    names |= {t.id for t, v in pairs if isinstance(t, ast.Name) and any(map(_is_clock, ast.walk(v)))}
                    continue
                elements = target.elts if isinstance(target, ast.Tuple) else [target]
                names |= {e.id for e in elements if isinstance(e, ast.Name)}
    return names


def _timed(test: ast.AST, timed: set[str]) -> bool:
    return any(
        _is_clock(n) or (isinstance(n, ast.Name) and n.id in timed)
        for compare in ast.walk(test) if isinstance(compare, ast.Compare)
        for n in ast.walk(compare)
    )


def _is_deadline_loop(loop: ast.While, timed: set[str]) -> bool:
    if _timed(loop.test, timed):
        return True
    return any(
        isinstance(node, ast.If) and _timed(node.test, timed)
        and any(isinstance(n, LEAVES) for stmt in node.body for n in ast.walk(stmt))
        for node in _own_nodes(loop)
    )


def deadline_loops(source: str) -> list[tuple[str, int]]:
    """(qualified function name, line) of every hand-written deadline loop in ``source``."""
    found: list[tuple[str, int]] = []

    def visit(scope: ast.AST, qualname: str) -> None:
        timed = _timed_names(scope)
        for node in _own_nodes(scope):
            if isinstance(node, ast.While) and _is_deadline_loop(node, timed):
                found.append((qualname or "<module>", node.lineno))
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                visit(node, f"{qualname}.{node.name}" if qualname else node.name)

    visit(ast.parse(source), "")
    return sorted(found, key=lambda f: f[1])


def _allowed(path: str, function: str) -> bool:
    return f"{path}::{function}" in ALLOWED


def _paths() -> list[str]:
    """The project's Python files under labs/, solutions/ and tests/: those git tracks (a scratch file
    beside them is nobody's yet), or every one on disk outside a git checkout."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--", "labs", "solutions", "tests"], cwd=ROOT,
                            capture_output=True, text=True, check=False)
    if listed.returncode == 0 and listed.stdout:
        return sorted(p for p in listed.stdout.splitlines() if p.endswith(".py"))
    return sorted(str(p.relative_to(ROOT)) for d in ("labs", "solutions", "tests") for p in (ROOT / d).rglob("*.py"))


def _sources() -> Iterator[tuple[str, str]]:
    """(path from the root, text) of every Python file of labs/, solutions/ and tests/ but the waiting module."""
    for rel in _paths():
        path = ROOT / rel
        try:
            text = path.read_text()
        except FileNotFoundError:  # removed while the tree was read
            continue
        if rel != WAITING_MODULE:
            yield rel, text


def _tree_loops() -> list[str]:
    return [f"{rel}:{line} in {function}" for rel, text in _sources() for function, line in deadline_loops(text)
            if not _allowed(rel, function)]


def test_no_hand_written_deadline_loop_outside_the_waiting_module() -> None:
    found = _tree_loops()
    assert found == [], (
        f"{len(found)} hand-written deadline loop(s); wait with labs.polling (wait_until, poll, poll_value, "
        f"their _async twins, every) instead:\n" + "\n".join(found)
    )


def test_every_allowed_function_still_has_its_loop() -> None:
    """An entry naming a function whose loop is gone is removed, so the list only shrinks."""
    live = {f"{rel}::{function}" for rel, text in _sources() for function, _ in deadline_loops(text)}
    assert sorted(e for e in ALLOWED if e not in live) == []


def test_the_rule_sees_the_usual_shapes_and_not_a_schedule() -> None:
    source = textwrap.dedent('''
        import time

        def waits(client):
            deadline = time.monotonic() + 5
            while not client.ready():
                if time.monotonic() > deadline:
                    raise TimeoutError("not ready")
                time.sleep(0.1)

        class Node:
            def watch(self, for_s):
                started = time.monotonic()
                while time.monotonic() - started < for_s:
                    time.sleep(0.5)

        def hands_down(deadline):
            while True:
                if time.monotonic() >= deadline:
                    break

        def schedules(worker):
            next_at = time.monotonic()
            while not worker.stopping:
                if time.monotonic() >= next_at:
                    next_at = time.monotonic() + 1
                worker.step()
    ''')
    assert [name for name, _ in deadline_loops(source)] == ["waits", "Node.watch", "hands_down"]
