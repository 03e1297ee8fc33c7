"""Exercise checks of notebook 03 (`check("03.K")`); see ``notebooks/CONVENTIONS.md``."""

from __future__ import annotations

from labs.exercises.exercise import Exercise

EXERCISES: tuple[Exercise, ...] = ()
