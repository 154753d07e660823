"""The catalogue's verdicts, one module per area, as node-mixin keeps ``alerts/<area>.libsonnet``.

Each area holds the verdicts of one alert group (``bottleneck-<area>``), the recording rules they record and
the signals only the dashboards draw: ``training`` (what a job's ranks report), ``node`` (the host and the
loaders on it), ``gpu`` (NVML or dcgm-exporter), ``exporter`` (the monitoring itself). Adding a verdict touches
its area's module and its scenarios (``bottleneck_exporter.heuristics.scenarios.<area>``), nothing else.
"""

from __future__ import annotations

from bottleneck_exporter.heuristics.areas import exporter, gpu, node, training
from bottleneck_exporter.heuristics.model import Area

# In the order of the alert groups (model.GROUPS).
AREAS: tuple[Area, ...] = (training.AREA, node.AREA, gpu.AREA, exporter.AREA)
