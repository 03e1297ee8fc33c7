"""Drive JupyterLab in headless Chromium: start a server, open a notebook, Run All, watch it.

Used by ``tests/test_browser.py``; also runnable by hand to look at the panels::

    .venv/bin/python -m tests.browser_support notebooks/02_consumer_groups.ipynb /tmp/screens

Chromium is Debian's ``/usr/bin/chromium`` (``scripts/ensure-chromium.sh``), driven by
Playwright through ``executable_path``: Playwright's own browser download is never used.
The server is the venv's ``jupyter lab`` on a free port with a token, over a temporary copy
of ``notebooks/``, with the environment inherited (``REDIS_URL``, ``LAB_*``), so a
notebook's kernel uses the same Redis as the test session. ``window.jupyterapp`` is exposed
(``--LabApp.expose_app_in_browser``) so that the test runs commands and reads cell models
instead of clicking menus.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labs.launcher import ports
from labs.polling import poll, poll_value

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path(os.environ.get("CHROMIUM", "/usr/bin/chromium"))
# What this machine needs: no sandbox as root, no GPU, no network beyond loopback.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# A classroom projector's size; BROWSER_VIEWPORT=1920x1080 tries another.
_WIDTH, _HEIGHT = (int(v) for v in os.environ.get("BROWSER_VIEWPORT", "1366x900").split("x"))
VIEWPORT = {"width": _WIDTH, "height": _HEIGHT}
PANEL = ".stream-panel"
PANEL_STATUS = ".stream-panel-status"
PANEL_PLOT = ".stream-panel .js-plotly-plot"

# The notebook's state from its cell models: kernel status, execution counts, error outputs.
NOTEBOOK_STATE_JS = """
() => {
  const widget = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  if (!widget || !widget.content || !widget.content.model || !widget.sessionContext) return null;
  const session = widget.sessionContext.session;
  const kernel = session && session.kernel ? session.kernel.status : null;
  const cells = [];
  const list = widget.content.model.cells;
  for (let i = 0; i < list.length; i++) {
    const cell = list.get(i);
    if (cell.type !== 'code') continue;
    const errors = cell.outputs.toJSON().filter(o => o.output_type === 'error')
      .map(o => `${o.ename}: ${o.evalue}`);
    cells.push({index: i, count: cell.executionCount, errors});
  }
  return {path: widget.context.path, kernel, cells};
}
"""


# Every text a status line takes, recorded as the DOM changes: a browser slowed down by a
# loaded machine applies queued widget updates in a burst, and polling would miss them.
_RECORD_STATUSES_TEMPLATE = """
() => {
  window.STORE = [];
  const record = () => {
    for (const el of document.querySelectorAll('SELECTOR')) {
      const text = el.innerText.trim();
      const seen = window.STORE;
      if (text && (seen.length === 0 || seen[seen.length - 1] !== text)) seen.push(text);
    }
  };
  new MutationObserver(record).observe(document.body, {subtree: true, childList: true, characterData: true});
}
"""


def record_statuses_js(selector: str, store: str) -> str:
    """JS that keeps in ``window[store]`` every distinct text the elements at ``selector`` take."""
    return _RECORD_STATUSES_TEMPLATE.replace("SELECTOR", selector).replace("STORE", store)


RECORD_STATUSES_JS = record_statuses_js(PANEL_STATUS, "__panelStatuses")


def screens_dir() -> Path:
    """Where screenshots go: ``BROWSER_TEST_SCREENS``, else a new temporary directory.

    Kept after the run, so that a person can look at them.
    """
    path = Path(os.environ.get("BROWSER_TEST_SCREENS") or tempfile.mkdtemp(prefix="browser-test-screens-"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def chromium_skip_reason() -> str | None:
    """None when the browser test can run here, else one line saying why not."""
    if not CHROMIUM.exists():
        return f"no {CHROMIUM}: 'make setup' as root installs Debian's chromium (scripts/ensure-chromium.sh)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed ('make setup' installs the test extra)"
    return None


@dataclass
class JupyterServer:
    """A ``jupyter lab`` process over a copy of ``notebooks/``; stop it with :meth:`stop`."""

    root_dir: Path
    port: int
    token: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def url(self, notebook: str) -> str:
        """The notebook in a workspace of its own, so that no other open tab takes the focus."""
        workspace = "run-" + secrets.token_hex(4)
        return f"http://127.0.0.1:{self.port}/lab/workspaces/{workspace}/tree/{notebook}?token={self.token}"

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)  # the server and its kernels
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(5)


def _jupyter_command(work_dir: Path, root_dir: Path, port: int, token: str) -> list[str]:
    command = [
        str(Path(sys.executable).with_name("jupyter")),
        "lab",
        f"--config={ROOT / 'jupyter' / 'jupyter_lab_config.py'}",  # as `make jupyter`: no news prompt, no nbgrader UI
        "--no-browser",
        f"--port={port}",
        "--ServerApp.ip=127.0.0.1",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root_dir}",
        "--LabApp.expose_app_in_browser=True",
        "--LabApp.news_url=None",  # no announcements fetched from the internet
        "--LabApp.extension_manager=readonly",  # no PyPI queries from the extension manager
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        f"--LabApp.user_settings_dir={_settings_dir(work_dir)}",
        f"--LabApp.workspaces_dir={work_dir / 'workspaces'}",  # no tabs restored from elsewhere
    ]
    if os.geteuid() == 0:
        command.append("--allow-root")
    return command


def start_jupyter(work_dir: Path, source: Path = ROOT / "notebooks", timeout_s: float = 60.0) -> JupyterServer:
    """Copy ``source`` (``notebooks/``) into ``work_dir`` and serve it; waits until the API answers."""
    root_dir = work_dir / "notebooks"
    shutil.copytree(source, root_dir, ignore=shutil.ignore_patterns("html", ".ipynb_checkpoints"))
    port, token = ports.free_port(), secrets.token_hex(16)  # below the ephemeral range
    log_path = work_dir / "jupyter.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            _jupyter_command(work_dir, root_dir, port, token),
            cwd=work_dir,
            env={**os.environ, "JUPYTER_RUNTIME_DIR": str(work_dir / "runtime")},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = JupyterServer(root_dir, port, token, process, log_path)

    def answers() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"jupyter lab exited with {process.returncode}:\n{server.log_tail()}")
        with contextlib.suppress(OSError):
            status = f"http://127.0.0.1:{port}/api/status?token={token}"
            with urllib.request.urlopen(status, timeout=2) as reply:
                return bool(reply.status == 200)
        return False

    if poll(answers, timeout_s, poll_s=0.2):
        return server
    server.stop()
    raise RuntimeError(f"jupyter lab did not answer in {timeout_s:g} s:\n{server.log_tail()}")


@contextlib.contextmanager
def chromium_context(profile_dir: Path) -> Iterator[Any]:
    """A Playwright browser context on Debian's Chromium with a fresh profile."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(profile_dir),
            executable_path=str(CHROMIUM),
            headless=True,
            args=CHROMIUM_ARGS,
            viewport=VIEWPORT,
        )
        try:
            yield context
        finally:
            context.close()


