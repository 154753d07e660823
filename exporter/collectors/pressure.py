"""Pressure stall information (PSI): time tasks stalled for lack of CPU, I/O or memory.

Reads ``total=`` (microseconds) from the ``some`` and ``full`` lines of /proc/pressure/{cpu,io,memory}.
``some`` counts time at least one task stalled, ``full`` time all non-idle tasks stalled at once.
A kernel without PSI (before 4.20, CONFIG_PSI off, or booted with psi=0) has no such files, or files that
refuse reads: then there are no series, which is not a failure. ::

    bottleneck_pressure_seconds_total{kind="some",resource="cpu"} 6.938624
    bottleneck_pressure_seconds_total{kind="full",resource="io"} 2.888161
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from prometheus_client.metrics_core import CounterMetricFamily, Metric

from exporter.collectors.base import Context, register
from exporter.procfs import read_text

RESOURCES = ("cpu", "io", "memory")


def parse_pressure(text: str) -> dict[str, int]:
    """{"some" / "full": total stall in microseconds} from one /proc/pressure file."""
    totals: dict[str, int] = {}
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        for field in rest.split():
            key, _, value = field.partition("=")
            if key == "total" and kind in ("some", "full") and value.isdigit():
                totals[kind] = int(value)
    return totals


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
            text = read_text(os.path.join(self.procfs, "pressure", resource))
            for kind, microseconds in parse_pressure(text or "").items():
                family.add_metric([resource, kind], microseconds / 1e6)
                found = True
        if found:
            yield family
