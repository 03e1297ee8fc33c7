"""Exercise checks of notebook 06 (`check("06.K")`); see ``notebooks/CONVENTIONS.md``."""

from __future__ import annotations

from labs.exercises.exercise import Exercise

EXERCISES: tuple[Exercise, ...] = ()
