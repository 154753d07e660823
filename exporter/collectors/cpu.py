"""CPU time per core and mode, load, context switches, runnable/blocked tasks and run-queue wait.

Reads /proc/stat, /proc/loadavg and, where the kernel has CONFIG_SCHEDSTATS, /proc/schedstat::

    bottleneck_cpu_seconds_total{cpu="0",mode="user"} 2281.0
    bottleneck_cpu_all_seconds_total{mode="user"} 72974.0
    bottleneck_load1 0.1
    bottleneck_cpu_runqueue_wait_seconds_total{cpu="0"} 12.5
    bottleneck_cpu_all_runqueue_wait_seconds_total 402.0
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from bottleneck_exporter.collectors.base import Context, register
from bottleneck_exporter.procfs import CPU_MODES, USER_HZ, read_cpu_stat, read_loadavg, read_schedstat

log = logging.getLogger(__name__)

_IDLE = CPU_MODES.index("idle")

# Idle time falling by more than this means the CPU went offline and came back, which restarts its counters
# for real; smaller drops are the jitter that _MonotonicCpuTimes hides.
_HOTPLUG_IDLE_DROP_SECONDS = 3.0


class _RunQueueWaitTotal:
    """The node's run-queue wait, summed over every CPU /proc/schedstat has listed since the exporter started.

    A CPU taken offline leaves the file, and a sum over the CPUs listed now would fall by its wait: rate() reads
    a fall as a counter reset and draws a spike of the whole sum. An offline CPU keeps the wait it last showed
    (its run queue's counters stay in the kernel until it comes back), so the total only falls when a CPU's own
    counter does.
    """

    def __init__(self) -> None:
        self._last: dict[str, int] = {}
        self._lock = threading.Lock()  # scrapes may run concurrently

    def update(self, run_delay_ns: dict[str, int]) -> int:
        with self._lock:
            self._last.update(run_delay_ns)
            return sum(self._last.values())


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


@register("cpu", help="CPU time per core and mode, CPU count, load, context switches, runnable and blocked "
          "tasks, run-queue wait (/proc/stat, /proc/loadavg, /proc/schedstat).")
class CpuCollector:
    def __init__(self, ctx: Context) -> None:
        self.procfs = ctx.procfs
        self._monotonic = _MonotonicCpuTimes()
        self._runqueue_total = _RunQueueWaitTotal()
        self._warned_schedstat = False

    def collect(self) -> Iterable[Metric]:
        yield from self._stat()
        yield from self._loadavg()
        yield from self._runqueue_wait()

    def _stat(self) -> Iterable[Metric]:
        stat = read_cpu_stat(self.procfs)
        if stat is None:
            return
        seconds = CounterMetricFamily("bottleneck_cpu_seconds_total",
                                      "Time each CPU spent in each mode (/proc/stat).",
                                      labels=["cpu", "mode"])
        for cpu, ticks in stat.ticks.items():
            # Kernels older than 2.6.11 lack steal: zip stops at the columns the line has.
            values = self._monotonic.update(cpu, [t / USER_HZ for t in ticks])
            for mode, value in zip(CPU_MODES, values, strict=False):
                seconds.add_metric([cpu, mode], value)
        yield seconds
        if stat.total is not None:
            # The node's CPU time in one series per mode: what the rules read, where the per-CPU family would
            # cost them 32 times the samples on a 32-CPU node (docs/rules.md, "What the rules cost on a
            # fleet"); the per-CPU series stay for the dashboards' one-core-pegged view.
            every = CounterMetricFamily("bottleneck_cpu_all_seconds_total",
                                        "Time all CPUs together spent in each mode (the cpu line of /proc/stat).",
                                        labels=["mode"])
            values = self._monotonic.update("all", [t / USER_HZ for t in stat.total])
            for mode, value in zip(CPU_MODES, values, strict=False):
                every.add_metric([mode], value)
            yield every
        # /proc/stat lists only online CPUs, so its cpuN lines are the online count (never 0: the reader
        # refuses a stat without them).
        yield GaugeMetricFamily("bottleneck_cpus", "Online CPUs (cpuN lines of /proc/stat).",
                                value=len(stat.ticks))
        if "ctxt" in stat.counters:
            yield CounterMetricFamily("bottleneck_context_switches_total",
                                      "Context switches on all CPUs (ctxt in /proc/stat).",
                                      value=stat.counters["ctxt"])
        if "procs_running" in stat.counters:
            yield GaugeMetricFamily("bottleneck_procs_running",
                                    "Tasks runnable now (procs_running in /proc/stat).",
                                    value=stat.counters["procs_running"])
        if "procs_blocked" in stat.counters:
            yield GaugeMetricFamily("bottleneck_procs_blocked",
                                    "Tasks blocked waiting for I/O now (procs_blocked in /proc/stat).",
                                    value=stat.counters["procs_blocked"])

    def _loadavg(self) -> Iterable[Metric]:
        load = read_loadavg(self.procfs)
        if load is None:
            return
        yield GaugeMetricFamily("bottleneck_load1", "1-minute load average (/proc/loadavg).", value=load[0])
        yield GaugeMetricFamily("bottleneck_load5", "5-minute load average (/proc/loadavg).", value=load[1])
        yield GaugeMetricFamily("bottleneck_load15", "15-minute load average (/proc/loadavg).", value=load[2])

    def _runqueue_wait(self) -> Iterable[Metric]:
        # Absent without CONFIG_SCHEDSTATS (and CONFIG_SCHED_INFO): no series, not a failure.
        schedstat = read_schedstat(self.procfs)
        if schedstat is None:
            return
        if schedstat.run_delay_ns is None:
            if not self._warned_schedstat:
                log.warning("unknown /proc/schedstat format (version %s); run-queue wait not exported",
                            schedstat.version)
                self._warned_schedstat = True
            return
        family = CounterMetricFamily(
            "bottleneck_cpu_runqueue_wait_seconds_total",
            "Time tasks spent runnable but waiting for each CPU (run_delay in /proc/schedstat).",
            labels=["cpu"],
        )
        for cpu, nanoseconds in schedstat.run_delay_ns.items():
            family.add_metric([cpu], nanoseconds / 1e9)
        yield family
        # /proc/schedstat has no node line (as /proc/stat has its cpu line): the node's wait in one series is
        # what the rules read, where the per-CPU family would cost them 32 times the samples on a 32-CPU node
        # (docs/rules.md, "What the rules cost on a fleet"); the per-CPU series stay for the dashboards.
        yield CounterMetricFamily(
            "bottleneck_cpu_all_runqueue_wait_seconds_total",
            "Time tasks spent runnable but waiting for a CPU, all CPUs together (run_delay in /proc/schedstat).",
            value=self._runqueue_total.update(schedstat.run_delay_ns) / 1e9,
        )
