"""The daemon as a whole: failure isolation, no torch in the daemon, a live scrape that promtool accepts."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterable

import requests
from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families

from bottleneck_exporter import __version__
from bottleneck_exporter.collectors.orchestrator import Orchestrator
from bottleneck_exporter.web.server import serve, start_in_thread
from tests.conftest import free_port, require_tool, wait_until


class _Healthy:
    def collect(self) -> Iterable[Metric]:
        yield GaugeMetricFamily("bottleneck_test_healthy", "A collector that works.", value=1)


class _Broken:
    def collect(self) -> Iterable[Metric]:
        yield GaugeMetricFamily("bottleneck_test_partial", "Yielded before the failure.", value=1)
        raise OSError("disk on fire")


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_a_collector_that_raises_leaves_the_scrape_at_200_with_its_success_at_0() -> None:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Orchestrator({"broken": _Broken(), "healthy": _Healthy()}))
    server = serve(f"127.0.0.1:{free_port()}", registry)
    start_in_thread(server)
    try:
        response = requests.get(f"http://127.0.0.1:{server.server_address[1]}/metrics", timeout=5)
    finally:
        server.shutdown()
    assert response.status_code == 200
    samples = _samples(response.text)
    assert samples[("bottleneck_scrape_collector_success", (("collector", "broken"),))] == 0
    assert samples[("bottleneck_scrape_collector_success", (("collector", "healthy"),))] == 1
    assert samples[("bottleneck_test_healthy", ())] == 1
    # Half a collector's output would be misleading: what it yielded before failing is dropped.
    assert ("bottleneck_test_partial", ()) not in samples


def test_the_daemon_never_imports_torch(tmp_path) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-X", "importtime", "-m", "bottleneck_exporter", f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        # A scrape runs every collector, so lazily imported code is loaded too.
        wait_until(lambda: requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).status_code == 200, 30,
                   "the exporter's first scrape", ignoring=(requests.ConnectionError,))
    finally:
        proc.terminate()
        _, stderr = proc.communicate(timeout=20)
    imported = {line.split("|")[-1].strip() for line in stderr.splitlines() if line.startswith("import time:")}
    assert "bottleneck_exporter.cli" in imported, "importtime output missing: the check would prove nothing"
    assert not {m for m in imported if m == "torch" or m.startswith("torch.")}


def test_live_scrape_passes_promtool_check_metrics(start_exporter) -> None:
    promtool = require_tool("promtool")
    exporter = start_exporter()
    text = exporter.scrape()
    assert "bottleneck_scrape_collector_success" in text
    result = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.strip() == "" and result.stderr.strip() == "", (
        result.stdout + result.stderr
    )
    # Every collector that is on by default succeeded against this machine's real /proc and /sys.
    successes = {k: v for k, v in _samples(text).items() if k[0] == "bottleneck_scrape_collector_success"}
    assert successes and all(value == 1 for value in successes.values()), successes


def test_version_flag() -> None:
    result = subprocess.run([sys.executable, "-m", "bottleneck_exporter", "--version"], capture_output=True, text=True)
    assert result.returncode == 0 and f"bottleneck-exporter {__version__}" in result.stdout
