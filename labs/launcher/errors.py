"""The one exception type the launcher raises for problems a person must fix."""


class LauncherError(RuntimeError):
    """A problem worth one clear line: a missing binary, a busy port, a dead process.

    The CLI prints ``error: <message>`` and exits 2 instead of showing a traceback.
    """
