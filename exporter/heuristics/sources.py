"""Where the catalogue's signals can come from, and which combinations of sources a rule bundle supports.

A *source* is an exporter that can provide one family of raw series: the host (CPU, memory, pressure,
disks, NICs), the GPUs, or the training processes (the hook's push receiver and the training collector,
ours in every bundle: no other exporter has them). A *bundle* picks one source per family; ``make generate``
writes one set of rule files per bundle. Every recording rule records to the same name whatever its source,
so alerts, dashboards and ``diagnose`` read only recording rules.

Each source also carries a *translator*: our own series of its family rewritten as that exporter would expose
them (names, labels, units). The scenario table goes through it, so one table tests every bundle and the
per-source PromQL in the catalogue is checked against the peer's real names, labels and units.

Names, labels and units of the peers:

* node_exporter: the Debian ``prometheus-node-exporter`` scrape (its default collectors: cpu, pressure,
  meminfo, vmstat ``pswpin``/``pswpout``, diskstats, netdev, netclass ``speed_bytes``, schedstat, loadavg).
* dcgm-exporter: ``etc/default-counters.csv`` of NVIDIA/dcgm-exporter and its rendered label set (``gpu``,
  ``UUID``, ``pci_bus_id``, ``device`` = ``nvidia<gpu>``, ``modelName``, ``Hostname``/``hostname``,
  ``DCGM_FI_DRIVER_VERSION``; Kubernetes ``container``/``namespace``/``pod``), as recorded in
  ``tests/fixtures/dcgm-exporter/``. Utilization in percent, framebuffer in MiB; the default counters have no
  clock-event reasons, no PCIe link generation/width and no per-code XID counter (``DCGM_FI_DEV_XID_ERRORS`` is
  the last XID's value, a gauge).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from exporter.heuristics.scenarios import Series

TRAINING, HOST, GPU = "training", "host", "gpu"
FAMILIES = (TRAINING, HOST, GPU)
OURS = "bottleneck-exporter"
NODE_EXPORTER = "node_exporter"
DCGM = "dcgm-exporter"

# Labels dcgm-exporter puts on every GPU series that ours do not have (older releases spell Hostname).
DCGM_ONLY_LABELS = ("UUID", "pci_bus_id", "device", "modelName", "Hostname", "hostname", "DCGM_FI_DRIVER_VERSION")
MIB = 2**20


@dataclasses.dataclass(frozen=True)
class Source:
    name: str  # "bottleneck-exporter", "node_exporter", "dcgm-exporter"
    family: str  # the family of series it provides in a bundle
    what: str  # for the runbook: what to run
    translate: Callable[[Sequence[Series]], list[Series]]  # our series of this family → this source's


def family_of(metric: str) -> tuple[str, str] | None:
    """(family, source) of a raw series name; None for a recording rule's name."""
    if ":" in metric:
        return None
    if metric.startswith("node_"):
        return HOST, NODE_EXPORTER
    if metric.startswith("DCGM_"):
        return GPU, DCGM
    if metric.startswith("bottleneck_gpu_"):
        return GPU, OURS
    if metric == "up" or metric.startswith(("bottleneck_train_", "bottleneck_training_", "bottleneck_scrape_")):
        return TRAINING, OURS
    if metric.startswith("bottleneck_"):
        return HOST, OURS
    raise ValueError(f"series {metric!r} belongs to no known source")


def _of_family(series: Sequence[Series], family: str) -> list[Series]:
    return [s for s in series if family_of(dict(s.labels)["__name__"]) == (family, OURS)]


def _renamed(s: Series, name: str, scale: float = 1.0, labels: dict[str, str] | None = None,
             drop: Sequence[str] = ()) -> Series:
    from exporter.heuristics.scenarios import series

    kept = {k: v for k, v in s.labels if k != "__name__" and k not in drop}
    track = [None if v is None else (v * scale if scale != 1.0 else v) for v in s.track]
    return series(name, {**kept, **(labels or {})}, track)


def _ours(series: Sequence[Series]) -> list[Series]:
    return list(series)


# node_exporter's name for each of our host series it has; bottleneck_cpus has none (count its CPUs).
NODE_EXPORTER_NAMES = {
    "bottleneck_cpu_seconds_total": "node_cpu_seconds_total",
    "bottleneck_cpu_runqueue_wait_seconds_total": "node_schedstat_waiting_seconds_total",
    "bottleneck_load1": "node_load1",
    "bottleneck_context_switches_total": "node_context_switches_total",
    "bottleneck_memory_total_bytes": "node_memory_MemTotal_bytes",
    "bottleneck_memory_available_bytes": "node_memory_MemAvailable_bytes",
    "bottleneck_memory_swapped_in_pages_total": "node_vmstat_pswpin",
    "bottleneck_memory_swapped_out_pages_total": "node_vmstat_pswpout",
    "bottleneck_disk_io_time_seconds_total": "node_disk_io_time_seconds_total",
    "bottleneck_network_receive_bytes_total": "node_network_receive_bytes_total",
    "bottleneck_network_transmit_bytes_total": "node_network_transmit_bytes_total",
    "bottleneck_network_speed_bytes": "node_network_speed_bytes",
}
# PSI: node_exporter splits our {resource, kind} into one counter per resource and kind.
PSI_KINDS = {"some": "waiting", "full": "stalled"}


