"""Which devices (disks, network interfaces) a collector exports, from its two regex options.

A device is exported when its name matches ``device-include``, or when the collector's own rule keeps it
(a whole disk, not a partition) and its name does not match ``device-exclude``. So ``device-include`` adds
devices back that the defaults leave out (a partition, ``lo``), and ``device-exclude`` removes more.
Patterns are searched, not fully matched (node_exporter's habit): anchor them with ``^...$``. An empty
pattern matches nothing.
"""

from __future__ import annotations

import re


class DeviceFilter:
    def __init__(self, exclude: str, include: str = "") -> None:
        self._exclude = re.compile(exclude) if exclude else None
        self._include = re.compile(include) if include else None

    def wanted(self, name: str, *, kept_by_default: bool = True) -> bool:
        if self._include is not None and self._include.search(name):
            return True
        if not kept_by_default:
            return False
        return self._exclude is None or not self._exclude.search(name)
