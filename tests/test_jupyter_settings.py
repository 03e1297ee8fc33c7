"""jupyter/: the JupyterLab settings `make jupyter` ships name real plugins, settings and extensions.

The browser tests prove the effect (no "get notified about Jupyter news?" prompt); this test
catches a renamed plugin id or setting at once, without a browser.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from traitlets.config import PyFileConfigLoader

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = ROOT / "jupyter" / "lab" / "settings"
SCHEMAS = Path(sys.prefix) / "share" / "jupyter" / "lab" / "schemas"
LABEXTENSIONS = Path(sys.prefix) / "share" / "jupyter" / "labextensions"

pytestmark = pytest.mark.timeout(30)


def test_every_override_is_a_setting_of_an_installed_plugin() -> None:
    overrides = json.loads((SETTINGS / "overrides.json").read_text())
    assert overrides["@jupyterlab/apputils-extension:notification"]["fetchNews"] == "false"
    for plugin_id, values in overrides.items():
        package, plugin = plugin_id.split(":")
        schema = json.loads((SCHEMAS / package / f"{plugin}.json").read_text())
        for key, value in values.items():
            spec = schema["properties"][key]
            allowed = [choice["const"] for choice in spec.get("oneOf", [])]
            assert value in allowed if allowed else isinstance(value, bool), (plugin_id, key, value)


def test_the_disabled_extensions_exist_and_the_config_points_at_the_settings() -> None:
    disabled = json.loads((SETTINGS / "page_config.json").read_text())["disabledExtensions"]
    for name in disabled:
        assert (LABEXTENSIONS / name / "package.json").exists(), f"{name} is not an installed lab extension"
    config = PyFileConfigLoader("jupyter_lab_config.py", path=str(ROOT / "jupyter")).load_config()
    assert Path(config.LabApp.app_settings_dir) == SETTINGS
    assert all(name.startswith("nbgrader.") and not on for name, on in config.ServerApp.jpserver_extensions.items())
