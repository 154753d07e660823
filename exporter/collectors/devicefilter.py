"""Which devices (disks, network interfaces) a collector exports, from its two regex options.

A device is exported when its name matches ``device-include``, or when the collector's own rule keeps it
(a whole disk, not a partition) and its name does not match ``device-exclude``. So ``device-include`` adds
devices back that the defaults leave out (a partition, ``lo``), and ``device-exclude`` removes more.
Patterns are searched, not fully matched (node_exporter's habit): anchor them with ``^...$``. An empty
pattern matches nothing.
"""

from __future__ import annotations

import re
from typing import Any

from bottleneck_exporter.options import Option, parse_regex


def device_filter_options(default_exclude: str, noun: str, include_adds: str) -> tuple[Option, Option]:
    """The ``device-exclude`` / ``device-include`` options of a collector; ``noun`` names its devices and
    ``include_adds`` what an include brings back beyond ``device-exclude`` (partitions, for disks)."""
    return (
        Option("device-exclude", default_exclude,
               f"Regex of {noun} names to leave out (searched, not anchored).", parse_regex),
        Option("device-include", "", f"Regex of {noun} names to export even when they {include_adds}; empty "
               "matches nothing.", parse_regex),
    )


class DeviceFilter:
    def __init__(self, exclude: str, include: str = "") -> None:
        self._exclude = re.compile(exclude) if exclude else None
        self._include = re.compile(include) if include else None

    @classmethod
    def from_options(cls, options: dict[str, Any], default_exclude: str) -> DeviceFilter:
        return cls(options.get("device-exclude", default_exclude), options.get("device-include", ""))

    def wanted(self, name: str, *, kept_by_default: bool = True) -> bool:
        if self._include is not None and self._include.search(name):
            return True
        if not kept_by_default:
            return False
        return self._exclude is None or not self._exclude.search(name)
