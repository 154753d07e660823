"""How a CPU limit throttles a trainer and its DataLoader workers: the CFS bandwidth of their cgroups.

A Kubernetes CPU limit (or ``docker run --cpus``, or systemd's ``CPUQuota=``) becomes a CFS quota on a cgroup:
so much CPU time per period (100 ms by default), after which every task of the cgroup waits for the next
period, even on a node whose other cores idle. Each process's ``/proc/PID/cgroup`` names its cgroup (the cpu
controller's line on cgroup v1, the ``0::`` line on v2); under ``<sysfs>/fs/cgroup`` the nearest cgroup on its
path up to the root that has a quota is the one that throttles it (a pod's limit may sit on the pod's cgroup
rather than the container's), read through ``bottleneck_exporter.procfs`` (``read_cfs_quota``,
``read_cfs_bandwidth``). Exposes nothing itself: ``bottleneck_exporter.collectors.training`` turns it into

    bottleneck_training_cpu_limit_cores{process="train.py",local_rank="0"} 0.2
    bottleneck_training_cpu_limit_share_cores{process="train.py",local_rank="0"} 0.2
    bottleneck_training_cpu_throttled_periods_total{process="train.py",local_rank="0"} 4512.0
    bottleneck_training_cpu_throttled_seconds_total{process="train.py",local_rank="0"} 731.6

The trainer and its workers normally share one cgroup (one container); where they do not, the counts and limits
of their distinct cgroups add up. A cgroup file that is missing or unreadable while the process is still in that
cgroup, or one that does not parse, raises ``ProcParseError``: the caller drops that trainer's throttling series
and counts the error. A process that exits or moves to another cgroup while it is read is no error: it is left
out of this scrape.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterable

from bottleneck_exporter.procfs import CfsBandwidth, ProcParseError, read_cfs_bandwidth, read_cfs_quota, read_cgroup

# A systemd slice's name carries its parents': kubepods-besteffort-pod1.slice lives in
# kubepods.slice/kubepods-besteffort.slice/ (systemd.slice(5)).
_SLICE = re.compile(r"^[\w:.\\-]+\.slice$")


@dataclasses.dataclass(frozen=True)
class CpuCgroup:
    """Where a process's cpu controller files are: its cgroup directory, the hierarchy's root above it
    (the walk for a quota stops there) and the cgroup version (the files' names and units differ)."""

    directory: str
    root: str
    version: int


@dataclasses.dataclass(frozen=True)
class Throttling:
    """The CFS bandwidth of the cgroups a trainer's processes run in, added up over distinct cgroups."""

    periods: int
    throttled_periods: int
    throttled_seconds: float
    limit_cores: float | None  # None: no quota on any cgroup of the path
    # The cgroups whose quotas make up the limit: trainers under the same ones share it (the ranks of one
    # container, or of one pod, draw on one limit).
    limited_by: frozenset[str] = frozenset()


def _within_namespace(path: str) -> str | None:
    """The cgroup path below the hierarchy's root. A process outside our cgroup namespace shows as
    ``/../../kubepods-besteffort-pod…slice/crio-<id>.scope``; a systemd slice there names its parents, so the
    path is rebuilt from it. None when it cannot be (a cgroupfs-driver path seen from another namespace)."""
    parts = [part for part in path.split("/") if part]
    if ".." not in parts:
        return "/".join(parts)
    rest = parts[max(index for index, part in enumerate(parts) if part == "..") + 1:]
    if not rest or not _SLICE.match(rest[0]):
        return None
    words = rest[0].removesuffix(".slice").split("-")
    parents = ["-".join(words[:count]) + ".slice" for count in range(1, len(words))]
    return "/".join([*parents, *rest])


def locate(text: str, sysfs: str, source: str) -> CpuCgroup | None:
    """The cpu controller's cgroup of a process from its ``/proc/PID/cgroup`` text (read from ``source``); None
    when no cpu hierarchy is mounted under ``sysfs`` (a kernel or container without one has no throttling to
    show). Raises ProcParseError when the path lies outside our cgroup namespace and cannot be rebuilt."""
    mounts = f"{sysfs}/fs/cgroup"
    unified: str | None = None
    for line in text.splitlines():
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        number, controllers, path = fields
        if number == "0" and not controllers:
            unified = path
            continue
        if "cpu" in controllers.split(","):
            for mount in (f"{mounts}/{controllers}", f"{mounts}/cpu"):
                if os.path.isdir(mount):
                    return CpuCgroup(os.path.join(mount, _inside(path, source)).rstrip("/"), mount, 1)
    if unified is None:
        return None
    for mount in (mounts, f"{mounts}/unified"):
        if os.path.exists(f"{mount}/cgroup.controllers"):
            return CpuCgroup(os.path.join(mount, _inside(unified, source)).rstrip("/"), mount, 2)
    return None


def _inside(path: str, source: str) -> str:
    inside = _within_namespace(path)
    if inside is None:
        raise ProcParseError(source, f"cgroup {path} lies outside this cgroup namespace")
    return inside


def _limiting(cgroup: CpuCgroup) -> tuple[str, float | None]:
    """The nearest cgroup from the process's own up to the root that has a quota, and the quota in cores;
    the process's own cgroup and None when none has one."""
    directory = cgroup.directory
    while True:
        cores, _ = read_cfs_quota(directory, cgroup.version)
        if cores is not None:
            return directory, cores
        parent = os.path.dirname(directory)
        if os.path.normpath(directory) == os.path.normpath(cgroup.root) or parent == directory:
            return cgroup.directory, None
        directory = parent


class ThrottlingReader:
    """Reads the throttling of a trainer and its workers on each call; holds no state between calls."""

    def __init__(self, procfs: str, sysfs: str) -> None:
        self.procfs = procfs
        self.sysfs = sysfs

    def _cgroup(self, pid: int) -> tuple[str, CpuCgroup | None] | None:
        text = read_cgroup(self.procfs, pid)
        return None if text is None else (text, locate(text, self.sysfs, f"{self.procfs}/{pid}/cgroup"))

    def read(self, pids: Iterable[int]) -> Throttling | None:
        """The throttling of the cgroups ``pids`` run in; None when none of them is in a cpu cgroup we can
        see (or all are gone). Raises ProcParseError for a cgroup file that is missing, unreadable or garbled."""
        found: dict[str, tuple[CfsBandwidth, float | None]] = {}
        read: set[str] = set()  # the processes' own cgroups done: workers mostly share the trainer's
        for pid in pids:
            seen = self._cgroup(pid)
            if seen is None:
                continue  # gone
            text, cgroup = seen
            if cgroup is None or cgroup.directory in read:
                continue  # no cpu hierarchy mounted here, or that cgroup is counted already
            try:
                directory, cores = _limiting(cgroup) if os.path.isdir(cgroup.directory) else (cgroup.directory, None)
                bandwidth = read_cfs_bandwidth(directory, cgroup.version) if directory not in found else None
            except ProcParseError:
                if self._left(pid, text):
                    continue
                raise
            if directory in found:
                read.add(cgroup.directory)
                continue
            if bandwidth is None:
                if self._left(pid, text):
                    continue
                raise ProcParseError(f"{directory}/cpu.stat", "missing or unreadable")
            found[directory] = (bandwidth, cores)
            read.add(cgroup.directory)
        if not found:
            return None
        limits = [cores for _, cores in found.values() if cores is not None]
        return Throttling(
            periods=sum(b.periods for b, _ in found.values()),
            throttled_periods=sum(b.throttled_periods for b, _ in found.values()),
            throttled_seconds=sum(b.throttled_seconds for b, _ in found.values()),
            limit_cores=sum(limits) if limits else None,
            limited_by=frozenset(directory for directory, (_, cores) in found.items() if cores is not None),
        )

    def _left(self, pid: int, text: str) -> bool:
        """Whether the process exited or moved to another cgroup since its cgroup was read."""
        return read_cgroup(self.procfs, pid) != text
