"""``python -m labs``: the launcher CLI (see ``python -m labs --help``)."""

from labs.launcher.cli import main

raise SystemExit(main())