@dataclass
class RunReport:
    """What one Run All showed: cell states, panel status texts, console errors, screenshots."""

    notebook: str
    seconds: float = 0.0
    finished: bool = False
    cells: list[dict[str, Any]] = field(default_factory=list)
    statuses: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)
    screenshots: list[Path] = field(default_factory=list)
    panel_width_px: float = 0.0
    output_width_px: float = 0.0
    replay_statuses: list[str] = field(default_factory=list)

    @property
    def cell_errors(self) -> list[str]:
        return [f"cell {c['index']}: {e}" for c in self.cells for e in c["errors"]]

    @property
    def unexecuted(self) -> list[int]:
        return [c["index"] for c in self.cells if c["count"] is None]

    def running_statuses(self) -> list[str]:
        """The distinct Redis figures the panel showed while it was live, in order.

        The live status reads ``идёт: 12 с · XLEN 120 · в PEL 7 · lag 3``; the seconds are
        left out, so that only a change in what Redis reported counts.
        """
        seen: list[str] = []
        for text in self.statuses:
            if "идёт:" not in text:
                continue
            figures = text.split("идёт:", 1)[1].split("·", 1)[-1].strip()
            if figures not in seen:
                seen.append(figures)
        return seen


def _settings_dir(work_dir: Path) -> Path:
    """User settings for the test's JupyterLab: every cell in the DOM.

    Nothing about news: the news prompt is switched off by the settings the repository ships
    (``jupyter/lab/settings/overrides.json``, loaded through ``--config``), as a student gets them.
    """
    settings = work_dir / "lab-settings"
    tracker = settings / "@jupyterlab" / "notebook-extension"
    tracker.mkdir(parents=True)
    # Windowing would leave off-screen cells (the panel too) out of the DOM.
    (tracker / "tracker.jupyterlab-settings").write_text('{"windowingMode": "none"}')
    return settings


def _open_notebook(page: Any, server: JupyterServer, notebook: str, timeout_s: float) -> None:
    page.goto(server.url(notebook), wait_until="domcontentloaded", timeout=timeout_s * 1000)
    page.wait_for_function(
        f"(path) => {{ const s = ({NOTEBOOK_STATE_JS})(); return s && s.path === path && s.kernel === 'idle'; }}",
        arg=notebook,
        timeout=timeout_s * 1000,
        polling=200,
    )


