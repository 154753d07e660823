"""NVIDIA GPUs through NVML (or a recorded profile): the gpu section of docs/metrics.md.

Reads a GpuBackend (``bottleneck_exporter.gpu.nvml`` by default, ``bottleneck_exporter.gpu.fake`` with
``--collector.gpu.profile``) and the command name of each GPU process from ``<procfs>/<pid>/comm``. Exposes, per GPU and
per MIG instance (``gpu`` is the NVML index, or ``<index>/<gpu instance>/<compute instance>`` for a MIG instance)::

    bottleneck_gpu_up{gpu="0",uuid="GPU-…"} 1.0
    bottleneck_gpu_utilization_ratio{gpu="0",uuid="GPU-…"} 0.97
    bottleneck_gpu_utilization_samples_bucket{gpu="0",uuid="GPU-…",le="0.05"} 412.0

A field the GPU does not support is left out (never NaN); a GPU that fell off the bus reads
``bottleneck_gpu_up 0`` while the others go on; a node without NVML logs that once and exposes no GPU
series. Per-process memory is bounded: the ``max-processes`` largest process names per GPU, no PID label.
With ``only-unique`` (beside dcgm-exporter) only the families of ``coexistence.GPU_UNIQUE`` are exported.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from bottleneck_exporter.collectors.base import Context, register
from bottleneck_exporter.collectors.coexistence import GPU_UNIQUE
from bottleneck_exporter.gpu.backend import (
    VIOLATION_POLICIES,
    Device,
    DriverInfo,
    GpuBackend,
    Identity,
    NvmlUnavailable,
)
from bottleneck_exporter.gpu.guard import FieldGuard
from bottleneck_exporter.gpu.idle import IdleLedger, Reading
from bottleneck_exporter.gpu.placement import Affinity, place, process_labels
from bottleneck_exporter.gpu.samples import UtilizationHistogram
from bottleneck_exporter.options import Option, parse_bool, parse_positive_int, parse_ratio
from bottleneck_exporter.procfs import ProcParseError, read_allowed, read_text

log = logging.getLogger(__name__)

T = TypeVar("T")

GPU_LABELS = ("gpu", "uuid")
INFO_LABELS = ("name", "driver_version", "cuda_version", "pci_bus_id", "vbios_version", "mig_mode")

HELP = {
    "bottleneck_gpu_up": "1 while NVML answers for this GPU, 0 after it fell off the bus (GPU_IS_LOST).",
    "bottleneck_gpu_info": "GPU identity; value is always 1.",
    "bottleneck_gpu_utilization_ratio":
        "Share of the last sample period in which a kernel ran on the GPU (nvidia-smi GPU-Util).",
    "bottleneck_gpu_memory_utilization_ratio":
        "Share of the last sample period in which device memory was read or written.",
    "bottleneck_gpu_utilization_samples":
        "NVML sub-second GPU-Util samples (0-1) seen since the exporter started; tells a sawtooth from a "
        "flat line.",
    "bottleneck_gpu_memory_used_bytes": "Framebuffer memory in use.",
    "bottleneck_gpu_memory_total_bytes": "Framebuffer memory in total.",
    "bottleneck_gpu_memory_reserved_bytes": "Framebuffer memory reserved by the driver and firmware.",
    "bottleneck_gpu_temperature_celsius": "GPU core temperature.",
    "bottleneck_gpu_slowdown_temperature_celsius": "Temperature at which the GPU slows its clocks down.",
    "bottleneck_gpu_shutdown_temperature_celsius": "Temperature at which the GPU shuts down.",
    "bottleneck_gpu_power_watts": "Power draw.",
    "bottleneck_gpu_power_limit_watts": "Power limit the driver enforces.",
    "bottleneck_gpu_energy_joules_total": "Energy consumed since the driver was loaded.",
    "bottleneck_gpu_clock_hertz": "Current clock frequency.",
    "bottleneck_gpu_clock_max_hertz": "Maximum clock frequency.",
    "bottleneck_gpu_fan_ratio": "Fan speed as a share of its maximum.",
    "bottleneck_gpu_clock_event_active":
        "1 while this clock-event (throttle) reason holds clocks down; gpu_idle, applications_clocks_setting "
        "and display_clock_setting are benign.",
    "bottleneck_gpu_throttled_seconds_total":
        "Time clocks were held below target, by cause (nvmlDeviceGetViolationStatus); total_app_clocks and "
        "total_base_clocks are totals over the other causes, so never sum over reason.",
    "bottleneck_gpu_pcie_link_generation": "Current PCIe link generation (drops when idle by design).",
    "bottleneck_gpu_pcie_link_max_generation": "Maximum PCIe link generation of the GPU and slot.",
    "bottleneck_gpu_pcie_link_width": "Current PCIe link width in lanes.",
    "bottleneck_gpu_pcie_link_max_width": "Maximum PCIe link width in lanes.",
    "bottleneck_gpu_pcie_throughput_bytes_per_second": "PCIe throughput over NVML's last 20 ms window.",
    "bottleneck_gpu_pcie_replays_total": "PCIe replays (link-level retransmissions) since the GPU was reset.",
    "bottleneck_gpu_ecc_errors_total": "ECC errors over the board's lifetime (aggregate).",
    "bottleneck_gpu_remapped_rows": "Memory rows remapped, by the kind of error that caused it.",
    "bottleneck_gpu_remapped_rows_pending": "1 while a row remapping waits for a GPU reset.",
    "bottleneck_gpu_remapped_rows_failed": "1 if a row remapping has failed (the GPU needs service).",
    "bottleneck_gpu_process_memory_used_bytes":
        "GPU memory used by the processes with this command name (the largest few per GPU).",
    "bottleneck_gpu_sm_activity_ratio": "Share of SMs busy (NVML GPM, Hopper and later).",
    "bottleneck_gpu_sm_occupancy_ratio": "Warps resident on the SMs as a share of the maximum (NVML GPM).",
    "bottleneck_gpu_tensor_activity_ratio": "Share of time the SMs ran tensor-core instructions (NVML GPM).",
    "bottleneck_gpu_dram_bandwidth_utilization_ratio":
        "DRAM bandwidth used as a share of the peak (NVML GPM).",
    "bottleneck_gpu_xid_errors_total":
        "XID errors the driver reported for this GPU since the exporter started, by XID code.",
    "bottleneck_gpu_idle_seconds_total":
        "Time this GPU's utilization stayed at or below the idle threshold (--collector.gpu.idle-ratio) since "
        "the exporter started; held=process while a process held memory on it, none otherwise.",
    "bottleneck_gpu_process_idle_seconds_total":
        "Time this GPU stayed idle while this process (script and LOCAL_RANK, as the training series name "
        "it) held memory on it, since the process was first seen.",
    "bottleneck_gpu_process_local_cpus_ratio":
        "Share of the CPUs this process may run on (Cpus_allowed_list) that are near its GPU (the GPU's CPU "
        "affinity, nvidia-smi topo -m); 0 means pinned to the far socket.",
    "bottleneck_gpu_process_local_memory_ratio":
        "Share of the NUMA nodes this process may allocate from (Mems_allowed_list) that are near its GPU.",
}

_GPM_NAMES = {
    "sm_activity": "bottleneck_gpu_sm_activity_ratio",
    "sm_occupancy": "bottleneck_gpu_sm_occupancy_ratio",
    "tensor_activity": "bottleneck_gpu_tensor_activity_ratio",
    "dram_bandwidth_utilization": "bottleneck_gpu_dram_bandwidth_utilization_ratio",
}


class _Families:
    """Metric families of one scrape, created on first use so that families without samples are left out."""

    def __init__(self) -> None:
        self.families: dict[str, Metric] = {}

    def _family(self, name: str, labels: tuple[str, ...], counter: bool) -> Metric:
        family = self.families.get(name)
        if family is None:
            cls = CounterMetricFamily if counter else GaugeMetricFamily
            family = cls(name, HELP[name], labels=list(labels))
            self.families[name] = family
        return family

    def gauge(self, name: str, gpu: tuple[str, str], value: float, **extra: str) -> None:
        family = self._family(name, GPU_LABELS + tuple(extra), counter=False)
        family.add_metric([*gpu, *extra.values()], value)  # type: ignore[attr-defined]

    def counter(self, name: str, gpu: tuple[str, str], value: float, **extra: str) -> None:
        family = self._family(name, GPU_LABELS + tuple(extra), counter=True)
        family.add_metric([*gpu, *extra.values()], value)  # type: ignore[attr-defined]


@register(
    "gpu",
    help="NVIDIA GPUs through NVML: utilization and its sub-second samples, memory, clocks and throttle "
    "reasons, power, PCIe, ECC, per-process memory, GPM on Hopper and later.",
    options=(
        Option("profile", "", "Replay this recorded GPU profile (YAML, see docs/gpu.md) instead of reading "
               "NVML: for demos and tests on machines without a GPU."),
        Option("max-processes", 5, "Per GPU, export the memory of at most this many process names (the "
               "largest).", parse=parse_positive_int),
        Option("only-unique", False, "Export only the GPU series dcgm-exporter's default counters lack (the "
               "sub-second samples, throttle reasons, PCIe link, XIDs per code, per-process memory, ...; "
               "docs/coexistence.md), for running beside it", parse=parse_bool, switch=True),
        Option("idle-ratio", 0.05, "GPU-Util (0-1) at or below which a GPU counts as idle for "
               "bottleneck_gpu_idle_seconds_total: its busiest sample since the previous scrape must not "
               "exceed it.", parse=parse_ratio),
    ),
)
class GpuCollector:
    def __init__(self, ctx: Context) -> None:
        self.procfs = ctx.procfs
        self.max_processes = int(ctx.options.get("max-processes", 5))
        # Beside dcgm-exporter: every family outside GPU_UNIQUE would duplicate one of its series. A counter
        # family's name comes without its _total (prometheus_client adds it to the samples).
        self.exported = (frozenset(name.removesuffix("_total") for name in GPU_UNIQUE)
                         if ctx.options.get("only-unique") else None)
        self.backend = self._backend(ctx)
        self.guard = FieldGuard()
        self.histograms: dict[str, UtilizationHistogram] = {}
        self.identities: dict[str, Identity] = {}
        self.xid_counts: dict[tuple[str, int], int] = {}  # (gpu label, XID code) -> events since start
        self._xid_born: set[tuple[str, int]] = set()  # first seen this scrape: exposed at 0 (see _count_xids)
        self._nvml_unavailable_logged = False
        self.idle = IdleLedger(float(ctx.options.get("idle-ratio", 0.05)))
        self.affinities: dict[str, Affinity] = {}  # physical GPU -> its CPUs and NUMA nodes (never change)
        # This scrape's readings that idle time and placement are worked out from, per gpu label.
        self._busiest: dict[str, float] = {}
        self._holders: dict[str, list[tuple[int, int]]] = {}  # gpu -> [(pid, used bytes)]
        self._names: dict[int, tuple[str, str]] = {}  # pid -> (process, local_rank), read once a scrape
        # Scrapes may run concurrently (threaded HTTP server); sample bookkeeping must not interleave.
        self._lock = threading.Lock()

    @staticmethod
    def _backend(ctx: Context) -> GpuBackend:
        if ctx.gpu_backend_factory is not None:
            return ctx.gpu_backend_factory()
        profile = ctx.options.get("profile") or ""
        if profile:
            from bottleneck_exporter.gpu.fake import FakeBackend
            from bottleneck_exporter.gpu.profile import load_profile

            return FakeBackend(load_profile(profile))  # a bad profile refuses startup with a clear message
        from bottleneck_exporter.gpu.nvml import NvmlBackend

        return NvmlBackend()

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            families = list(self._collect())
        if self.exported is None:
            return families
        return [family for family in families if family.name in self.exported]

    def _collect(self) -> Iterable[Metric]:
        try:
            devices = self.backend.devices()
        except NvmlUnavailable as err:
            if not self._nvml_unavailable_logged:
                self._nvml_unavailable_logged = True
                log.warning("NVML not available: %s; no GPU metrics will be exported", err)
            return
        self.guard.begin_scrape()
        driver = self.guard.read("", "driver", self.backend.driver) or DriverInfo("", "")
        out = _Families()
        up = GaugeMetricFamily("bottleneck_gpu_up", HELP["bottleneck_gpu_up"], labels=list(GPU_LABELS))
        info = GaugeMetricFamily("bottleneck_gpu_info", HELP["bottleneck_gpu_info"],
                                 labels=[*GPU_LABELS, *INFO_LABELS])
        parents = {d.parent for d in devices if d.parent is not None}
        self._busiest, self._holders, self._names = {}, {}, {}
        for device in devices:
            identity = self.guard.read(device.key, "identity", self.backend.identity, device.key)
            if identity is not None:
                self.identities[device.key] = identity
            known = self.identities.get(device.key)
            gpu = (device.key, known.uuid if known else "")
            if known is not None:
                info.add_metric([*gpu, known.name, driver.driver_version, driver.cuda_version,
                                 known.pci_bus_id, known.vbios_version, known.mig_mode], 1.0)
            if identity is not None:
                self._read_device(out, device, gpu, has_mig_instances=device.key in parents)
                if not self.guard.is_down(device.key):
                    self._count_idle(device.key)
            # Reads may discover the loss half-way: up reflects the state after all of them.
            up.add_metric(list(gpu), 0.0 if self.guard.is_down(device.key) else 1.0)
        self._count_xids(out)
        self.idle.forget(d.key for d in devices)
        self._expose_idle(out)
        self._expose_placement(out, devices)
        yield up
        if info.samples:
            yield info
        yield from out.families.values()

    def _read_device(
        self, out: _Families, device: Device, gpu: tuple[str, str], has_mig_instances: bool
    ) -> None:
        key = device.key
        self._read_utilization(out, key, gpu)
        self._read_samples(out, key, gpu)
        self._read_memory(out, key, gpu)
        self._read_thermal_and_power(out, key, gpu)
        self._read_clocks(out, key, gpu)
        self._read_throttling(out, key, gpu)
        self._read_pcie(out, key, gpu)
        self._read_health(out, key, gpu)
        # A MIG-enabled GPU lists every instance's processes again; its instances carry them once.
        if not has_mig_instances:
            self._read_processes(out, key, gpu)
        self._read_gpm(out, key, gpu)

    def _read(self, key: str, field: str, fn: Callable[..., T], *args: Any) -> T | None:
        return self.guard.read(key, field, fn, key, *args)

    def _read_utilization(self, out: _Families, key: str, gpu: tuple[str, str]) -> None:
        utilization = self._read(key, "utilization", self.backend.utilization)
        if utilization is not None:
            self._busiest[key] = utilization.gpu
            out.gauge("bottleneck_gpu_utilization_ratio", gpu, utilization.gpu)
            out.gauge("bottleneck_gpu_memory_utilization_ratio", gpu, utilization.memory)

    def _read_memory(self, out: _Families, key: str, gpu: tuple[str, str]) -> None:
        memory = self._read(key, "memory", self.backend.memory)
        if memory is not None:
            out.gauge("bottleneck_gpu_memory_used_bytes", gpu, memory.used_bytes)
            out.gauge("bottleneck_gpu_memory_total_bytes", gpu, memory.total_bytes)
            if memory.reserved_bytes is not None:
                out.gauge("bottleneck_gpu_memory_reserved_bytes", gpu, memory.reserved_bytes)

    def _read_thermal_and_power(self, out: _Families, key: str, gpu: tuple[str, str]) -> None:
        backend = self.backend
        for name, field, fn in (
            ("bottleneck_gpu_temperature_celsius", "temperature_celsius", backend.temperature_celsius),
            ("bottleneck_gpu_slowdown_temperature_celsius", "slowdown_temperature_celsius",
             backend.slowdown_temperature_celsius),
            ("bottleneck_gpu_shutdown_temperature_celsius", "shutdown_temperature_celsius",
             backend.shutdown_temperature_celsius),
            ("bottleneck_gpu_power_watts", "power_watts", backend.power_watts),
            ("bottleneck_gpu_power_limit_watts", "power_limit_watts", backend.power_limit_watts),
            ("bottleneck_gpu_fan_ratio", "fan_ratio", backend.fan_ratio),
        ):
            value = self._read(key, field, fn)
            if value is not None:
                out.gauge(name, gpu, value)
        energy = self._read(key, "energy_joules", backend.energy_joules)
        if energy is not None:
            out.counter("bottleneck_gpu_energy_joules_total", gpu, energy)

    def _read_clocks(self, out: _Families, key: str, gpu: tuple[str, str]) -> None:
        for name, field, clock_fn in (("bottleneck_gpu_clock_hertz", "clocks", self.backend.clocks),
                                      ("bottleneck_gpu_clock_max_hertz", "max_clocks", self.backend.max_clocks)):
            clocks = self._read(key, field, clock_fn)
            if clocks is not None:
                out.gauge(name, gpu, clocks.sm_hz, clock="sm")
                out.gauge(name, gpu, clocks.memory_hz, clock="memory")

    def _read_throttling(self, out: _Families, key: str, gpu: tuple[str, str]) -> None:
        reasons = self._read(key, "clock_event_reasons", self.backend.clock_event_reasons)
        for reason, active in (reasons or {}).items():
            out.gauge("bottleneck_gpu_clock_event_active", gpu, 1.0 if active else 0.0, reason=reason)
        for policy in VIOLATION_POLICIES:
            seconds = self._read(key, f"violation_seconds.{policy}", self.backend.violation_seconds, policy)
            if seconds is not None:
                out.counter("bottleneck_gpu_throttled_seconds_total", gpu, seconds, reason=policy)

    def _read_gpm(self, out: _Families, key: str, gpu: tuple[str, str]) -> None:
        gpm = self._read(key, "gpm", self.backend.gpm)
        if gpm is not None:
            for field, name in _GPM_NAMES.items():
                value = getattr(gpm, field)
                if value is not None:
                    out.gauge(name, gpu, value)

    def _count_xids(self, out: _Families) -> None:
        """Read the XID events since the last scrape (never waits) and expose the count per GPU and code.

        A series is exposed at 0 on the scrape that first sees its code and with its count from the next
        one on: Prometheus' increase() cannot see the first event of a series that starts at 1."""
        events = self.guard.read("", "xid_events", self.backend.xid_events) or []
        self._xid_born = set()
        for event in events:
            key = (event.device, event.xid)
            if key not in self.xid_counts:
                self.xid_counts[key] = 0
                self._xid_born.add(key)
            self.xid_counts[key] += 1
        for (device, code), count in sorted(self.xid_counts.items()):
            known = self.identities.get(device)
            gpu = (device, known.uuid if known else "")
            shown = 0 if (device, code) in self._xid_born else count
            out.counter("bottleneck_gpu_xid_errors_total", gpu, shown, xid=str(code))

    def _read_samples(self, out: _Families, key: str, gpu: tuple[str, str]) -> None:
        histogram = self.histograms.get(key)
        since = histogram.last_seen_us if histogram else 0
        samples = self.guard.read(key, "utilization_samples", self.backend.utilization_samples, key, since)
        if samples:
            # The sub-second samples see a burst of work that one GPU-Util reading between scrapes misses.
            self._busiest[key] = max(sample.value for sample in samples)
        if samples is not None:
            if histogram is None:
                histogram = self.histograms[key] = UtilizationHistogram()
            histogram.observe(samples)
        if histogram is None or self.guard.is_down(key):
            return
        family = out.families.get("bottleneck_gpu_utilization_samples")
        if family is None:
            name = "bottleneck_gpu_utilization_samples"
            family = HistogramMetricFamily(name, HELP[name], labels=list(GPU_LABELS))
            out.families["bottleneck_gpu_utilization_samples"] = family
        family.add_metric(list(gpu), histogram.cumulative_buckets(), histogram.sum)  # type: ignore[attr-defined]

    def _read_pcie(self, out: _Families, key: str, gpu: tuple[str, str]) -> None:
        link = self.guard.read(key, "pcie_link", self.backend.pcie_link, key)
        if link is not None:
            out.gauge("bottleneck_gpu_pcie_link_generation", gpu, link.generation)
            out.gauge("bottleneck_gpu_pcie_link_max_generation", gpu, link.max_generation)
            out.gauge("bottleneck_gpu_pcie_link_width", gpu, link.width)
            out.gauge("bottleneck_gpu_pcie_link_max_width", gpu, link.max_width)
        throughput = self.guard.read(key, "pcie_throughput", self.backend.pcie_throughput, key)
        if throughput is not None:
            out.gauge("bottleneck_gpu_pcie_throughput_bytes_per_second", gpu, throughput.tx_bytes_per_second,
                      direction="tx")
            out.gauge("bottleneck_gpu_pcie_throughput_bytes_per_second", gpu, throughput.rx_bytes_per_second,
                      direction="rx")
        replays = self.guard.read(key, "pcie_replays", self.backend.pcie_replays, key)
        if replays is not None:
            out.counter("bottleneck_gpu_pcie_replays_total", gpu, replays)

    def _read_health(self, out: _Families, key: str, gpu: tuple[str, str]) -> None:
        ecc = self.guard.read(key, "ecc_errors", self.backend.ecc_errors, key)
        if ecc is not None:
            out.counter("bottleneck_gpu_ecc_errors_total", gpu, ecc.corrected, type="corrected")
            out.counter("bottleneck_gpu_ecc_errors_total", gpu, ecc.uncorrected, type="uncorrected")
        rows = self.guard.read(key, "remapped_rows", self.backend.remapped_rows, key)
        if rows is not None:
            out.gauge("bottleneck_gpu_remapped_rows", gpu, rows.correctable, cause="correctable")
            out.gauge("bottleneck_gpu_remapped_rows", gpu, rows.uncorrectable, cause="uncorrectable")
            out.gauge("bottleneck_gpu_remapped_rows_pending", gpu, 1.0 if rows.pending else 0.0)
            out.gauge("bottleneck_gpu_remapped_rows_failed", gpu, 1.0 if rows.failed else 0.0)

    def _read_processes(self, out: _Families, key: str, gpu: tuple[str, str]) -> None:
        processes = self.guard.read(key, "processes", self.backend.processes, key)
        if processes is None:
            return
        by_name: dict[str, int] = {}
        # NVML lists a process with a context; used None (some virtualised setups) still holds the GPU.
        self._holders[key] = [(process.pid, process.used_bytes or 0) for process in processes]
        for process in processes:
            if process.used_bytes is None:
                continue
            name = self._command_name(process.pid)
            by_name[name] = by_name.get(name, 0) + process.used_bytes
        largest = sorted(by_name.items(), key=lambda item: (-item[1], item[0]))[: self.max_processes]
        for name, used in largest:
            out.gauge("bottleneck_gpu_process_memory_used_bytes", gpu, used, process=name)

    def _gpu_labels(self, key: str) -> tuple[str, str]:
        known = self.identities.get(key)
        return (key, known.uuid if known else "")

    def _process_labels(self, pid: int) -> tuple[str, str]:
        if pid not in self._names:
            self._names[pid] = process_labels(self.procfs, pid)
        return self._names[pid]

    def _count_idle(self, key: str) -> None:
        holders = self._holders.get(key)
        # Like the memory series: the largest few holders per GPU get a series of their own.
        largest = None if holders is None else sorted(holders, key=lambda h: (-h[1], h[0]))[: self.max_processes]
        self.idle.observe(key, Reading(
            now=self.backend.now_seconds(),
            busiest=self._busiest.get(key),
            holders=None if largest is None else frozenset(self._process_labels(pid) for pid, _ in largest),
        ))

    def _expose_idle(self, out: _Families) -> None:
        # A GPU off the bus shows only bottleneck_gpu_up, like its other series.
        for (key, held), seconds in sorted(self.idle.gpu_seconds.items()):
            if self.guard.is_down(key):
                continue
            out.counter("bottleneck_gpu_idle_seconds_total", self._gpu_labels(key), seconds, held=held)
        for (key, process, local_rank), seconds in sorted(self.idle.process_seconds.items()):
            if self.guard.is_down(key):
                continue
            out.counter("bottleneck_gpu_process_idle_seconds_total", self._gpu_labels(key), seconds,
                        process=process, local_rank=local_rank)

    def _affinity(self, device: Device) -> Affinity | None:
        physical = device.parent or device.key
        if physical not in self.affinities:
            cpus = self._read(physical, "cpu_affinity", self.backend.cpu_affinity)
            nodes = self._read(physical, "memory_affinity", self.backend.memory_affinity)
            if cpus is None or nodes is None:
                return None
            self.affinities[physical] = Affinity(cpus, nodes)
        return self.affinities[physical]

    def _expose_placement(self, out: _Families, devices: list[Device]) -> None:
        """Each GPU process against the GPU it holds the most memory on: a rank's stray context on another
        GPU (PyTorch's on GPU 0 is the classic) is not where it computes."""
        home: dict[int, tuple[int, str]] = {}
        for key, holders in self._holders.items():
            for pid, used in holders:
                if pid not in home or used > home[pid][0]:
                    home[pid] = (used, key)
        by_key = {device.key: device for device in devices}
        shown: dict[str, int] = {}
        seen: set[tuple[str, str, str]] = set()
        for pid, (_used, key) in sorted(home.items(), key=lambda item: (-item[1][0], item[0])):
            device = by_key.get(key)
            if device is None or self.guard.is_down(key) or shown.get(key, 0) >= self.max_processes:
                continue
            near = self._affinity(device)
            try:
                allowed = read_allowed(self.procfs, pid)
            except ProcParseError as err:
                # One garbled status file costs that process's placement, never the GPU series.
                log.warning("placement of GPU process skipped: %s", err)
                continue
            placement = None if near is None or allowed is None else place(allowed, near)
            process, local_rank = self._process_labels(pid)
            if placement is None or (key, process, local_rank) in seen:
                continue  # two processes of one name on one GPU: the one with more memory speaks for both
            seen.add((key, process, local_rank))
            shown[key] = shown.get(key, 0) + 1
            gpu = self._gpu_labels(key)
            out.gauge("bottleneck_gpu_process_local_cpus_ratio", gpu, placement.local_cpus_ratio,
                      process=process, local_rank=local_rank)
            out.gauge("bottleneck_gpu_process_local_memory_ratio", gpu, placement.local_memory_ratio,
                      process=process, local_rank=local_rank)

    def _command_name(self, pid: int) -> str:
        # NVML reports host PIDs; in a container without hostPID they are not visible under our procfs.
        comm = read_text(os.path.join(self.procfs, str(pid), "comm"))
        return comm.strip() if comm and comm.strip() else "unknown"
