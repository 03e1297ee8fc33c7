"""``python -m labs.grading``: see :mod:`labs.grading.cli`."""

from labs.grading.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
