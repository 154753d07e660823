"""The scrape writer (bottleneck_exporter.web.exposition) writes what prometheus_client writes, byte for byte, in the
text format and in OpenMetrics: on every family the exporter yields (all collectors, a recorded GPU profile, the
push receiver, prometheus_client's own process and GC families) and on families built to be awkward."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeHistogramMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    StateSetMetricFamily,
    SummaryMetricFamily,
    UnknownMetricFamily,
)
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, choose_encoder, generate_latest
from prometheus_client.gc_collector import GCCollector
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.samples import Exemplar

from bottleneck_exporter import parts
from bottleneck_exporter.cli import build_parser
from bottleneck_exporter.collectors.orchestrator import Orchestrator
from bottleneck_exporter.training.registry import TrainingRegistry
from bottleneck_exporter.web import exposition
from bottleneck_exporter.web.exposition import choose, go_float, openmetrics_format, text_format
from bottleneck_exporter.wire.encode import encode
from tests.datagrams import full_payload

ROOT = Path(__file__).resolve().parent.parent
PROFILES = ROOT / "tests" / "fixtures" / "gpu-profiles"
HOST = ROOT / "tests" / "fixtures" / "host"
# What Prometheus 2.x and 3.x ask a target for.
PROMETHEUS_2 = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
                "text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
PROMETHEUS_3 = ("application/openmetrics-text;version=1.0.0;escaping=allow-utf-8,application/openmetrics-text;"
                "version=0.0.1;q=0.75,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.5,"
                "text/plain;version=0.0.4;q=0.4,*/*;q=0.1")


class Frozen:
    """One collection kept: both writers must see the same values."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


def assert_written_as_the_library_writes(families: list[Metric]) -> None:
    frozen = Frozen(families)
    assert text_format(frozen).decode() == generate_latest(frozen).decode()  # type: ignore[arg-type]
    assert openmetrics_format(frozen).decode() == openmetrics_latest(frozen).decode()


def exporter_families(tmp_path: Path, *flags: str) -> list[Metric]:
    """Everything the exporter's registry yields with these flags (parsed as the command line parses them)."""
    args = build_parser().parse_args([f"--push.socket={tmp_path}/push.sock", *flags])
    running = parts.build_parts(args, {}, TrainingRegistry(), "")
    registry = CollectorRegistry(auto_describe=False)
    for extra in (ProcessCollector, PlatformCollector, GCCollector):
        extra(registry=registry)
    registry.register(Orchestrator(running))
    parts.start(running)
    try:
        # Two ranks' datagrams with every optional part, as the hook sends them.
        for rank in (0, 1):
            running[parts.PUSH].handle(encode(full_payload("resnet50", rank)))  # type: ignore[attr-defined]
        return list(registry.collect())
    finally:
        parts.stop(running)


def test_every_family_of_the_exporter_on_this_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    families = exporter_families(tmp_path)
    assert len(families) > 40, [f.name for f in families]
    assert_written_as_the_library_writes(families)
    # ...and by this writer itself, none of them left to the library's.
    frozen = Frozen(families)
    expected = text_format(frozen), openmetrics_format(frozen)

    def library(*_: object, **__: object) -> bytes:
        raise AssertionError("a family was left to prometheus_client's writer")

    monkeypatch.setattr(exposition, "generate_latest", library)
    monkeypatch.setattr(exposition.openmetrics_exposition, "generate_latest", library)
    assert (text_format(frozen), openmetrics_format(frozen)) == expected


@pytest.mark.parametrize("profile", sorted(path.stem for path in PROFILES.glob("*.yaml")))
def test_every_family_of_a_recorded_gpu_and_the_fixture_host(tmp_path: Path, profile: str) -> None:
    families = exporter_families(tmp_path, f"--collector.gpu.profile={PROFILES / f'{profile}.yaml'}",
                                 f"--path.procfs={HOST / 'proc'}", f"--path.sysfs={HOST / 'sys'}")
    assert any(s.labels.get("collector") == "gpu" for f in families for s in f.samples)
    assert_written_as_the_library_writes(families)


