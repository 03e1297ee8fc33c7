"""``python -m labs.lab3``: see :mod:`labs.lab3.run`."""

from labs.lab3.run import main

raise SystemExit(main())
