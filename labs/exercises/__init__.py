"""Exercise checks that answer back, and the student edition of the notebooks.

A notebook's exercise is three kinds of cells (``notebooks/CONVENTIONS.md`` has the rules):
the student's solution cell, whose ``### BEGIN SOLUTION`` / ``### END SOLUTION`` region the
student edition blanks; and a check cell that calls :func:`check`::

    from labs.exercises import check
    check("02.4")

- :mod:`labs.exercises.exercise`: :class:`~labs.exercises.exercise.Exercise` (id, title, the names
  it reads, ``verify``, hint), :class:`~labs.exercises.exercise.Miss` / ``expect`` for a wrong
  result, and ``evaluate``, which turns every outcome into a Russian one-line Verdict;
- :mod:`labs.exercises.notebook`: :func:`check` and :func:`hint`, the calls a notebook makes;
- ``labs.exercises.nb01`` ... ``nb10``: one module per notebook, each with its ``EXERCISES``;
- :mod:`labs.exercises.edition`: ``make student``, the student edition (nbgrader's ``ClearSolutions``).
"""

from labs.exercises.notebook import CheckFailed, check, hint

__all__ = ["CheckFailed", "check", "hint"]
