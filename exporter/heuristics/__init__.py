"""Bottleneck heuristics: the catalogue of verdicts and everything generated from it.

``catalogue`` holds every verdict once (PromQL, thresholds, advice); ``generate`` writes the Prometheus
rules, the runbook and the promtool tests from it; ``scenarios`` is the table of input series and
expected verdicts that tests both the rules (through promtool) and ``promql`` (the Python evaluator
``diagnose`` uses without a Prometheus).

The names other packages use are exported here, so that they do not depend on which module of this package
defines each one.
"""

from bottleneck_exporter.heuristics.catalogue import (
    HEURISTICS,
    PARAMETERS,
    SEVERITIES,
    AlertRule,
    Catalogue,
    CatalogueError,
    RecordingRule,
    parse_parameter,
    parse_sets,
    resolve,
    selector_names,
    series_read,
    signal,
)
from bottleneck_exporter.heuristics.sources import (
    BUNDLES,
    DCGM,
    DCGM_TWINS,
    DEFAULT_BUNDLE,
    NODE_EXPORTER,
    NODE_EXPORTER_TWINS,
    Unreadable,
)

__all__ = [
    "BUNDLES",
    "DCGM",
    "DCGM_TWINS",
    "DEFAULT_BUNDLE",
    "HEURISTICS",
    "NODE_EXPORTER",
    "NODE_EXPORTER_TWINS",
    "PARAMETERS",
    "SEVERITIES",
    "AlertRule",
    "Catalogue",
    "CatalogueError",
    "RecordingRule",
    "Unreadable",
    "parse_parameter",
    "parse_sets",
    "resolve",
    "selector_names",
    "series_read",
    "signal",
]
