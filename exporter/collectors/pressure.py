"""Pressure stall information (PSI): time tasks stalled for lack of CPU, I/O or memory.

Reads ``total=`` (microseconds) from the ``some`` and ``full`` lines of /proc/pressure/{cpu,io,memory}.
``some`` counts time at least one task stalled, ``full`` time all non-idle tasks stalled at once.
A kernel without PSI (before 4.20, CONFIG_PSI off, or booted with psi=0) has no such files, or files that
refuse reads: then there are no series, which is not a failure. ::

    bottleneck_pressure_seconds_total{kind="some",resource="cpu"} 6.938624
    bottleneck_pressure_seconds_total{kind="full",resource="io"} 2.888161
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.metrics_core import CounterMetricFamily, Metric

from bottleneck_exporter.collectors.base import Context, register
from bottleneck_exporter.procfs import read_pressure

RESOURCES = ("cpu", "io", "memory")


@register("pressure",
          help="Pressure stall information: time stalled on CPU, I/O and memory (/proc/pressure).")
class PressureCollector:
    def __init__(self, ctx: Context) -> None:
        self.procfs = ctx.procfs

    def collect(self) -> Iterable[Metric]:
        family = CounterMetricFamily(
            "bottleneck_pressure_seconds_total",
            "Time some (kind=some) or all non-idle (kind=full) tasks stalled waiting for a resource (PSI).",
            labels=["resource", "kind"],
        )
        found = False
        for resource in RESOURCES:
            for kind, microseconds in (read_pressure(self.procfs, resource) or {}).items():
                family.add_metric([resource, kind], microseconds / 1e6)
                found = True
        if found:
            yield family