def _done(state: dict[str, Any] | None) -> bool:
    """Run All is over: the kernel is idle and every cell ran, or a cell failed (the rest is skipped)."""
    if not state or state["kernel"] != "idle":
        return False
    cells = state["cells"]
    return all(c["count"] is not None for c in cells) or any(c["errors"] for c in cells)


def _panel_screenshot(page: Any, path: Path, report: RunReport) -> None:
    with contextlib.suppress(Exception):  # a panel re-rendered mid-shot: the next poll tries again
        page.locator(PANEL).first.screenshot(path=str(path), timeout=5000)
        report.screenshots.append(path)


def _shows_live(page: Any) -> bool:
    with contextlib.suppress(Exception):
        return "идёт:" in page.locator(PANEL_STATUS).first.inner_text(timeout=1000)
    return False


def _watch(page: Any, report: RunReport, screens: Path, stem: str, timeout_s: float) -> None:
    """Poll the notebook until Run All is over; collect panel texts and one live screenshot."""
    started = time.monotonic()
    live_shot = False

    def read() -> dict[str, Any] | None:
        nonlocal live_shot
        state: dict[str, Any] | None = page.evaluate(NOTEBOOK_STATE_JS)
        report.statuses = page.evaluate("() => window.__panelStatuses.slice()")
        if not live_shot and len(report.running_statuses()) >= 2 and _shows_live(page):
            _panel_screenshot(page, screens / f"{stem}-panel-live.png", report)
            live_shot = True
        return state

    state = poll_value(read, _done, timeout_s, poll_s=0.1)
    report.seconds = time.monotonic() - started
    if _done(state):
        report.finished = True
        report.cells = state["cells"] if state else []
    else:
        report.cells = (page.evaluate(NOTEBOOK_STATE_JS) or {"cells": []})["cells"]


def _measure_and_shoot(page: Any, report: RunReport, screens: Path, stem: str) -> None:
    panel = page.locator(PANEL)
    if panel.count() == 0:
        return
    panel.first.scroll_into_view_if_needed()
    box = page.locator(PANEL_PLOT).first.bounding_box()
    area = page.locator(".jp-OutputArea-output", has=page.locator(PANEL)).first.bounding_box()
    report.panel_width_px = box["width"] if box else 0.0
    report.output_width_px = area["width"] if area else 0.0
    _panel_screenshot(page, screens / f"{stem}-panel-final.png", report)
    shot = screens / f"{stem}-page.png"
    page.screenshot(path=str(shot))
    report.screenshots.append(shot)


def _replay(page: Any, report: RunReport, shot: Path, timeout_s: float = 15.0) -> None:
    """Click the first panel's replay button; collect the replay's status texts, take one shot."""
    button = page.locator(f"{PANEL} button").first
    if page.locator(PANEL).count() == 0 or not button.is_enabled():
        return
    button.click()

    def read() -> int:
        text = page.locator(PANEL_STATUS).first.inner_text()
        if "повтор" in text and text not in report.replay_statuses:
            report.replay_statuses.append(text)
            if len(report.replay_statuses) == 2:
                _panel_screenshot(page, shot, report)
        return len(report.replay_statuses)

    poll_value(read, lambda seen: seen >= 3, timeout_s, poll_s=0.1)


def run_all(context: Any, server: JupyterServer, notebook: str, screens: Path, timeout_s: float = 120.0) -> RunReport:
    """Open ``notebook`` (a name under the server's root), Run All, and report what happened."""
    report = RunReport(notebook)
    page = context.new_page()
    page.on("console", lambda msg: report.console_errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: report.console_errors.append(f"uncaught: {exc}"))
    try:
        _open_notebook(page, server, notebook, timeout_s=60)
        page.evaluate(RECORD_STATUSES_JS)
        page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
        stem = Path(notebook).stem
        _watch(page, report, screens, stem, timeout_s)
        _measure_and_shoot(page, report, screens, stem)
        if report.finished:
            _replay(page, report, screens / f"{stem}-panel-replay.png")
    finally:
        with contextlib.suppress(Exception):
            page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.shutdown()")
        page.close()
    return report


def main(argv: list[str]) -> int:
    """By hand: run one notebook in the browser and print what was seen."""
    path, screens = Path(argv[0]).resolve(), Path(argv[1] if len(argv) > 1 else tempfile.mkdtemp())
    screens.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="browser-run-") as tmp:
        server = start_jupyter(Path(tmp), path.parent)
        try:
            with chromium_context(Path(tmp) / "profile") as context:
                report = run_all(context, server, path.name, screens)
        finally:
            server.stop()
    names = ("seconds", "finished", "panel_width_px", "output_width_px", "console_errors", "cell_errors")
    for name in (*names, "replay_statuses"):
        print(f"{name}: {getattr(report, name)}")
    print("statuses:", *report.statuses, sep="\n  ")
    print("screenshots:", *report.screenshots, sep="\n  ")
    return 0 if report.finished and not report.cell_errors else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
