"""Exercise checks of notebook 08 (`check("08.K")`); see ``notebooks/CONVENTIONS.md``."""

from __future__ import annotations

from labs.exercises.exercise import Exercise

EXERCISES: tuple[Exercise, ...] = ()
