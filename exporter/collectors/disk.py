"""Block-device I/O per whole disk, from /proc/diskstats.

Partitions are left out by default: their I/O is already counted in their disk's line. A device is a whole
disk when /sys/block/<device> exists; without sysfs (a container that mounts only /proc), a device whose
name is another listed device's name plus a partition number, as the kernel names them (sda1, nvme0n1p2,
mmcblk0p1), is taken for a partition. loop, ram, zram, fd and sr devices are left out by
``device-exclude``; ``device-include`` adds devices back. ::

    bottleneck_disk_read_bytes_total{device="nvme0n1"} 1.2e+10
    bottleneck_disk_io_time_seconds_total{device="nvme0n1"} 512.3
    bottleneck_disk_io_now{device="sda"} 2.0
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from bottleneck_exporter.collectors.base import Context, register
from bottleneck_exporter.collectors.devicefilter import DeviceFilter, device_filter_options
from bottleneck_exporter.procfs import list_dir, read_diskstats

DEFAULT_EXCLUDE = r"^(z?ram|loop|fd|sr)\d+$"

# /proc/diskstats counts sectors of 512 bytes whatever the device's logical or physical sector size
# (Documentation/admin-guide/iostats.rst; the block layer's sector_t unit).
SECTOR_BYTES = 512

# (column after "major minor name", metric, help, multiplier, divisor to base units). Times are milliseconds.
_COUNTERS = (
    (0, "bottleneck_disk_reads_completed_total", "Reads completed", 1, 1),
    (2, "bottleneck_disk_read_bytes_total", "Bytes read (sectors read x 512)", SECTOR_BYTES, 1),
    (3, "bottleneck_disk_read_time_seconds_total", "Time spent on reads, summed over all reads", 1, 1000),
    (4, "bottleneck_disk_writes_completed_total", "Writes completed", 1, 1),
    (6, "bottleneck_disk_written_bytes_total", "Bytes written (sectors written x 512)", SECTOR_BYTES, 1),
    (7, "bottleneck_disk_write_time_seconds_total", "Time spent on writes, summed over all writes", 1, 1000),
    (9, "bottleneck_disk_io_time_seconds_total",
     "Time the device had I/O in flight; its rate is the device's utilisation (0-1)", 1, 1000),
    (10, "bottleneck_disk_io_time_weighted_seconds_total",
     "I/O time weighted by the number of I/Os in flight; its rate is the average queue size", 1, 1000),
)
_IO_NOW = 8

_PARTITION_NUMBER = re.compile(r"\d+")


def whole_disks(sysfs: str, names: Iterable[str]) -> set[str]:
    """The names in ``names`` that are whole disks rather than partitions."""
    names = list(names)
    # sysfs spells a "/" in a device name (cciss/c0d0) as "!".
    in_sysfs = {entry.replace("!", "/") for entry in list_dir(os.path.join(sysfs, "block"))}
    if in_sysfs:
        return {name for name in names if name in in_sysfs}
    return {name for name in names if not any(_is_partition_of(name, parent) for parent in names)}


def _is_partition_of(name: str, parent: str) -> bool:
    # The kernel names partitions <disk><n>, or <disk>p<n> when the disk's name ends in a digit
    # (nvme0n1p1), so dm-10 is not a partition of dm-1.
    separator = "p" if parent[-1:].isdigit() else ""
    prefix = parent + separator
    return name.startswith(prefix) and bool(_PARTITION_NUMBER.fullmatch(name[len(prefix):]))


@register(
    "disk",
    help="Block-device I/O per whole disk: bytes, operations, time, utilisation, queue (/proc/diskstats).",
    options=device_filter_options(DEFAULT_EXCLUDE, "disk", "are partitions or match device-exclude"),
)
class DiskCollector:
    def __init__(self, ctx: Context) -> None:
        self.procfs = ctx.procfs
        self.sysfs = ctx.sysfs
        self.filter = DeviceFilter.from_options(ctx.options, DEFAULT_EXCLUDE)

    def collect(self) -> Iterable[Metric]:
        devices = read_diskstats(self.procfs) or {}
        disks = whole_disks(self.sysfs, devices)
        wanted = {name: columns for name, columns in devices.items()
                  if self.filter.wanted(name, kept_by_default=name in disks)}
        if not wanted:
            return
        for column, name, help_text, multiplier, divisor in _COUNTERS:
            family = CounterMetricFamily(name, f"{help_text} (/proc/diskstats).", labels=["device"])
            for device, columns in wanted.items():
                family.add_metric([device], columns[column] * multiplier / divisor)
            yield family
        io_now = GaugeMetricFamily("bottleneck_disk_io_now", "I/Os in flight now (/proc/diskstats).",
                                   labels=["device"])
        for device, columns in wanted.items():
            io_now.add_metric([device], columns[_IO_NOW])
        yield io_now
