"""What the gpu collector may ask of a GPU source: plain values in base units, and the errors it may raise.

Two sources implement :class:`GpuBackend`: ``bottleneck_exporter.gpu.nvml`` (the real NVML, the only module that
imports ``pynvml``) and ``bottleneck_exporter.gpu.fake`` (a recorded profile replayed through the same methods).
No NVML type crosses this boundary: devices are named by their ``gpu`` label (``"0"``, or
``"0/2/1"`` for MIG GPU instance 2, compute instance 1 on GPU 0) and values are ints, floats, strings
and the frozen dataclasses below.

Every per-device method may raise :class:`NotSupported`, :class:`FunctionNotFound`, :class:`GpuLost` or
:class:`BackendError`; ``bottleneck_exporter.gpu.guard.FieldGuard`` is the one place that decides what each means
for the scrape (series left out, logged once, GPU marked down).
"""

from __future__ import annotations

import dataclasses
from typing import Protocol


class BackendError(Exception):
    """A GPU query failed in a way that may pass (NVML timeout, unknown error): skip the series once."""


class NotSupported(BackendError):
    """This device does not provide this field (NVML_ERROR_NOT_SUPPORTED): the series stays absent."""


class FunctionNotFound(BackendError):
    """The installed driver's NVML predates the function (NVML_ERROR_FUNCTION_NOT_FOUND)."""


class GpuLost(BackendError):
    """The GPU fell off the bus or stopped answering (NVML_ERROR_GPU_IS_LOST)."""


class NoData(BackendError):
    """Nothing new to report (NVML_ERROR_NOT_FOUND from nvmlDeviceGetSamples): not an error."""


class NvmlUnavailable(Exception):
    """NVML cannot be used at all on this node: no driver, no libnvidia-ml, no permission."""


@dataclasses.dataclass(frozen=True)
class DriverInfo:
    driver_version: str  # "590.48.01"
    cuda_version: str  # "13.1": the CUDA version the driver supports, not a toolkit


@dataclasses.dataclass(frozen=True)
class Device:
    """One GPU or MIG instance as the collector labels it."""

    key: str  # the ``gpu`` label: NVML index, or "<parent index>/<gpu instance>/<compute instance>"
    parent: str | None = None  # key of the physical GPU, for a MIG instance


@dataclasses.dataclass(frozen=True)
class Identity:
    uuid: str  # "GPU-…" or "MIG-…"
    name: str  # "NVIDIA H100 80GB HBM3"; a MIG instance adds its profile: "… MIG 3g.40gb"
    pci_bus_id: str = ""
    vbios_version: str = ""
    mig_mode: str = ""  # "enabled" / "disabled" on a physical GPU that has MIG, "" otherwise


@dataclasses.dataclass(frozen=True)
class Utilization:
    gpu: float  # 0-1: share of the sample period in which a kernel ran
    memory: float  # 0-1: share of the sample period in which device memory was read or written


@dataclasses.dataclass(frozen=True)
class UtilizationSample:
    timestamp_us: int  # NVML's CPU timestamp, microseconds
    value: float  # 0-1


@dataclasses.dataclass(frozen=True)
class Memory:
    total_bytes: int
    used_bytes: int
    reserved_bytes: int | None = None  # None where the driver has no nvmlDeviceGetMemoryInfo_v2


@dataclasses.dataclass(frozen=True)
class Clocks:
    sm_hz: float
    memory_hz: float


@dataclasses.dataclass(frozen=True)
class PcieLink:
    generation: int
    max_generation: int
    width: int
    max_width: int


@dataclasses.dataclass(frozen=True)
class PcieThroughput:
    tx_bytes_per_second: float
    rx_bytes_per_second: float


@dataclasses.dataclass(frozen=True)
class EccErrors:
    corrected: int
    uncorrected: int


@dataclasses.dataclass(frozen=True)
class RemappedRows:
    correctable: int
    uncorrectable: int
    pending: bool
    failed: bool


@dataclasses.dataclass(frozen=True)
class GpuProcess:
    pid: int  # host PID as NVML reports it; the collector turns it into a command name, never a label
    used_bytes: int | None  # None where NVML cannot tell (e.g. some virtualised setups)


