"""Bottleneck heuristics: the catalogue of verdicts and everything generated from it.

Grouped by where the code runs. The daemon (``diagnose``, the status page) reads the catalogue: ``model`` (what a
verdict, a recording rule, a parameter is), ``parameters`` (every threshold), ``areas/`` (the verdicts, one
module per alert group: training, node, gpu, exporter), ``catalogue`` (the areas assembled, resolved into
concrete rules for a bundle), ``sources`` (which exporters a bundle reads), ``promql`` (the evaluator and its
printer) and ``gotemplate``. At build time ``generate`` writes the rules, the runbook and the promtool tests,
from the catalogue and from ``scenarios/`` (the scenario table, one module per area, replayed through the
evaluator): test data, which the daemon never imports.

The names other modules use are importable from here::

    from bottleneck_exporter.heuristics import BUNDLES, CatalogueError, resolve
"""

from __future__ import annotations

from bottleneck_exporter.heuristics.catalogue import (
    HEURISTICS,
    RECORDS,
    SIGNALS,
    AlertRule,
    Catalogue,
    RecordingRule,
    resolve,
    selector_names,
    series_read,
    signal,
    validate,
)
from bottleneck_exporter.heuristics.model import (
    GROUPS,
    PREFIX,
    SEVERITIES,
    CatalogueError,
    Heuristic,
    MissingSignal,
    Parameter,
    Record,
    Signal,
    Tier,
)
from bottleneck_exporter.heuristics.parameters import PARAMETERS, format_value, parse_parameter, parse_sets
from bottleneck_exporter.heuristics.sources import (
    BUNDLES,
    DCGM,
    DCGM_BESIDE_OURS,
    DCGM_TWINS,
    DEFAULT_BUNDLE,
    NODE_EXPORTER,
    NODE_EXPORTER_TWINS,
    OURS,
    PEER_JOB,
    SOURCES,
    Bundle,
    Unreadable,
    family_of,
)

__all__ = [
    "BUNDLES", "DCGM", "DCGM_BESIDE_OURS", "DCGM_TWINS", "DEFAULT_BUNDLE", "GROUPS", "HEURISTICS", "NODE_EXPORTER",
    "NODE_EXPORTER_TWINS", "OURS", "PARAMETERS", "PEER_JOB", "PREFIX", "RECORDS", "SEVERITIES", "SIGNALS", "SOURCES",
    "AlertRule", "Bundle", "Catalogue", "CatalogueError", "Heuristic", "MissingSignal", "Parameter", "Record",
    "RecordingRule", "Signal", "Tier", "Unreadable", "family_of", "format_value", "parse_parameter", "parse_sets",
    "resolve", "selector_names", "series_read", "signal", "validate",
]
