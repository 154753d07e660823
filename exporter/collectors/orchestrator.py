"""Runs the enabled collectors on every scrape and isolates their failures.

Exposes, besides what the collectors yield::

    bottleneck_scrape_collector_success{collector="gpu"} 1.0
    bottleneck_scrape_collector_duration_seconds{collector="gpu"} 0.0031
    bottleneck_build_info{version="0.1.0",python_version="3.11.7"} 1.0

A collector that raises loses only its own series for that scrape: the rest of the scrape is served
and its success gauge reads 0 (node_exporter's model). The log says so once when a collector starts failing
and once when it recovers, not on every scrape: a broken file read every 15 s would otherwise fill the
journal with the same traceback. A file that does not parse gets one line naming the file and the field;
anything else (a bug) gets its traceback, once.
"""

from __future__ import annotations

import logging
import platform
import threading
import time
from collections.abc import Iterable, Mapping

from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from bottleneck_exporter import __version__
from bottleneck_exporter.collectors.base import Collector
from bottleneck_exporter.procfs import ProcParseError

log = logging.getLogger(__name__)


class Orchestrator:
    def __init__(self, collectors: Mapping[str, Collector]) -> None:
        self.collectors = dict(collectors)
        self._failing: set[str] = set()
        self._failing_lock = threading.Lock()  # scrapes run concurrently, one HTTP thread each

    def _record(self, name: str, error: Exception | None) -> None:
        """Log a collector's change of state (ok -> failing -> ok), nothing while it stays the same."""
        with self._failing_lock:
            was_failing = name in self._failing
            if error is None:
                if was_failing:
                    self._failing.discard(name)
                    log.info("collector %s recovered", name)
                return
            if was_failing:
                return
            self._failing.add(name)
        expected = isinstance(error, ProcParseError)
        log.error("collector %s failed: %s (logged again only after it recovers)", name,
                  error if expected else f"{type(error).__name__}: {error}", exc_info=None if expected else error)

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
            except Exception as error:
                self._record(name, error)
                families = []
                ok = 0.0
            else:
                self._record(name, None)
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

