"""CPU time per core and mode, load, context switches, runnable/blocked tasks and run-queue wait.

Reads /proc/stat, /proc/loadavg and, where the kernel has CONFIG_SCHEDSTATS, /proc/schedstat::

    bottleneck_cpu_seconds_total{cpu="0",mode="user"} 2281.0
    bottleneck_load1 0.1
    bottleneck_cpu_runqueue_wait_seconds_total{cpu="0"} 12.5
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from exporter.collectors.base import Context, register
from exporter.procfs import USER_HZ, read_text

log = logging.getLogger(__name__)

# Column order of the cpuN lines of /proc/stat (proc(5)). guest and guest_nice follow, but the kernel already
# counts them inside user and nice: exporting them as modes would count that time twice.
MODES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
_IDLE = MODES.index("idle")

# /proc/schedstat versions whose cpuN lines we know. 15 to 17 changed only the domainN lines
# (Documentation/scheduler/sched-stats.rst); another version may move the field, so it is left out.
SCHEDSTAT_VERSIONS = (15, 16, 17)
# "cpuN yld_count 0 sched_count sched_goidle ttwu_count ttwu_local rq_cpu_time run_delay pcount": the 8th
# number is the time tasks spent runnable on this CPU's queue but not running, in nanoseconds.
_RUN_DELAY_FIELD = 8

# Idle time falling by more than this means the CPU went offline and came back, which restarts its counters
# for real; smaller drops are the jitter that _MonotonicCpuTimes hides.
_HOTPLUG_IDLE_DROP_SECONDS = 3.0


class _MonotonicCpuTimes:
    """Keeps each CPU's mode counters from going backwards between scrapes.

    proc(5) warns that iowait "may decrease", and idle on tickless kernels steps back by a tick now and then.
    Served as is, rate() reads such a dip as a counter reset and draws a spike the size of the whole uptime
    (prometheus/node_exporter#1686), so a dip serves the highest value seen instead.
    """

    def __init__(self) -> None:
        self._last: dict[str, list[float]] = {}
        self._lock = threading.Lock()  # scrapes may run concurrently

    def update(self, cpu: str, seconds: list[float]) -> list[float]:
        with self._lock:
            last = self._last.get(cpu)
            if last is not None and len(last) == len(seconds) and (
                last[_IDLE] - seconds[_IDLE] <= _HOTPLUG_IDLE_DROP_SECONDS
            ):
                seconds = [max(old, new) for old, new in zip(last, seconds, strict=True)]
            self._last[cpu] = seconds
            return seconds


def _parse_stat(text: str) -> tuple[dict[str, list[int]], dict[str, int]]:
    """{cpu number: ticks per mode}, {ctxt / procs_running / procs_blocked: value} from /proc/stat."""
    per_cpu: dict[str, list[int]] = {}
    scalars: dict[str, int] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 2:
            continue
        key = fields[0]
        if key.startswith("cpu") and key[3:].isdigit():
            per_cpu[key[3:]] = [int(v) for v in fields[1 : 1 + len(MODES)]]
        elif key in ("ctxt", "procs_running", "procs_blocked"):
            scalars[key] = int(fields[1])
    return per_cpu, scalars


def _parse_schedstat(text: str) -> dict[str, int] | None:
    """{cpu number: run_delay ns} from /proc/schedstat, or None for a version we cannot read."""
    lines = text.splitlines()
    head = lines[0].split() if lines else []
    if len(head) != 2 or head[0] != "version" or not head[1].isdigit():
        return None
    if int(head[1]) not in SCHEDSTAT_VERSIONS:
        return None
    waits: dict[str, int] = {}
    for line in lines[1:]:
        fields = line.split()
        if len(fields) > _RUN_DELAY_FIELD and fields[0].startswith("cpu") and fields[0][3:].isdigit():
            waits[fields[0][3:]] = int(fields[_RUN_DELAY_FIELD])
    return waits


@register("cpu", help="CPU time per core and mode, CPU count, load, context switches, runnable and blocked "
          "tasks, run-queue wait (/proc/stat, /proc/loadavg, /proc/schedstat).")
class CpuCollector:
    def __init__(self, ctx: Context) -> None:
        self.procfs = ctx.procfs
        self._monotonic = _MonotonicCpuTimes()
        self._warned_schedstat = False

    def collect(self) -> Iterable[Metric]:
        yield from self._stat()
        yield from self._loadavg()
        yield from self._runqueue_wait()

    def _stat(self) -> Iterable[Metric]:
        text = read_text(os.path.join(self.procfs, "stat"))
        if text is None:
            return
        per_cpu, scalars = _parse_stat(text)
        seconds = CounterMetricFamily("bottleneck_cpu_seconds_total",
                                      "Time each CPU spent in each mode (/proc/stat).",
                                      labels=["cpu", "mode"])
        for cpu, ticks in per_cpu.items():
            # Kernels older than 2.6.11 lack steal: zip stops at the columns the line has.
            values = self._monotonic.update(cpu, [t / USER_HZ for t in ticks])
            for mode, value in zip(MODES, values, strict=False):
                seconds.add_metric([cpu, mode], value)
        yield seconds
        # /proc/stat lists only online CPUs, so its cpuN lines are the online count.
        yield GaugeMetricFamily("bottleneck_cpus", "Online CPUs (cpuN lines of /proc/stat).",
                                value=len(per_cpu))
        if "ctxt" in scalars:
            yield CounterMetricFamily("bottleneck_context_switches_total",
                                      "Context switches on all CPUs (ctxt in /proc/stat).",
                                      value=scalars["ctxt"])
        if "procs_running" in scalars:
            yield GaugeMetricFamily("bottleneck_procs_running",
                                    "Tasks runnable now (procs_running in /proc/stat).",
                                    value=scalars["procs_running"])
        if "procs_blocked" in scalars:
            yield GaugeMetricFamily("bottleneck_procs_blocked",
                                    "Tasks blocked waiting for I/O now (procs_blocked in /proc/stat).",
                                    value=scalars["procs_blocked"])

    def _loadavg(self) -> Iterable[Metric]:
        text = read_text(os.path.join(self.procfs, "loadavg"))
        fields = text.split() if text else []
        if len(fields) < 3:
            return
        for minutes, value in zip((1, 5, 15), fields[:3], strict=True):
            yield GaugeMetricFamily(f"bottleneck_load{minutes}",
                                    f"{minutes}-minute load average (/proc/loadavg).", value=float(value))

    def _runqueue_wait(self) -> Iterable[Metric]:
        # Absent without CONFIG_SCHEDSTATS (and CONFIG_SCHED_INFO): no series, not a failure.
        text = read_text(os.path.join(self.procfs, "schedstat"))
        if text is None:
            return
        waits = _parse_schedstat(text)
        if waits is None:
            if not self._warned_schedstat:
                log.warning("unknown /proc/schedstat format (%s); run-queue wait not exported",
                            text.split("\n", 1)[0])
                self._warned_schedstat = True
            return
        family = CounterMetricFamily(
            "bottleneck_cpu_runqueue_wait_seconds_total",
            "Time tasks spent runnable but waiting for each CPU (run_delay in /proc/schedstat).",
            labels=["cpu"],
        )
        for cpu, nanoseconds in waits.items():
            family.add_metric([cpu], nanoseconds / 1e9)
        yield family