@dataclasses.dataclass(frozen=True)
class GpmMetrics:
    """NVML GPU Performance Monitoring (Hopper and later), each 0-1, None where that metric failed."""

    sm_activity: float | None
    sm_occupancy: float | None
    tensor_activity: float | None
    dram_bandwidth_utilization: float | None


@dataclasses.dataclass(frozen=True)
class XidEvent:
    """One XID error the driver reported (NVML event nvmlEventTypeXidCriticalError)."""

    device: str  # the ``gpu`` label of the physical GPU (a MIG instance's errors count on its GPU)
    xid: int  # the XID code, as in the kernel log's "NVRM: Xid (PCI:…): 79, …"


# Clock-event (throttle) reasons in the order of NVML's bitmask; names are the metric's label values.
CLOCK_EVENT_REASONS = (
    "gpu_idle",
    "applications_clocks_setting",
    "sw_power_cap",
    "hw_slowdown",
    "sync_boost",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
    "display_clock_setting",
)

# nvmlDeviceGetViolationStatus policies; names are the metric's label values.
VIOLATION_POLICIES = (
    "power",
    "thermal",
    "sync_boost",
    "board_limit",
    "low_utilization",
    "reliability",
    "total_app_clocks",
    "total_base_clocks",
)


class GpuBackend(Protocol):
    """A source of GPU readings. Method names double as the field names that errors are cached under."""

    def devices(self) -> list[Device]:
        """Called once at the start of every scrape: the GPUs and MIG instances now.

        Raises NvmlUnavailable when there is no NVML at all. A replayed recording advances one scrape here.
        """
        ...

    def driver(self) -> DriverInfo: ...

    def now_seconds(self) -> float:
        """When this scrape's readings were taken, in seconds on a clock that never goes back: what the
        collector measures idle GPU time with (a replayed recording answers its virtual time)."""
        ...

    def identity(self, device: str) -> Identity:
        """Also the liveness probe: called every scrape, so a GPU off the bus raises GpuLost here."""
        ...

    def utilization(self, device: str) -> Utilization: ...

    def utilization_samples(self, device: str, since_us: int) -> list[UtilizationSample]:
        """Sub-second GPU-Util samples newer than ``since_us`` (0: all the driver still holds)."""
        ...

    def memory(self, device: str) -> Memory: ...

    def temperature_celsius(self, device: str) -> float: ...

    def slowdown_temperature_celsius(self, device: str) -> float: ...

    def shutdown_temperature_celsius(self, device: str) -> float: ...

    def power_watts(self, device: str) -> float: ...

    def power_limit_watts(self, device: str) -> float: ...

    def energy_joules(self, device: str) -> float: ...

    def clocks(self, device: str) -> Clocks: ...

    def max_clocks(self, device: str) -> Clocks: ...

    def fan_ratio(self, device: str) -> float: ...

    def clock_event_reasons(self, device: str) -> dict[str, bool]:
        """{reason: active} for every reason this device supports (names from CLOCK_EVENT_REASONS)."""
        ...

    def violation_seconds(self, device: str, policy: str) -> float:
        """Cumulative time clocks were held below target by ``policy`` (one of VIOLATION_POLICIES)."""
        ...

    def pcie_link(self, device: str) -> PcieLink: ...

    def pcie_throughput(self, device: str) -> PcieThroughput: ...

    def pcie_replays(self, device: str) -> int: ...

    def ecc_errors(self, device: str) -> EccErrors: ...

    def remapped_rows(self, device: str) -> RemappedRows: ...

    def processes(self, device: str) -> list[GpuProcess]: ...

    def cpu_affinity(self, device: str) -> frozenset[int]:
        """The CPUs near the GPU (its socket, its NUMA node): nvidia-smi topo -m "CPU Affinity". A MIG
        instance answers for its GPU."""
        ...

    def memory_affinity(self, device: str) -> frozenset[int]:
        """The NUMA nodes near the GPU: nvidia-smi topo -m "NUMA Affinity"."""
        ...

    def gpm(self, device: str) -> GpmMetrics | None:
        """GPM metrics over the interval since the previous call; None on the first call (no interval yet)."""
        ...

    def xid_events(self) -> list[XidEvent]:
        """XID errors of every GPU reported since the previous call, oldest first. Never waits: a scrape must
        not block on the driver. Raises NotSupported where no GPU can report them."""
        ...
