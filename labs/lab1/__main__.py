"""``python -m labs.lab1``: run lab 1 (see ``python -m labs.lab1 --help``)."""

from labs.lab1.run import main

raise SystemExit(main())
