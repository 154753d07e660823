"""The scenario table's series as each peer exporter exposes them: our series of a family rewritten with the
peer's names, labels and units, so that one table tests every bundle and the per-source PromQL in the catalogue
meets the peer's real series.

Reads the twin tables of ``exporter/collectors/coexistence.py`` (which peer series carries each of ours, in
which unit). One translator per source; a bundle's series are its sources' translations of their families::

    bottleneck_cpu_seconds_total{cpu="0", mode="idle", ...}  →  node_cpu_seconds_total{..., job="node-exporter"}
    bottleneck_gpu_utilization_ratio{...} 0.9                →  DCGM_FI_DEV_GPU_UTIL{UUID="GPU-...", ...} 90

Test data: used by the generator and the tests, never by the daemon.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from bottleneck_exporter.collectors.coexistence import Twin
from bottleneck_exporter.heuristics.scenarios.series import Series, series
from bottleneck_exporter.heuristics.sources import (
    DCGM,
    DCGM_BESIDE_OURS,
    DCGM_TWINS,
    KUBERNETES_GPU_INFO,
    NODE_EXPORTER,
    NODE_EXPORTER_TWINS,
    OURS,
    PEER_JOB,
    Bundle,
    family_of,
    gpu_unique,
    is_series,
)

MIB = 2**20


def _name(s: Series) -> str:
    return dict(s.labels)["__name__"]


def _of_family(series: Sequence[Series], family: str) -> list[Series]:
    return [s for s in series if (family_of(_name(s)) or ("",))[0] == family]


def _peer(s: Series, name: str, scale: float = 1.0, labels: Mapping[str, str] | None = None,
          drop: Sequence[str] = (), track: Sequence[float | None] | None = None) -> Series:
    """``s`` as the peer exposes it: renamed, in the peer's unit (ours = peer x ``scale``), labels changed."""
    kept = {k: v for k, v in s.labels if k != "__name__" and k not in drop}
    values = s.track if track is None else track
    return series(name, {**kept, **(labels or {})}, [None if v is None else v / scale for v in values])


def _twins(s: Series, table: Mapping[str, tuple[Twin, ...]], labels: Mapping[str, str] | None = None,
           drop: Sequence[str] = ()) -> list[Series]:
    """Our series ``s`` as its twins in ``table`` (collectors/coexistence.py): the twins that are series of the
    peer's own, not expressions over them, and whose ``match`` selects ``s``."""
    ours = dict(s.labels)
    return [_peer(s, twin.series, twin.scale, labels, (*drop, *twin.match)) for twin in table.get(ours["__name__"], ())
            if is_series(twin.series) and all(ours.get(k) == v for k, v in twin.match.items())]


def _node_exporter(series: Sequence[Series]) -> list[Series]:
    """node_exporter keeps our label names (cpu, mode, device); bottleneck_cpus is its counted CPUs."""
    return [peer for s in series for peer in _twins(s, NODE_EXPORTER_TWINS, PEER_JOB[NODE_EXPORTER])]


def _dcgm_labels(ours: Mapping[str, str]) -> dict[str, str]:
    return {"UUID": ours["uuid"], "pci_bus_id": f"00000000:{0x1B + int(ours['gpu']):02X}:00.0",
            "device": f"nvidia{ours['gpu']}", "modelName": "NVIDIA H100 80GB HBM3", "hostname": "gpu-node-1",
            "DCGM_FI_DRIVER_VERSION": "590.48.01", **PEER_JOB[DCGM]}


DCGM_RESERVED_MIB = 512.0  # the driver's reservation


def _dcgm(series: Sequence[Series]) -> list[Series]:
    """dcgm-exporter's default counters with its label set. Our memory total is its FB_USED + FB_FREE +
    FB_RESERVED (the twin table's expression): the translator splits it, with a fixed reservation."""
    out = []
    used = {tuple(kv for kv in s.labels if kv[0] != "__name__"): s.track for s in series
            if _name(s) == "bottleneck_gpu_memory_used_bytes"}
    for s in series:
        if _name(s) == KUBERNETES_GPU_INFO:
            continue  # the kubernetes collector's, not a GPU reading: no dcgm-exporter twin
        labels = _dcgm_labels(dict(s.labels))
        out += _twins(s, DCGM_TWINS, labels, drop=("uuid",))
        if _name(s) == "bottleneck_gpu_memory_total_bytes":
            total, taken = s.track, used[tuple(kv for kv in s.labels if kv[0] != "__name__")]
            reserved = DCGM_RESERVED_MIB * MIB
            free = [None if t is None or u is None else t - u - reserved for t, u in zip(total, taken, strict=True)]
            out.append(_peer(s, "DCGM_FI_DEV_FB_FREE", MIB, labels, ("uuid",), free))
            out.append(_peer(s, "DCGM_FI_DEV_FB_RESERVED", MIB, labels, ("uuid",),
                             [None if t is None else reserved for t in total]))
    return out


def _dcgm_beside_ours(series: Sequence[Series]) -> list[Series]:
    return _dcgm(series) + [s for s in series if gpu_unique(_name(s))]


def _ours(series: Sequence[Series]) -> list[Series]:
    return list(series)


# Source name → its translator of our series of its family (ours: every family, unchanged).
TRANSLATORS: dict[str, Callable[[Sequence[Series]], list[Series]]] = {
    OURS: _ours, NODE_EXPORTER: _node_exporter, DCGM_BESIDE_OURS: _dcgm_beside_ours, DCGM: _dcgm,
}


def translate(bundle: Bundle, series: Sequence[Series]) -> list[Series]:
    """Our series (every family) → what Prometheus holds when ``bundle``'s sources export them."""
    out: list[Series] = []
    for family, source in bundle.sources.items():
        out += TRANSLATORS[source](_of_family(series, family))
    return out
