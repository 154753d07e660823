"""The scenario table: input series → expected verdicts, for every alert of the catalogue.

Each alert (each severity tier) has at least one scenario that fires, one near miss that must not fire,
and one that must not fire *yet* because its ``for:`` has not elapsed. The same table

* renders to ``tests/rules/*.yml``, run by ``promtool test rules`` against the generated rules, and
* drives the Python evaluator (``bottleneck_exporter.heuristics.promql``) that ``diagnose`` uses,

so the PromQL and the Python side cannot drift. Scenario names say which failure they guard against.

The rows live beside the areas they test, one module per area (``training``, ``node``, ``gpu``, ``exporter``,
as ``heuristics/areas/``), built from ``builders`` (our collectors' series) and ``series`` (promtool's
notation); ``translate`` turns our series into each peer exporter's, ``replay`` runs a row through the
evaluator. Test data: only the generator (``heuristics/generate.py``, at build time) and the tests import
this package, never the daemon.
"""

from __future__ import annotations

from bottleneck_exporter.heuristics.scenarios import exporter, gpu, node, training
from bottleneck_exporter.heuristics.scenarios.table import Scenario

SCENARIOS: tuple[Scenario, ...] = (*training.SCENARIOS, *node.SCENARIOS, *gpu.SCENARIOS, *exporter.SCENARIOS)
