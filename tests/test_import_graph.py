"""The import graph of solutions/ and labs/: no circles, and every arrow points down a floor.

Read from the source with ``ast`` (every ``import`` and ``from ... import``, also those inside a
function or under ``if TYPE_CHECKING``), so a lazy import that closes a circle counts as one.

The layering (DESIGN.md, Style): every module belongs to one room (a folder, or a module at the
root of ``labs/``), every room to one floor of :data:`FLOORS`, and a module imports only from its
own room or from rooms on floors below its own: what two rooms on one floor both need moves down.
The last test keeps ``typing.Any`` rare in the same code.
"""

from __future__ import annotations

import ast
import re
import textwrap
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ANY = re.compile(r"\bAny\b")
IMPORT_LINE = re.compile(r"^\s*(from\s+\S+\s+)?import\b")
MAX_ANY_LINES = 150  # about 110 now (368 before they were typed); the honest rest is redis-py's and IPython's

FLOORS: tuple[tuple[str, ...], ...] = (
    ("solutions",),  # the worker, the producer and what they share: imports nothing of labs
    ("labs.nbtypes",),  # typed faces of nbformat and nbconvert, for every room that reads notebooks
    # the small helpers every room may use (standard library and solutions only)
    ("labs", "labs.polling", "labs.report", "labs.replies", "labs.kit", "labs.notebook_release"),
    ("labs.launcher",),  # Redis, Sentinel, Cluster, Prometheus and the other brokers on this machine
    ("labs.experiments",),  # one fault or measurement each, on a launched topology
    ("labs.lab1", "labs.lab3", "labs.bench", "labs.flavour_matrix"),  # the labs, the bench, the flavour matrix
    ("labs.panels",),  # live panels and quizzes in the notebooks
    ("labs.exercises",),  # the notebooks' exercises and their checks
    ("labs.grading",),  # the gradebook, the sandbox and the student edition's release
    ("labs.compare",),  # Redis next to RabbitMQ and NATS
    ("labs.__main__",),  # python -m labs
)
"""Floors of rooms, bottom first: the one written statement of the layering (DESIGN.md, Style)."""

# Upward arrows still allowed, as (importing module, imported module), each with why; empty is the
# goal (issue 41, item 3): the lead removes an entry once its owner moved what both need below both.
ALLOWED_UPWARD: dict[tuple[str, str], str] = {}


def _modules(root: Path) -> dict[str, Path]:
    modules = {}
    for path in [*root.glob("solutions/**/*.py"), *root.glob("labs/**/*.py")]:
        name = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        modules[name] = path
    return modules


def _graph(root: Path = ROOT) -> dict[str, set[str]]:
    modules = _modules(root)
    edges: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        try:
            source = path.read_text()
        except FileNotFoundError:  # removed while the tree was read
            continue
        for node in ast.walk(ast.parse(source)):
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


def room_of(module: str) -> str | None:
    """The room of ``module``: the longest name of :data:`FLOORS` it is or lies under (None: in no room)."""
    rooms = [r for floor in FLOORS for r in floor if module == r or module.startswith(f"{r}.")]
    return max(rooms, key=len, default=None)


def floor_of(room: str) -> int:
    return next(i for i, floor in enumerate(FLOORS) if room in floor)


def upward_arrows(edges: dict[str, set[str]]) -> list[str]:
    """Every import from a room into another room on its own floor or above (none allowed)."""
    found = []
    for module, targets in sorted(edges.items()):
        here = room_of(module)
        for target in sorted(targets):
            there = room_of(target)
            if here is None or there is None or here == there or (module, target) in ALLOWED_UPWARD:
                continue
            if floor_of(there) >= floor_of(here):
                found.append(f"{module} ({here}, floor {floor_of(here)}) -> "
                             f"{target} ({there}, floor {floor_of(there)})")
    return found


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


def test_every_module_lives_in_a_room_of_the_floors() -> None:
    """The floors name the tree: a new folder or root module of labs/ is placed on a floor before it is used."""
    homeless = sorted(m for m in _modules(ROOT) if room_of(m) is None)
    assert homeless == [], f"add these to a floor of FLOORS in {__file__}: {homeless}"
    rooms = {room_of(m) for m in _modules(ROOT)}
    gone = sorted(r for floor in FLOORS for r in floor if r not in rooms)
    assert gone == [], f"rooms of FLOORS no longer in the tree (remove them): {gone}"


def test_every_arrow_points_down_a_floor() -> None:
    found = upward_arrows(_graph())
    assert found == [], (
        f"{len(found)} import(s) into a room on the same floor or above (move what both need below both):\n"
        + "\n".join(found)
    )


def test_every_allowed_upward_arrow_is_still_there() -> None:
    """An allowed arrow that is gone leaves the list, so the list only shrinks."""
    edges = _graph()
    assert sorted(pair for pair in ALLOWED_UPWARD if pair[1] not in edges.get(pair[0], set())) == []


def test_the_layering_check_fails_on_an_upward_import(tmp_path: Path) -> None:
    """A scratch tree where the launcher imports the grading: the check names that arrow and only it."""
    files = {
        "solutions/__init__.py": "",
        "solutions/settings.py": "import dataclasses\n",
        "labs/__init__.py": "",
        "labs/launcher/__init__.py": "",
        "labs/launcher/process.py": "from solutions import settings\n",
        "labs/launcher/ports.py": "def free() -> int:\n    from labs.grading import sandbox\n    return 0\n",
        "labs/grading/__init__.py": "",
        "labs/grading/sandbox.py": "from labs.launcher import process\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(textwrap.dedent(text))
    found = upward_arrows(_graph(tmp_path))
    assert found == ["labs.launcher.ports (labs.launcher, floor 3) -> labs.grading.sandbox (labs.grading, floor 8)"]
    assert _cycles(_graph(tmp_path)) == []


def test_two_rooms_on_one_floor_do_not_import_each_other(tmp_path: Path) -> None:
    for name, text in {"labs/__init__.py": "", "labs/lab1/__init__.py": "", "labs/lab1/run.py": "",
                       "labs/lab3/__init__.py": "", "labs/lab3/run.py": "from labs.lab1 import run\n"}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    found = upward_arrows(_graph(tmp_path))
    assert found == ["labs.lab3.run (labs.lab3, floor 5) -> labs.lab1.run (labs.lab1, floor 5)"]


def test_the_worker_on_one_stream_loads_nothing_of_the_cluster() -> None:
    reached = _reach(_graph(), "solutions.worker")
    assert {"solutions.cluster_router", "solutions.cluster_site", "solutions.slot_map", "solutions.shards"} & reached \
        == set()


def test_any_stays_rare() -> None:
    """Lines of solutions/ and labs/ that name ``Any`` (imports aside) stay under :data:`MAX_ANY_LINES`."""
    per_file: Counter[str] = Counter()
    for path in [*ROOT.glob("solutions/**/*.py"), *ROOT.glob("labs/**/*.py")]:
        for line in path.read_text().splitlines():
            if ANY.search(line) and not IMPORT_LINE.match(line):
                per_file[str(path.relative_to(ROOT))] += 1
    total = sum(per_file.values())
    worst = ", ".join(f"{name} ({n})" for name, n in per_file.most_common(5))
    assert total < MAX_ANY_LINES, (
        f"{total} lines name typing.Any (at most {MAX_ANY_LINES - 1}); give them real types "
        f"(object, a TypedDict, a Protocol, the library's class). Most in: {worst}"
    )
