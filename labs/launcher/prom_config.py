"""What the monitoring add-on writes for Prometheus and the exporters: prometheus.yml and the collect script.

prometheus.yml is written as JSON (every JSON document is YAML, so no YAML library is needed):
scrape and rule evaluation every 2 s, one static target per exporter labelled with its
``topology`` and Redis ``node``, the workers by file-based service discovery, and the lab copy of
the rules (:mod:`labs.launcher.rule_scale`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from labs.launcher.rule_scale import MONITORING_DIR

SCRAPE_INTERVAL_S = 2
LUA_SOURCE = MONITORING_DIR / "exporter" / "stream_metrics.lua"
_PATTERNS_LINE = re.compile(r"^local PATTERNS = \{.*\}.*$", re.MULTILINE)


@dataclass(frozen=True)
class ExporterTarget:
    """One exporter as Prometheus sees it: where it listens and which Redis node it watches."""

    port: int
    topology: str
    node_port: int
    sentinel: bool

    @property
    def job(self) -> str:
        return "redis-sentinel" if self.sentinel else "redis"


def prometheus_config(
    *, prometheus_port: int, exporters: list[ExporterTarget], rules_dir: Path, workers_dir: Path
) -> str:
    """The whole prometheus.yml (as JSON)."""
    interval = f"{SCRAPE_INTERVAL_S}s"
    scrape_configs: list[dict[str, object]] = []
    for job in ("redis", "redis-sentinel"):
        static = [
            {"targets": [f"127.0.0.1:{e.port}"], "labels": {"topology": e.topology, "node": f"127.0.0.1:{e.node_port}"}}
            for e in exporters
            if e.job == job
        ]
        if static:
            scrape_configs.append({"job_name": job, "static_configs": static})
    scrape_configs += [
        {
            "job_name": "billing-worker",
            # the worker labels its own series with stream, group and consumer: keep them as they are
            "honor_labels": True,
            "file_sd_configs": [{"files": [str(workers_dir / "*.json")], "refresh_interval": "5s"}],
        },
        {"job_name": "prometheus", "static_configs": [{"targets": [f"127.0.0.1:{prometheus_port}"]}]},
    ]
    config = {
        "global": {
            "scrape_interval": interval,
            "scrape_timeout": interval,
            "evaluation_interval": interval,
            "external_labels": {"lab": "redis-workbook"},
        },
        "rule_files": [str(rules_dir / "*.yml")],
        "scrape_configs": scrape_configs,
    }
    return json.dumps(config, indent=2) + "\n"


def collect_script(patterns: tuple[str, ...], source: Path = LUA_SOURCE) -> str:
    """monitoring/exporter/stream_metrics.lua with its PATTERNS line set to ``patterns``."""
    listed = ", ".join(json.dumps(p) for p in patterns)
    line = f"local PATTERNS = {{{listed}}}  -- written by labs.launcher.monitoring"
    text, n = _PATTERNS_LINE.subn(line, source.read_text())
    if n != 1:
        raise ValueError(f"{source} has no 'local PATTERNS = {{...}}' line to fill in")
    return text
