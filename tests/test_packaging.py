"""environment.yml (conda) and pyproject.toml (pip) pin the same packages at the same versions."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
# PyPI name -> conda-forge name, where they differ.
CONDA_NAMES = {"redis": "redis-py", "prometheus-client": "prometheus_client"}


def _pyproject_pins() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        reqs += extra
    pins = {}
    for req in reqs:
        pinned = re.fullmatch(r"([A-Za-z0-9_.-]+)(?:\[[^\]]+\])?==(\S+)", req)
        assert pinned is not None, f"{req!r} is not pinned with =="
        name, version = pinned.groups()
        pins[name.lower()] = version
    return pins


def _environment_pins() -> dict[str, str]:
    deps = yaml.safe_load((ROOT / "environment.yml").read_text())["dependencies"]
    pins = {}
    for dep in deps:
        if isinstance(dep, dict):
            for line in dep["pip"]:
                if match := re.fullmatch(r"([A-Za-z0-9_.-]+)(?:\[[^\]]+\])?==(\S+)", line):
                    pins[match.group(1).lower()] = match.group(2)
        elif match := re.fullmatch(r"([A-Za-z0-9_.-]+)=(\d\S*)", dep):
            pins[match.group(1).lower()] = match.group(2)
    return pins


def test_every_pyproject_pin_is_in_environment_yml_at_the_same_version() -> None:
    conda = _environment_pins()
    for name, version in _pyproject_pins().items():
        conda_name = CONDA_NAMES.get(name, name)
        assert conda.get(conda_name) == version, f"{name}=={version} vs environment.yml {conda.get(conda_name)}"


def test_environment_yml_pins_nothing_pyproject_lacks() -> None:
    pip_names = {CONDA_NAMES.get(n, n) for n in _pyproject_pins()}
    extra = set(_environment_pins()) - pip_names - {"python"}
    assert not extra, f"environment.yml pins packages pyproject.toml lacks: {sorted(extra)}"


def test_environment_yml_brings_redis_server_and_the_project() -> None:
    deps = yaml.safe_load((ROOT / "environment.yml").read_text())["dependencies"]
    assert any(str(d).startswith("redis-server") for d in deps)
    pip = next(d["pip"] for d in deps if isinstance(d, dict))
    assert "-e ." in pip
