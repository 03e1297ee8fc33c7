"""Exercise checks of notebook 04 (`check("04.K")`); see ``notebooks/CONVENTIONS.md``."""

from __future__ import annotations

from labs.exercises.exercise import Exercise

EXERCISES: tuple[Exercise, ...] = ()
