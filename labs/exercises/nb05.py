"""Exercise checks of notebook 05 (`check("05.K")`); see ``notebooks/CONVENTIONS.md``."""

from __future__ import annotations

from labs.exercises.exercise import Exercise

EXERCISES: tuple[Exercise, ...] = ()
