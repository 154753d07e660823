"""Threshold lines drawn on the dashboards, taken from the heuristics catalogue's parameters."""

from __future__ import annotations

_DEFAULTS: dict[str, float] = {}


def threshold(name: str, default: float) -> float:
    return _DEFAULTS.get(name, default)