def awkward_families() -> list[Metric]:
    counter = CounterMetricFamily("jobs_done", "Jobs done.\nSecond line with a \\ backslash.", labels=["path", "who"])
    counter.add_metric(['C:\\data\n"quoted"', "ünïcode ✓"], 3)
    counter.add_metric(["plain", ""], 0)
    created = CounterMetricFamily("requests", "Requests, with a created time.", labels=["code"], created=1.7e9)
    created.add_metric(["200"], 12, created=1.7e9)
    gauge = GaugeMetricFamily("temperature_celsius", 'Help with "quotes".', labels=["sensor"], unit="celsius")
    for index, value in enumerate((math.nan, math.inf, -math.inf, -0.0, 0.1 + 0.2, 1e22, 1234567.0, 123456.7,
                                   12345678.9, -12345678.9, 2**62, True, 5e-324)):
        gauge.add_metric([f"s{index}"], value)
    stamped = GaugeMetricFamily("stamped", "A sample with a timestamp.", labels=["a"])
    stamped.add_metric(["1"], 1, timestamp=1700000000.123)
    histogram = HistogramMetricFamily("latency_seconds", "Latency.", labels=["route"])
    histogram.add_metric(["/"], [("0.1", 1), ("1.0", 3), ("+Inf", 4)], sum_value=2.5)
    exemplary = HistogramMetricFamily("sized_bytes", "With an exemplar.")
    exemplary.add_metric([], [("1.0", 1, Exemplar({"trace_id": "abc"}, 0.5)), ("+Inf", 2)], sum_value=3)
    summary = SummaryMetricFamily("rpc_seconds", "RPC time.", labels=["method"])
    summary.add_metric(["get"], count_value=10, sum_value=1.5)
    info = InfoMetricFamily("build", "Build information.")
    info.add_metric([], {"version": "1.2.3", "revision": 'a"b'})
    stateset = StateSetMetricFamily("mode", "Modes.", labels=["unit"])
    stateset.add_metric(["u1"], {"on": True, "off": False})
    gauge_histogram = GaugeHistogramMetricFamily("queue_size", "Queue sizes.")
    gauge_histogram.add_metric([], [("1.0", 2), ("+Inf", 5)], gsum_value=7)
    unknown = UnknownMetricFamily("mystery", "Untyped.", labels=["x"])
    unknown.add_metric(["y"], 42)
    empty = GaugeMetricFamily("nothing_yet", "A family with no samples.")
    return [counter, created, gauge, stamped, histogram, exemplary, summary, info, stateset, gauge_histogram,
            unknown, empty]


@pytest.mark.parametrize("family", awkward_families(), ids=lambda family: family.name)
def test_an_awkward_family_is_written_as_the_library_writes_it(family: Metric) -> None:
    assert_written_as_the_library_writes([family])


def test_awkward_families_together_and_after_a_family_left_to_the_library() -> None:
    families = awkward_families()
    assert_written_as_the_library_writes(families + families[::-1])


def test_values_are_written_as_go_writes_them() -> None:
    assert [go_float(v) for v in (math.nan, math.inf, -math.inf, 1.0, 1e22, 1234567.0, 0.5, 10**6, 10**7)] == [
        "NaN", "+Inf", "-Inf", "1.0", "1e+22", "1.234567e+06", "0.5", "1e+06", "1e+07"]


@pytest.mark.parametrize("accept, writer", [
    ("", text_format), ("*/*", text_format), ("text/plain;version=0.0.4", text_format),
    (PROMETHEUS_2, text_format), (PROMETHEUS_3, text_format),
    ("application/openmetrics-text", openmetrics_format),
    ("application/openmetrics-text; version=1.0.0", openmetrics_format),
])
def test_a_client_gets_the_format_it_asks_for_written_by_us(accept: str, writer: object) -> None:
    chosen, content_type = choose(accept)
    assert chosen is writer
    if writer is text_format:
        assert content_type == CONTENT_TYPE_PLAIN_0_0_4
    else:  # the content type prometheus_client would answer with
        assert content_type == choose_encoder(accept)[1]


@pytest.mark.parametrize("accept", [
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8",
    "text/plain;version=1.0.0;escaping=allow-utf-8",
    "application/openmetrics-text;version=0.0.1",
])
def test_a_format_we_do_not_write_is_left_to_prometheus_client(accept: str) -> None:
    chosen, content_type = choose(accept)
    assert (chosen, content_type) != (text_format, CONTENT_TYPE_PLAIN_0_0_4) and chosen is not openmetrics_format
    library, library_type = choose_encoder(accept)
    assert content_type == library_type
    frozen = Frozen(awkward_families())
    assert chosen(frozen) == library(frozen)  # type: ignore[arg-type]
