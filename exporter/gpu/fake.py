"""A GPU source that replays a recorded profile (``bottleneck_exporter.gpu.profile``) through the GpuBackend protocol.

Used by the tests and by ``--collector.gpu.profile=FILE`` for demos on machines without a GPU. It answers
exactly like the NVML backend would, errors included: a field the profile lists as unsupported raises
NotSupported, a GPU with ``lost_from_scrape: N`` raises GpuLost on every call from scrape N on, and a
profile with ``nvml_unavailable`` raises NvmlUnavailable. Each ``devices()`` call advances one recorded
scrape; after the last recorded scrape the last one repeats. ``calls`` counts every call per (device, field)
so tests can check what the collector asked for.

Sample timestamps are virtual: scrape k's samples start at ``EPOCH_US + (k-1) * scrape_interval``, and
like NVML's buffer only the current and previous scrape's samples are held.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from bottleneck_exporter.gpu.backend import (
    Clocks,
    Device,
    DriverInfo,
    EccErrors,
    FunctionNotFound,
    GpmMetrics,
    GpuLost,
    GpuProcess,
    Identity,
    Memory,
    NotSupported,
    NvmlUnavailable,
    PcieLink,
    PcieThroughput,
    RemappedRows,
    Utilization,
    UtilizationSample,
    XidEvent,
)
from bottleneck_exporter.gpu.profile import GpuRecording, Profile, SampleSpec

EPOCH_US = 1_752_480_000_000_000  # 2025-07-14T08:00:00Z, an arbitrary fixed start for reproducible timestamps


class FakeBackend:
    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self.scrape = 0
        self.calls: Counter[tuple[str, str]] = Counter()
        self._gpus = {rec.key: rec for rec in profile.gpus}
        self._gpm_seen: set[str] = set()

    def devices(self) -> list[Device]:
        if self.profile.nvml_unavailable is not None:
            raise NvmlUnavailable(self.profile.nvml_unavailable)
        self.scrape += 1
        return [Device(rec.key, rec.parent) for rec in self.profile.gpus]

    def driver(self) -> DriverInfo:
        return self.profile.driver

    def now_seconds(self) -> float:
        # Scrape k is taken (k-1) scrape intervals after the first, whatever the wall clock says.
        return (max(self.scrape, 1) - 1) * self.profile.scrape_interval_us / 1e6

    def _is_lost(self, rec: GpuRecording) -> bool:
        if rec.lost_from_scrape is not None and self.scrape >= rec.lost_from_scrape:
            return True
        # A MIG instance goes down with its GPU.
        return rec.parent is not None and self._is_lost(self._gpus[rec.parent])

    def _check(self, device: str, field: str, counted_as: str | None = None) -> GpuRecording:
        self.calls[(device, counted_as or field)] += 1
        rec = self._gpus[device]
        if self._is_lost(rec):
            raise GpuLost(f"GPU is lost, recorded from scrape {rec.lost_from_scrape}")
        if field in rec.function_not_found:
            raise FunctionNotFound(f"Function Not Found ({field})")
        if field in rec.unsupported:
            raise NotSupported(f"Not Supported ({field})")
        return rec

    def _scrape_values(self, rec: GpuRecording, scrape: int) -> dict[str, Any]:
        return rec.scrapes[min(max(scrape, 1), len(rec.scrapes)) - 1]

    def _value(self, device: str, field: str) -> Any:
        rec = self._check(device, field)
        values = self._scrape_values(rec, self.scrape)
        if field not in values:
            raise NotSupported(f"Not Supported ({field} not recorded for scrape {self.scrape})")
        return values[field]

    def identity(self, device: str) -> Identity:
        return self._check(device, "identity").identity

    def utilization(self, device: str) -> Utilization:
        value: Utilization = self._value(device, "utilization")
        return value

    def utilization_samples(self, device: str, since_us: int) -> list[UtilizationSample]:
        rec = self._check(device, "utilization_samples")
        samples = []
        current = max(self.scrape, 1)
        interval = self.profile.scrape_interval_us
        # Like NVML's sample buffer, hold only recent samples: this scrape's and the previous one's. Scrape k's
        # samples all lie before EPOCH_US + k * interval, so older scrapes cannot be newer than since_us.
        first = max(current - 1, 1, (since_us - EPOCH_US) // interval + 1)
        for scrape in range(first, current + 1):
            spec: SampleSpec | None = self._scrape_values(rec, scrape).get("utilization_samples")
            if spec is None:
                continue
            start = EPOCH_US + (scrape - 1) * interval
            for i, value in enumerate(spec.values()):
                timestamp = start + i * spec.period_us
                if timestamp > since_us:
                    samples.append(UtilizationSample(timestamp, value))
        return samples

    def memory(self, device: str) -> Memory:
        value: Memory = self._value(device, "memory")
        return value

    def temperature_celsius(self, device: str) -> float:
        return float(self._value(device, "temperature_celsius"))

    def slowdown_temperature_celsius(self, device: str) -> float:
        return float(self._value(device, "slowdown_temperature_celsius"))

    def shutdown_temperature_celsius(self, device: str) -> float:
        return float(self._value(device, "shutdown_temperature_celsius"))

    def power_watts(self, device: str) -> float:
        return float(self._value(device, "power_watts"))

    def power_limit_watts(self, device: str) -> float:
        return float(self._value(device, "power_limit_watts"))

    def energy_joules(self, device: str) -> float:
        return float(self._value(device, "energy_joules"))

    def clocks(self, device: str) -> Clocks:
        value: Clocks = self._value(device, "clocks")
        return value

    def max_clocks(self, device: str) -> Clocks:
        value: Clocks = self._value(device, "max_clocks")
        return value

    def fan_ratio(self, device: str) -> float:
        return float(self._value(device, "fan_ratio"))

    def clock_event_reasons(self, device: str) -> dict[str, bool]:
        return dict(self._value(device, "clock_event_reasons"))

    def violation_seconds(self, device: str, policy: str) -> float:
        rec = self._check(device, "violation_seconds", counted_as=f"violation_seconds.{policy}")
        recorded = self._scrape_values(rec, self.scrape).get("violation_seconds", {})
        if policy not in recorded:
            raise NotSupported(f"Not Supported (violation policy {policy})")
        return float(recorded[policy])

    def pcie_link(self, device: str) -> PcieLink:
        value: PcieLink = self._value(device, "pcie_link")
        return value

    def pcie_throughput(self, device: str) -> PcieThroughput:
        value: PcieThroughput = self._value(device, "pcie_throughput")
        return value

    def pcie_replays(self, device: str) -> int:
        return int(self._value(device, "pcie_replays"))

    def ecc_errors(self, device: str) -> EccErrors:
        value: EccErrors = self._value(device, "ecc_errors")
        return value

    def remapped_rows(self, device: str) -> RemappedRows:
        value: RemappedRows = self._value(device, "remapped_rows")
        return value

    def processes(self, device: str) -> list[GpuProcess]:
        return list(self._value(device, "processes"))

    def cpu_affinity(self, device: str) -> frozenset[int]:
        return frozenset(self._value(device, "cpu_affinity"))

    def memory_affinity(self, device: str) -> frozenset[int]:
        return frozenset(self._value(device, "memory_affinity"))

    def xid_events(self) -> list[XidEvent]:
        """Each recorded scrape's events once (a lost GPU's too: the driver reports its fall off the bus);
        none once the recording is over, where the readings repeat the last scrape."""
        events = []
        for rec in self.profile.gpus:
            self.calls[(rec.key, "xid_events")] += 1
            if "xid_events" in rec.unsupported | rec.function_not_found or self.scrape > len(rec.scrapes):
                continue
            events += [XidEvent(rec.parent or rec.key, code)
                       for code in self._scrape_values(rec, self.scrape).get("xid_events", [])]
        return events

    def gpm(self, device: str) -> GpmMetrics | None:
        value: GpmMetrics = self._value(device, "gpm")
        # Like NVML: the first sample only starts the interval; metrics come from the second call on.
        if device not in self._gpm_seen:
            self._gpm_seen.add(device)
            return None
        return value
