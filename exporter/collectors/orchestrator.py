"""Runs the enabled collectors on every scrape and isolates their failures.

Exposes, besides what the collectors yield::

    bottleneck_scrape_collector_success{collector="gpu"} 1.0
    bottleneck_scrape_collector_duration_seconds{collector="gpu"} 0.0031
    bottleneck_build_info{version="0.1.0",python_version="3.11.7"} 1.0

A collector that raises loses only its own series for that scrape: the rest of the scrape is served
and its success gauge reads 0 (node_exporter's model).
"""

from __future__ import annotations

import logging
import platform
import time
from collections.abc import Iterable, Mapping

from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from exporter import __version__
from exporter.collectors.base import Collector

log = logging.getLogger(__name__)


class Orchestrator:
    def __init__(self, collectors: Mapping[str, Collector]) -> None:
        self.collectors = dict(collectors)

    def collect(self) -> Iterable[Metric]:
        success = GaugeMetricFamily(
            "bottleneck_scrape_collector_success",
            "Whether a collector succeeded on this scrape (1) or raised (0).",
            labels=["collector"],
        )
        duration = GaugeMetricFamily(
            "bottleneck_scrape_collector_duration_seconds",
            "Time a collector took on this scrape.",
            labels=["collector"],
        )
        for name, collector in self.collectors.items():
            start = time.perf_counter()
            try:
                # Materialise inside the try: a generator raises only when iterated.
                families = list(collector.collect())
            except Exception:
                log.exception("collector %s failed", name)
                families = []
                ok = 0.0
            else:
                ok = 1.0
            duration.add_metric([name], time.perf_counter() - start)
            success.add_metric([name], ok)
            yield from families
        yield success
        yield duration
        build = GaugeMetricFamily(
            "bottleneck_build_info",
            "Version of bottleneck-exporter and the Python running it; value is always 1.",
            labels=["version", "python_version"],
        )
        build.add_metric([__version__, platform.python_version()], 1.0)
        yield build
