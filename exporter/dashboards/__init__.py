"""Grafana dashboards from code: ``python -m exporter.dashboards`` writes grafana/dashboards/*.json.

One module per dashboard (fleet, node, training, verdicts) holds its PromQL; ``panels`` builds the JSON;
``variables`` holds the node, job and GPU variables that several dashboards offer.
Never imported by the exporter daemon.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from exporter.dashboards import fleet, node, training, verdicts

REGENERATE = "python -m exporter.dashboards"

# File name in grafana/dashboards → builder.
DASHBOARDS: dict[str, Callable[[str], dict[str, Any]]] = {
    "bottleneck-fleet.json": fleet.build,
    "bottleneck-node.json": node.build,
    "bottleneck-training.json": training.build,
    "bottleneck-verdicts.json": verdicts.build,
}


def render() -> dict[str, str]:
    """File name → JSON text, exactly as committed."""
    return {name: json.dumps(build(REGENERATE), indent=2, sort_keys=False) + "\n" for name, build in DASHBOARDS.items()}