def _node_exporter(series: Sequence[Series]) -> list[Series]:
    out = []
    for s in _of_family(series, HOST):
        labels = dict(s.labels)
        name = labels["__name__"]
        if name == "bottleneck_pressure_seconds_total":
            peer = f"node_pressure_{labels['resource']}_{PSI_KINDS[labels['kind']]}_seconds_total"
            out.append(_renamed(s, peer, drop=("resource", "kind")))
        elif name in NODE_EXPORTER_NAMES:
            out.append(_renamed(s, NODE_EXPORTER_NAMES[name]))
    return out


# dcgm-exporter's default counters for each of our GPU series it has, with the factor to its unit.
DCGM_NAMES = {
    "bottleneck_gpu_utilization_ratio": ("DCGM_FI_DEV_GPU_UTIL", 100.0),
    "bottleneck_gpu_memory_used_bytes": ("DCGM_FI_DEV_FB_USED", 1 / MIB),
    "bottleneck_gpu_temperature_celsius": ("DCGM_FI_DEV_GPU_TEMP", 1.0),
}
DCGM_RESERVED_MIB = 512.0  # the driver's reservation: FB_USED + FB_FREE + FB_RESERVED is the card's memory


def _dcgm_labels(ours: dict[str, str]) -> dict[str, str]:
    return {"UUID": ours["uuid"], "pci_bus_id": f"00000000:{0x1B + int(ours['gpu']):02X}:00.0",
            "device": f"nvidia{ours['gpu']}", "modelName": "NVIDIA H100 80GB HBM3", "hostname": "gpu-node-1",
            "DCGM_FI_DRIVER_VERSION": "590.48.01"}


def _dcgm(series: Sequence[Series]) -> list[Series]:
    out = []
    used = {tuple(sorted((k, v) for k, v in s.labels if k != "__name__")): s for s in series
            if dict(s.labels)["__name__"] == "bottleneck_gpu_memory_used_bytes"}
    for s in _of_family(series, GPU):
        labels = dict(s.labels)
        name = labels["__name__"]
        extra = _dcgm_labels(labels)
        if name in DCGM_NAMES:
            peer, scale = DCGM_NAMES[name]
            out.append(_renamed(s, peer, scale, extra, drop=("uuid",)))
        elif name == "bottleneck_gpu_memory_total_bytes":
            key = tuple(sorted((k, v) for k, v in s.labels if k != "__name__"))
            used_track = used[key].track
            free = [None if t is None or u is None else t / MIB - u / MIB - DCGM_RESERVED_MIB
                    for t, u in zip(s.track, used_track, strict=True)]
            reserved = [None if t is None else DCGM_RESERVED_MIB for t in s.track]
            out.append(_renamed(dataclasses.replace(s, track=tuple(free)), "DCGM_FI_DEV_FB_FREE", 1.0, extra,
                                drop=("uuid",)))
            out.append(_renamed(dataclasses.replace(s, track=tuple(reserved)), "DCGM_FI_DEV_FB_RESERVED", 1.0,
                                extra, drop=("uuid",)))
    return out


SOURCES: dict[str, dict[str, Source]] = {
    TRAINING: {OURS: Source(OURS, TRAINING, "bottleneck-exporter (push receiver, training collector)", _ours)},
    HOST: {
        OURS: Source(OURS, HOST, "bottleneck-exporter's host collectors (cpu, memory, pressure, disk, network)",
                     _ours),
        NODE_EXPORTER: Source(NODE_EXPORTER, HOST, "node_exporter (default collectors)", _node_exporter),
    },
    GPU: {
        OURS: Source(OURS, GPU, "bottleneck-exporter's gpu collector (NVML)", _ours),
        DCGM: Source(DCGM, GPU, "dcgm-exporter (default counters)", _dcgm),
    },
}


@dataclasses.dataclass(frozen=True)
class Bundle:
    name: str
    host: str
    gpu: str
    sentence: str

    @property
    def sources(self) -> dict[str, str]:
        """family → source name."""
        return {TRAINING: OURS, HOST: self.host, GPU: self.gpu}

    def provides(self, metric: str) -> bool:
        found = family_of(metric)
        return found is None or self.sources[found[0]] == found[1]

    def translate(self, series: Sequence[Series]) -> list[Series]:
        """Our series (every family) → what Prometheus holds when this bundle's sources export them."""
        out: list[Series] = []
        for family, source in self.sources.items():
            out += SOURCES[family][source].translate(_of_family(series, family))
        return out


DEFAULT_BUNDLE = "bottleneck"
BUNDLES: dict[str, Bundle] = {b.name: b for b in (
    Bundle(DEFAULT_BUNDLE, OURS, OURS, "everything from bottleneck-exporter (the default)"),
    Bundle("node-exporter", NODE_EXPORTER, OURS, "host series from node_exporter, GPU series from "
           "bottleneck-exporter's gpu collector"),
    Bundle("node-exporter-dcgm", NODE_EXPORTER, DCGM, "host series from node_exporter, GPU series from "
           "dcgm-exporter"),
)}
