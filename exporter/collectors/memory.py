"""Memory and swap, from /proc/meminfo and /proc/vmstat.

    bottleneck_memory_total_bytes 2.5e+10
    bottleneck_memory_available_bytes 1.9e+10
    bottleneck_memory_swapped_in_pages_total 0.0
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from bottleneck_exporter.collectors.base import Context, register
from bottleneck_exporter.procfs import read_meminfo, read_vmstat

# (meminfo key, metric name, help)
_MEMINFO = (
    ("MemTotal", "bottleneck_memory_total_bytes", "Physical memory (MemTotal)."),
    ("MemAvailable", "bottleneck_memory_available_bytes",
     "Memory available for new work without swapping (MemAvailable)."),
    ("MemFree", "bottleneck_memory_free_bytes", "Memory not used at all (MemFree)."),
    ("Buffers", "bottleneck_memory_buffers_bytes", "Block-device buffers (Buffers)."),
    ("Cached", "bottleneck_memory_cached_bytes", "Page cache (Cached)."),
    ("SwapTotal", "bottleneck_memory_swap_total_bytes", "Swap space (SwapTotal)."),
    ("SwapFree", "bottleneck_memory_swap_free_bytes", "Unused swap space (SwapFree)."),
)

# (vmstat key, metric name, help)
_VMSTAT = (
    ("pswpin", "bottleneck_memory_swapped_in_pages_total", "Pages swapped in from disk (pswpin)."),
    ("pswpout", "bottleneck_memory_swapped_out_pages_total", "Pages swapped out to disk (pswpout)."),
    ("pgmajfault", "bottleneck_memory_major_faults_total",
     "Major page faults: pages that had to be read from disk (pgmajfault)."),
    ("oom_kill", "bottleneck_memory_oom_kills_total",
     "Processes killed by the kernel's OOM killer (oom_kill)."),
)


@register("memory",
          help="Memory, swap, swap activity, major faults and OOM kills (/proc/meminfo, /proc/vmstat).")
class MemoryCollector:
    def __init__(self, ctx: Context) -> None:
        self.procfs = ctx.procfs

    def collect(self) -> Iterable[Metric]:
        meminfo = read_meminfo(self.procfs, [key for key, _, _ in _MEMINFO]) or {}
        for key, name, help_text in _MEMINFO:
            if key in meminfo:
                yield GaugeMetricFamily(name, help_text, value=meminfo[key])
        vmstat = read_vmstat(self.procfs, [key for key, _, _ in _VMSTAT]) or {}
        for key, name, help_text in _VMSTAT:
            if key in vmstat:
                yield CounterMetricFamily(name, help_text, value=vmstat[key])
