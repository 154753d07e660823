"""The dashboards' view of the heuristics catalogue: which alerts are bottleneck verdicts.

Reads exporter/heuristics (once it exists) and exposes PromQL selectors for the verdict panels:

    ALERTS{alertstate="firing", alertname=~"Bottleneck.*", instance=~"$instance"}
"""

from __future__ import annotations

ALERT_PREFIX = "Bottleneck"


def firing_selector(matchers: str = "") -> str:
    extra = f", {matchers}" if matchers else ""
    return f'ALERTS{{alertstate="firing", alertname=~"{ALERT_PREFIX}.*"{extra}}}'
