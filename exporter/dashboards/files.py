"""The dashboard files of every bundle, as committed: which builder writes which file, in which folder.

The default bundle's set goes to grafana/dashboards/ (what provisioning and existing users load), every other
bundle's to grafana/bundles/<bundle>/, beside its rules in prometheus/bundles/<bundle>/.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import PurePosixPath
from typing import Any

from bottleneck_exporter.dashboards import fleet, node, training, verdicts
from bottleneck_exporter.heuristics import BUNDLES, DEFAULT_BUNDLE

REGENERATE = "python -m bottleneck_exporter.dashboards"

# File name in a bundle's directory → builder.
DASHBOARDS: dict[str, Callable[[str, str], dict[str, Any]]] = {
    "bottleneck-fleet.json": fleet.build,
    "bottleneck-node.json": node.build,
    "bottleneck-training.json": training.build,
    "bottleneck-verdicts.json": verdicts.build,
}


def bundle_dir(bundle: str) -> PurePosixPath:
    """Where ``bundle``'s dashboards are committed, relative to the repository."""
    return PurePosixPath("grafana/dashboards" if bundle == DEFAULT_BUNDLE else f"grafana/bundles/{bundle}")


def render(bundle: str = DEFAULT_BUNDLE) -> dict[str, str]:
    """File name → JSON text of ``bundle``'s dashboards, exactly as committed."""
    return {name: json.dumps(build(REGENERATE, bundle), indent=2, sort_keys=False) + "\n"
            for name, build in DASHBOARDS.items()}


def render_all() -> dict[PurePosixPath, str]:
    """Every bundle's dashboards: path relative to the repository → JSON text."""
    return {bundle_dir(bundle) / name: text for bundle in BUNDLES for name, text in render(bundle).items()}
