"""Threshold lines and parameters the dashboards draw, read from the heuristics catalogue's defaults.

A dashed line at ``threshold("data_wait_ratio")`` is the very cut-off the BottleneckInputBound rule uses, so
a dashboard and an alert cannot disagree about where "input-bound" starts.
"""

from __future__ import annotations

import functools

from bottleneck_exporter.heuristics.catalogue import Catalogue, resolve
from bottleneck_exporter.heuristics.sources import DEFAULT_BUNDLE


@functools.cache
def catalogue(bundle: str = DEFAULT_BUNDLE) -> Catalogue:
    """The catalogue resolved for ``bundle``: its alerts; parameters are the same in every bundle."""
    return resolve(bundle=bundle)


def parameter(name: str) -> str:
    """A text parameter (a regex of reasons, a duration); KeyError names an unknown one."""
    return str(catalogue().parameters[name])


def threshold(name: str) -> float:
    """A numeric parameter of the catalogue, e.g. ``threshold("straggler_factor")`` → 1.2."""
    value = catalogue().parameters[name]
    if isinstance(value, str):
        raise TypeError(f"catalogue parameter {name} is text ({value!r}), not a threshold")
    return float(value)
