"""Recorded GPU profiles: a YAML description of a node's GPUs over a few scrapes, validated key by key.

The format (docs/gpu.md has the full description and how to record one)::

    format: 1
    scrape_interval: 15 s
    driver: {driver_version: "590.48.01", cuda_version: "13.1"}
    gpus:
      - gpu: "0"
        identity: {uuid: GPU-…, name: NVIDIA H100 80GB HBM3, pci_bus_id: "00000000:18:00.0"}
        unsupported: [fan_ratio]
        values:                       # what every scrape reads, in nvidia-smi's units or base units
          memory: {total: 81559 MiB, used: 19818 MiB, reserved: 479 MiB}
          power_watts: 629.45 W
          cpu_affinity: 0-31           # nvidia-smi topo -m "CPU Affinity" and "NUMA Affinity"
          memory_affinity: 0
        scrapes:                      # per-scrape overrides of `values`, scrape 1 first
          - {energy_joules: 812345.1 J}
          - {energy_joules: 821790.0 J, xid_events: [79]}   # events the driver reported before scrape 2

Every GPU field (a GpuBackend method name) must be recorded or listed under ``unsupported`` /
``function_not_found``, so a typo is an error and not a silently missing series; ``xid_events`` (XID codes
reported before that scrape, once each) is the exception: a scrape without it had no events.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

from bottleneck_exporter.config import ConfigError, read_yaml, shown_key
from bottleneck_exporter.gpu.backend import (
    CLOCK_EVENT_REASONS,
    VIOLATION_POLICIES,
    Clocks,
    DriverInfo,
    EccErrors,
    GpmMetrics,
    GpuProcess,
    Identity,
    Memory,
    PcieLink,
    PcieThroughput,
    RemappedRows,
    Utilization,
)
from bottleneck_exporter.procfs import ProcParseError, parse_id_list


class ProfileError(ValueError):
    """The profile is unreadable or invalid; the message names the file, the key and the problem."""


@dataclasses.dataclass(frozen=True)
class SampleSpec:
    """Sub-second GPU-Util samples for one scrape interval: ``pattern`` repeated until ``count`` samples."""

    period_us: int
    pattern: tuple[float, ...]
    count: int

    def values(self) -> list[float]:
        return [self.pattern[i % len(self.pattern)] for i in range(self.count)]


@dataclasses.dataclass(frozen=True)
class GpuRecording:
    key: str
    parent: str | None
    identity: Identity
    unsupported: frozenset[str]
    function_not_found: frozenset[str]
    lost_from_scrape: int | None
    scrapes: tuple[dict[str, Any], ...]  # field -> parsed value, one dict per recorded scrape


@dataclasses.dataclass(frozen=True)
class Profile:
    path: str
    description: str
    scrape_interval_us: int
    driver: DriverInfo
    nvml_unavailable: str | None
    gpus: tuple[GpuRecording, ...]

    @property
    def scrape_count(self) -> int:
        """How many scrapes the profile records (at least one); later scrapes repeat the last."""
        return max((len(rec.scrapes) for rec in self.gpus), default=1)


# Units a value may carry, as nvidia-smi prints them: the base unit is value * factor, or value / divisor
# (dividing keeps "41 %" at exactly 0.41). NVML's "KB/s" for PCIe throughput is KiB/s.
_FACTORS = {
    "B": 1.0, "KiB": 1024.0, "MiB": 1024.0**2, "GiB": 1024.0**3, "KB/s": 1024.0, "MB/s": 1024.0**2,
    "Hz": 1.0, "MHz": 1e6, "GHz": 1e9, "W": 1.0, "J": 1.0, "kJ": 1e3, "C": 1.0, "s": 1.0,
}
_DIVISORS = {"%": 100.0, "mW": 1e3, "mJ": 1e3, "ms": 1e3, "us": 1e6, "ns": 1e9}
_UNITS = (*_FACTORS, *_DIVISORS)
_QUANTITY = re.compile(r"^\s*(-?[0-9]+(?:\.[0-9]+)?(?:e-?[0-9]+)?)\s*([A-Za-z%/]*)\s*$")


def quantity(value: Any, where: str) -> float:
    """``'81559 MiB'`` -> bytes, ``'11 %'`` -> 0.11, a bare number as is."""
    if isinstance(value, bool):
        raise ProfileError(f"{where}: expected a number")
    if isinstance(value, (int, float)):
        return float(value)
    match = _QUANTITY.match(str(value))
    if not match or (match.group(2) and match.group(2) not in _UNITS):
        units = ", ".join(_UNITS)
        raise ProfileError(f"{where}: expected a number with an optional unit ({units})")
    number, unit = float(match.group(1)), match.group(2)
    result = number / _DIVISORS[unit] if unit in _DIVISORS else number * _FACTORS.get(unit, 1.0)
    # 15 significant digits drop binary noise ("20.8 %" -> 0.208, not 0.20800000000000002).
    return float(f"{result:.15g}")


def _int(value: Any, where: str) -> int:
    return round(quantity(value, where))


def _mapping(
    value: Any, where: str, required: tuple[str, ...], optional: tuple[str, ...] = ()
) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ProfileError(f"{where}: expected a mapping with keys {', '.join(required + optional)}")
    for key in value:
        if key not in required + optional:
            raise ProfileError(f"{where}.{shown_key(key)}: unknown key (known: {', '.join(required + optional)})")
    for key in required:
        if key not in value:
            raise ProfileError(f"{where}.{key}: missing")
    return value


def _bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise ProfileError(f"{where}: expected true or false")
    return value


def _samples(value: Any, where: str) -> SampleSpec:
    spec = _mapping(value, where, ("period", "pattern", "count"))
    if not isinstance(spec["pattern"], list) or not spec["pattern"]:
        raise ProfileError(f"{where}.pattern: expected a non-empty list of values like '95 %'")
    pattern = tuple(quantity(v, f"{where}.pattern[{i}]") for i, v in enumerate(spec["pattern"]))
    if any(not 0 <= v <= 1 for v in pattern):
        raise ProfileError(f"{where}.pattern: utilization must lie within 0-100 %")
    period_us = _int(quantity(spec["period"], f"{where}.period") * 1e6, f"{where}.period")
    count = _int(spec["count"], f"{where}.count")
    if period_us <= 0 or count < 0:
        raise ProfileError(f"{where}: period must be positive and count not negative")
    return SampleSpec(period_us, pattern, count)


def _reasons(value: Any, where: str) -> dict[str, bool]:
    spec = _mapping(value, where, ("active",), ("supported",))
    supported = spec.get("supported", list(CLOCK_EVENT_REASONS))
    for key in ("active", "supported"):
        names = spec.get(key, supported)
        if not isinstance(names, list) or any(n not in CLOCK_EVENT_REASONS for n in names):
            raise ProfileError(f"{where}.{key}: expected a list of {', '.join(CLOCK_EVENT_REASONS)}")
    return {name: name in spec["active"] for name in CLOCK_EVENT_REASONS if name in supported}


def _violations(value: Any, where: str) -> dict[str, float]:
    spec = _mapping(value, where, (), VIOLATION_POLICIES)
    return {policy: quantity(seconds, f"{where}.{policy}") for policy, seconds in spec.items()}


def _processes(value: Any, where: str) -> list[GpuProcess]:
    if not isinstance(value, list):
        raise ProfileError(f"{where}: expected a list of {{pid, used}}")
    result = []
    for i, item in enumerate(value):
        spec = _mapping(item, f"{where}[{i}]", ("pid", "used"))
        used = None if spec["used"] is None else _int(spec["used"], f"{where}[{i}].used")
        result.append(GpuProcess(_int(spec["pid"], f"{where}[{i}].pid"), used))
    return result


def _gpm(value: Any, where: str) -> GpmMetrics:
    names = tuple(f.name for f in dataclasses.fields(GpmMetrics))
    spec = _mapping(value, where, (), names)
    return GpmMetrics(**{n: quantity(spec[n], f"{where}.{n}") if n in spec else None for n in names})


def _xids(value: Any, where: str) -> list[int]:
    if not isinstance(value, list) or any(isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in value):
        raise ProfileError(f"{where}: expected a list of XID codes such as [79, 48]")
    return list(value)


def _id_list(value: Any, where: str) -> frozenset[int]:
    """``"0-31,64-95"`` as nvidia-smi topo -m prints CPU and NUMA affinity (a bare number is one id)."""
    try:
        return parse_id_list(str(value), where, "affinity")
    except ProcParseError:
        raise ProfileError(f"{where}: expected a list of ids such as '0-31,64-95'") from None


def _record(cls: Callable[..., Any], keys: dict[str, str], convert: Callable[[Any, str], Any] = quantity,
            optional: tuple[str, ...] = ()) -> Callable[[Any, str], Any]:
    """A parser for a small dataclass: profile key -> dataclass field, each value through ``convert``."""

    def parse(value: Any, where: str) -> Any:
        spec = _mapping(value, where, tuple(k for k in keys if k not in optional), optional)
        given = {field: convert(spec[key], f"{where}.{key}") for key, field in keys.items() if key in spec}
        return cls(**given)

    return parse


def _flag_or_int(value: Any, where: str) -> Any:
    return _bool(value, where) if isinstance(value, bool) else _int(value, where)


# Every GpuBackend field a profile records, and how to read it.
FIELDS: dict[str, Callable[[Any, str], Any]] = {
    "utilization": _record(Utilization, {"gpu": "gpu", "memory": "memory"}),
    "utilization_samples": _samples,
    "memory": _record(Memory, {"total": "total_bytes", "used": "used_bytes", "reserved": "reserved_bytes"},
                      _int, optional=("reserved",)),
    "temperature_celsius": quantity,
    "slowdown_temperature_celsius": quantity,
    "shutdown_temperature_celsius": quantity,
    "power_watts": quantity,
    "power_limit_watts": quantity,
    "energy_joules": quantity,
    "clocks": _record(Clocks, {"sm": "sm_hz", "memory": "memory_hz"}),
    "max_clocks": _record(Clocks, {"sm": "sm_hz", "memory": "memory_hz"}),
    "fan_ratio": quantity,
    "clock_event_reasons": _reasons,
    "violation_seconds": _violations,
    "pcie_link": _record(PcieLink, {"generation": "generation", "max_generation": "max_generation",
                                    "width": "width", "max_width": "max_width"}, _int),
    "pcie_throughput": _record(PcieThroughput, {"tx": "tx_bytes_per_second", "rx": "rx_bytes_per_second"}),
    "pcie_replays": _int,
    "ecc_errors": _record(EccErrors, {"corrected": "corrected", "uncorrected": "uncorrected"}, _int),
    "remapped_rows": _record(RemappedRows, {"correctable": "correctable", "uncorrectable": "uncorrectable",
                                            "pending": "pending", "failed": "failed"}, _flag_or_int),
    "processes": _processes,
    "gpm": _gpm,
    "cpu_affinity": _id_list,
    "memory_affinity": _id_list,
    "xid_events": _xids,
}
# Events, not readings: a scrape that records none had none.
OPTIONAL_FIELDS = frozenset({"xid_events"})


def _fields(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ProfileError(f"{where}: expected a mapping of field name to value")
    parsed = {}
    for field, raw in value.items():
        if field not in FIELDS:
            raise ProfileError(f"{where}.{shown_key(field)}: unknown GPU field (known: {', '.join(FIELDS)})")
        parsed[field] = FIELDS[field](raw, f"{where}.{field}")
    return parsed


def _names(value: Any, where: str, recorded: set[str]) -> frozenset[str]:
    if value == "rest":
        return frozenset(set(FIELDS) - recorded)
    if not isinstance(value, list) or any(name not in FIELDS for name in value):
        raise ProfileError(f"{where}: expected 'rest' or a list of GPU fields ({', '.join(FIELDS)})")
    return frozenset(value)


_GPU_KEYS = ("gpu", "parent", "identity", "unsupported", "function_not_found", "lost_from_scrape", "values",
             "scrapes")


def _gpu(value: Any, where: str) -> GpuRecording:
    spec = _mapping(value, where, ("gpu", "identity"), _GPU_KEYS)
    ident = _mapping(spec["identity"], f"{where}.identity", ("uuid", "name"),
                     ("pci_bus_id", "vbios_version", "mig_mode"))
    base = _fields(spec.get("values"), f"{where}.values")
    overrides = spec.get("scrapes") or [{}]
    if not isinstance(overrides, list):
        raise ProfileError(f"{where}.scrapes: expected a list, one entry per scrape")
    scrapes = tuple({**base, **_fields(o, f"{where}.scrapes[{i}]")} for i, o in enumerate(overrides))
    recorded = set().union(*scrapes)
    unsupported = _names(spec.get("unsupported", []), f"{where}.unsupported", recorded)
    missing_fn = _names(spec.get("function_not_found", []), f"{where}.function_not_found", recorded)
    for field in FIELDS:
        if field not in recorded | unsupported | missing_fn | OPTIONAL_FIELDS:
            raise ProfileError(f"{where}: field {field} is neither recorded nor listed under unsupported")
    lost = spec.get("lost_from_scrape")
    if lost is not None and (not isinstance(lost, int) or isinstance(lost, bool) or lost < 1):
        raise ProfileError(f"{where}.lost_from_scrape: expected a scrape number from 1")
    return GpuRecording(
        key=str(spec["gpu"]),
        parent=None if spec.get("parent") is None else str(spec["parent"]),
        identity=Identity(**{k: str(v) for k, v in ident.items()}),
        unsupported=unsupported,
        function_not_found=missing_fn,
        lost_from_scrape=lost,
        scrapes=scrapes,
    )


def load_profile(path: str) -> Profile:
    """The profile in ``path``; ProfileError naming the file and what is wrong, never a value it holds."""
    try:
        data = read_yaml(path, "gpu profile")
    except ConfigError as err:
        raise ProfileError(f"gpu profile {err}") from None
    try:
        return _profile(path, data)
    except ProfileError as err:
        raise ProfileError(f"gpu profile {path}: {err}") from None


def _profile(path: str, data: Any) -> Profile:
    if isinstance(data, dict):
        # "x-" keys hold YAML anchors shared by several GPUs (as in docker-compose files).
        data = {k: v for k, v in data.items() if not str(k).startswith("x-")}
    spec = _mapping(data, "(top level)", ("format",),
                    ("description", "scrape_interval", "driver", "nvml_unavailable", "gpus"))
    if spec["format"] != 1:
        raise ProfileError("format: expected 1")
    driver = _mapping(spec.get("driver") or {"driver_version": "", "cuda_version": ""}, "driver",
                      ("driver_version", "cuda_version"))
    gpus = spec.get("gpus") or []
    if not isinstance(gpus, list):
        raise ProfileError("gpus: expected a list")
    recordings = tuple(_gpu(g, f"gpus[{i}]") for i, g in enumerate(gpus))
    keys = [g.key for g in recordings]
    for rec in recordings:
        if keys.count(rec.key) > 1:
            raise ProfileError(f"gpus: gpu {shown_key(rec.key)} appears twice")
        if rec.parent is not None and rec.parent not in keys:
            raise ProfileError(f"gpus: gpu {shown_key(rec.key)} names parent {shown_key(rec.parent)}, which is not "
                               "listed")
    interval = quantity(spec.get("scrape_interval", "15 s"), "scrape_interval")
    interval_us = _int(interval * 1e6, "scrape_interval")
    for rec in recordings:
        for i, values in enumerate(rec.scrapes):
            spec_ = values.get("utilization_samples")
            if spec_ is not None and spec_.period_us * spec_.count > interval_us:
                raise ProfileError(f"gpu {shown_key(rec.key)} scrape {i + 1}: utilization_samples span more than "
                                   "scrape_interval")
    unavailable = spec.get("nvml_unavailable")
    return Profile(
        path=path,
        description=str(spec.get("description", "")),
        scrape_interval_us=interval_us,
        driver=DriverInfo(str(driver["driver_version"]), str(driver["cuda_version"])),
        nvml_unavailable=None if unavailable is None else str(unavailable),
        gpus=recordings,
    )
