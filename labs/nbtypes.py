"""Typed faces of the notebook libraries: nbformat's functions and nbconvert's exporter.

nbformat ships ``py.typed`` but leaves its functions unannotated, and so do nbconvert's exporter
methods: under mypy's strict mode each call of one is an untyped call returning ``Any``. This
module gives each the types its documentation states, once (a ``cast`` of the function, never of
a value), so the rest of the tree calls typed functions. Notebooks are version 4 throughout, the
only format of the course.

nbconvert is imported only by :func:`exporter` (its import takes a while); nbformat here, as
every caller of this module reads or writes notebooks.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, cast

import nbformat
from nbformat import NotebookNode
from nbformat.v4 import nbbase

if TYPE_CHECKING:
    from nbconvert.exporters import NotebookExporter
    from nbconvert.preprocessors import Preprocessor
    from traitlets.config import Config

__all__ = [
    "NotebookNode",
    "copy",
    "data_output",
    "error_output",
    "exporter",
    "markdown_cell",
    "read",
    "reads",
    "stream_output",
    "write",
    "writes",
]

VERSION = 4
Json = str | int | float | bool | None | list["Json"] | dict[str, "Json"]
"""A JSON value, as ``json.loads`` returns it (an output's data and metadata)."""

# nbformat's unannotated functions with the types their docstrings give; the version argument is ours.
_read = cast("Callable[[str, int], NotebookNode]", nbformat.read)
_reads = cast("Callable[[str, int], NotebookNode]", nbformat.reads)
_write = cast("Callable[[NotebookNode, str], None]", nbformat.write)
_writes = cast("Callable[[NotebookNode], str]", nbformat.writes)
_from_dict = cast("Callable[[Json], NotebookNode]", nbformat.from_dict)


def read(path: str | Path) -> NotebookNode:
    """The notebook at ``path``, as version 4 (``nbformat.read``)."""
    return _read(str(path), VERSION)


def reads(text: str) -> NotebookNode:
    """The notebook in ``text`` (an ``.ipynb`` file's content), as version 4 (``nbformat.reads``)."""
    return _reads(text, VERSION)


def write(nb: NotebookNode, path: str | Path) -> None:
    """``nb`` written to ``path`` (``nbformat.write``)."""
    _write(nb, str(path))


def writes(nb: NotebookNode) -> str:
    """``nb`` as the text of an ``.ipynb`` file (``nbformat.writes``)."""
    return _writes(nb)


def copy(node: NotebookNode) -> NotebookNode:
    """A deep copy of ``node`` made of JSON only (no object a kernel or a submission slipped in)."""
    return _from_dict(json.loads(json.dumps(node)))


def markdown_cell(source: str, cell_id: str) -> NotebookNode:
    """A new markdown cell (``nbformat.v4.new_markdown_cell``)."""
    return cast("Callable[..., NotebookNode]", nbbase.new_markdown_cell)(source, id=cell_id)


_new_output = cast("Callable[..., NotebookNode]", nbbase.new_output)  # its fields vary with the kind


def stream_output(name: str, text: str) -> NotebookNode:
    """A ``stream`` output (``name``: stdout or stderr)."""
    return _new_output("stream", name=name, text=text)


def error_output(ename: str, evalue: str, traceback: list[str]) -> NotebookNode:
    """An ``error`` output."""
    return _new_output("error", ename=ename, evalue=evalue, traceback=traceback)


def data_output(kind: str, data: Mapping[str, Json], metadata: Mapping[str, Json],
                execution_count: int | None = None) -> NotebookNode:
    """A ``display_data`` output, or an ``execute_result`` (``kind``) with its ``execution_count``."""
    extra = {"execution_count": execution_count} if kind == "execute_result" else {}
    return _new_output(kind, data=dict(data), metadata=dict(metadata), **extra)


def exporter(config: Config, preprocessors: Iterable[Preprocessor]) -> NotebookExporter:
    """nbconvert's ``NotebookExporter`` with ``config`` and each of ``preprocessors`` enabled."""
    from nbconvert.exporters import NotebookExporter

    made = cast("Callable[[Config], NotebookExporter]", NotebookExporter)(config)
    register = cast("Callable[[Preprocessor, bool], Preprocessor]", made.register_preprocessor)
    for preprocessor in preprocessors:
        register(preprocessor, True)
    return made
