"""The real GPU source: NVML through ``pynvml`` (nvidia-ml-py distribution). The only module importing it.

Reads NVML and answers :class:`bottleneck_exporter.gpu.backend.GpuBackend` in base units; the gpu collector turns the
answers into series such as::

    bottleneck_gpu_power_watts{gpu="0",uuid="GPU-…"} 629.45
    bottleneck_gpu_clock_hertz{clock="sm",gpu="0",uuid="GPU-…"} 1.98e+09

NVML is initialised lazily, on the first scrape, so a node without a driver starts and serves the other
collectors. Every NVML call goes through :func:`_nvml`, which turns ``pynvml.NVMLError`` into the backend's
error vocabulary; what each error means for the scrape is decided in ``bottleneck_exporter.gpu.guard``.

Each accessor documents its unit and the ``nvidia-smi -q`` field it matches. Not exercised against a real
GPU in this repository's tests (the CI machines have none): the tests replay recorded profiles through the
same protocol, and run this module for real only on the "no NVML" path.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import pynvml

from bottleneck_exporter.gpu.backend import (
    BackendError,
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
    NoData,
    NotSupported,
    NvmlUnavailable,
    PcieLink,
    PcieThroughput,
    RemappedRows,
    Utilization,
    UtilizationSample,
    XidEvent,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

_ERRORS: dict[int, type[BackendError]] = {
    pynvml.NVML_ERROR_NOT_SUPPORTED: NotSupported,
    pynvml.NVML_ERROR_FUNCTION_NOT_FOUND: FunctionNotFound,
    pynvml.NVML_ERROR_GPU_IS_LOST: GpuLost,
    # After an XID 79 or a double-bit ECC error NVML may answer "reset required" instead of "lost": the
    # GPU is just as unusable and must read down, not up with its series missing.
    pynvml.NVML_ERROR_RESET_REQUIRED: GpuLost,
    pynvml.NVML_ERROR_NOT_FOUND: NoData,
    pynvml.NVML_ERROR_NO_DATA: NoData,
    # nvmlEventSetWait with timeout 0 answers TIMEOUT when no event is waiting.
    pynvml.NVML_ERROR_TIMEOUT: NoData,
}

# At most this many XID events are read per scrape; the rest wait in the driver's queue for the next one.
MAX_XID_EVENTS_PER_SCRAPE = 256

_REASON_BITS = {
    "gpu_idle": pynvml.nvmlClocksEventReasonGpuIdle,
    "applications_clocks_setting": pynvml.nvmlClocksEventReasonApplicationsClocksSetting,
    "sw_power_cap": pynvml.nvmlClocksEventReasonSwPowerCap,
    "hw_slowdown": pynvml.nvmlClocksEventReasonHwSlowdown,
    "sync_boost": pynvml.nvmlClocksEventReasonSyncBoost,
    "sw_thermal_slowdown": pynvml.nvmlClocksEventReasonSwThermalSlowdown,
    "hw_thermal_slowdown": pynvml.nvmlClocksEventReasonHwThermalSlowdown,
    "hw_power_brake_slowdown": pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown,
    "display_clock_setting": pynvml.nvmlClocksEventReasonDisplayClockSetting,
}

_POLICIES = {
    "power": pynvml.NVML_PERF_POLICY_POWER,
    "thermal": pynvml.NVML_PERF_POLICY_THERMAL,
    "sync_boost": pynvml.NVML_PERF_POLICY_SYNC_BOOST,
    "board_limit": pynvml.NVML_PERF_POLICY_BOARD_LIMIT,
    "low_utilization": pynvml.NVML_PERF_POLICY_LOW_UTILIZATION,
    "reliability": pynvml.NVML_PERF_POLICY_RELIABILITY,
    "total_app_clocks": pynvml.NVML_PERF_POLICY_TOTAL_APP_CLOCKS,
    "total_base_clocks": pynvml.NVML_PERF_POLICY_TOTAL_BASE_CLOCKS,
}

# In GpmMetrics field order.
_GPM_METRICS = (
    pynvml.NVML_GPM_METRIC_SM_UTIL,
    pynvml.NVML_GPM_METRIC_SM_OCCUPANCY,
    pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
    pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL,
)

_SAMPLE_FIELD = {
    pynvml.NVML_VALUE_TYPE_DOUBLE: "dVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: "usVal",
}


def _nvml(fn: Callable[..., T], *args: Any) -> T:
    """The choke point: every NVML call, with NVML's error codes translated into the backend's errors."""
    try:
        return fn(*args)
    except pynvml.NVMLError as err:
        raise _ERRORS.get(err.value, BackendError)(str(err)) from None
    except pynvml.NVMLLibraryMismatchError as err:
        # pynvml's unversioned wrappers (nvmlDeviceGetComputeRunningProcesses, ...) turn a missing versioned
        # function into this, which is not an NVMLError: without this clause it would escape the choke point.
        raise FunctionNotFound(str(err)) from None


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _optional(fn: Callable[..., Any], *args: Any) -> str:
    """A static identity string that some devices lack (a MIG instance has no VBIOS of its own)."""
    try:
        return _text(_nvml(fn, *args))
    except (NotSupported, FunctionNotFound, NoData):
        return ""


class NvmlBackend:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._initialised = False
        # gpu label -> NVML handle; None for a GPU that was already lost when we enumerated.
        self._handles: dict[str, Any] = {}
        self._top: list[str] = []
        self._mig_children: dict[str, list[Device]] = {}
        self._mig_ids: dict[str, tuple[str, int]] = {}  # MIG key -> (parent key, GPU instance id)
        self._static: dict[str, Identity] = {}
        self._gpm_supported: set[str] = set()
        self._gpm_previous: dict[str, Any] = {}
        self._event_set: Any = None
        self._event_keys: dict[int | None, str] = {}  # device handle address -> gpu label

    # -- enumeration ------------------------------------------------------------------------------------

    def _init(self) -> None:
        with self._lock:
            if self._initialised:
                return
            try:
                pynvml.nvmlInit()
                count = pynvml.nvmlDeviceGetCount()
            except pynvml.NVMLError as err:
                raise NvmlUnavailable(str(err)) from None
            # GPUs are enumerated once: one that later falls off the bus keeps its label and reads as down
            # instead of vanishing, and the indices of the others do not shift.
            for index in range(count):
                key = str(index)
                try:
                    self._handles[key] = _nvml(pynvml.nvmlDeviceGetHandleByIndex, index)
                except GpuLost:
                    self._handles[key] = None
                except BackendError as err:
                    log.warning("GPU %s skipped: %s", key, err)
                    continue
                self._top.append(key)
            self._initialised = True

    def _handle(self, device: str) -> Any:
        handle = self._handles.get(device)
        if handle is None:
            raise GpuLost(f"GPU {device} was lost before it could be enumerated")
        return handle

    def devices(self) -> list[Device]:
        self._init()
        result: list[Device] = []
        for key in self._top:
            if self._handles[key] is None:
                # Lost before it could be enumerated: ask again, it may be back after a reset.
                with contextlib.suppress(BackendError):
                    self._handles[key] = _nvml(pynvml.nvmlDeviceGetHandleByIndex, int(key))
            result.append(Device(key))
            result.extend(self._mig_devices(key))
        return result

    def _mig_devices(self, parent: str) -> list[Device]:
        """The parent's MIG instances now; the last known list if the parent does not answer."""
        handle = self._handles.get(parent)
        if handle is None:
            return self._mig_children.get(parent, [])
        children: list[Device] = []
        try:
            current, _pending = _nvml(pynvml.nvmlDeviceGetMigMode, handle)
            enabled = current == pynvml.NVML_DEVICE_MIG_ENABLE
            slots = _nvml(pynvml.nvmlDeviceGetMaxMigDeviceCount, handle) if enabled else 0
            for slot in range(slots):
                try:
                    child = _nvml(pynvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, slot)
                except NoData:  # an empty slot
                    continue
                gpu_instance = _nvml(pynvml.nvmlDeviceGetGpuInstanceId, child)
                compute_instance = _nvml(pynvml.nvmlDeviceGetComputeInstanceId, child)
                key = f"{parent}/{gpu_instance}/{compute_instance}"
                self._handles[key] = child
                self._mig_ids[key] = (parent, gpu_instance)
                children.append(Device(key, parent=parent))
        except (NotSupported, FunctionNotFound):
            children = []
        except BackendError:
            return self._mig_children.get(parent, [])
        current_keys = {child.key for child in children}
        for gone in self._mig_children.get(parent, []):
            if gone.key not in current_keys:
                self._forget(gone.key)
        self._mig_children[parent] = children
        return children

    def _forget(self, key: str) -> None:
        """Drop what was kept for a MIG instance that was destroyed (the GPU was repartitioned)."""
        for kept in (self._handles, self._mig_ids, self._static):
            kept.pop(key, None)
        self._gpm_supported.discard(key)
        sample = self._gpm_previous.pop(key, None)
        if sample is not None:
            _free_gpm_sample(sample)

    def driver(self) -> DriverInfo:
        """nvidia-smi: "Driver Version", "CUDA Version" (NVML gives 13010 for "13.1")."""
        version = _text(_nvml(pynvml.nvmlSystemGetDriverVersion))
        try:
            cuda = _nvml(pynvml.nvmlSystemGetCudaDriverVersion)
            cuda_text = f"{cuda // 1000}.{cuda % 1000 // 10}"
        except BackendError:
            cuda_text = ""
        return DriverInfo(version, cuda_text)

    def now_seconds(self) -> float:
        return time.monotonic()

    # -- accessors: one NVML reading each, in base units ---------------------------------------------------

    def identity(self, device: str) -> Identity:
        """nvidia-smi: "GPU UUID" (re-read every scrape: it is the liveness probe), "Product Name",
        "PCI > Bus Id", "VBIOS Version", "MIG Mode > Current" (the last four read once). A MIG instance
        carries its GPU's bus id and no VBIOS version of its own."""
        handle = self._handle(device)
        uuid = _text(_nvml(pynvml.nvmlDeviceGetUUID, handle))
        static = self._static.get(device)
        # A MIG instance recreated under the same ids (another profile) has a new UUID: read it afresh.
        if static is None or static.uuid != uuid:
            parent = self._mig_ids.get(device, (device, 0))[0]
            parent_handle = self._handle(parent)
            try:
                bus_id = _text(_nvml(pynvml.nvmlDeviceGetPciInfo, parent_handle).busId)
            except (NotSupported, FunctionNotFound):
                bus_id = ""
            mig_mode = ""
            if device not in self._mig_ids:
                try:
                    current, _pending = _nvml(pynvml.nvmlDeviceGetMigMode, handle)
                    mig_mode = "enabled" if current == pynvml.NVML_DEVICE_MIG_ENABLE else "disabled"
                except (NotSupported, FunctionNotFound):
                    pass
            static = Identity(
                uuid=uuid,
                name=_optional(pynvml.nvmlDeviceGetName, handle),
                pci_bus_id=bus_id,
                vbios_version="" if device in self._mig_ids else _optional(pynvml.nvmlDeviceGetVbiosVersion, handle),
                mig_mode=mig_mode,
            )
            self._static[device] = static
        return static

    def utilization(self, device: str) -> Utilization:
        """Ratios 0-1 (NVML: percent). nvidia-smi: "Utilization > GPU", "Utilization > Memory"."""
        rates = _nvml(pynvml.nvmlDeviceGetUtilizationRates, self._handle(device))
        return Utilization(rates.gpu / 100, rates.memory / 100)

    def utilization_samples(self, device: str, since_us: int) -> list[UtilizationSample]:
        """Sub-second GPU-Util samples, ratio 0-1 (NVML: percent) with NVML's microsecond CPU timestamps.
        nvidia-smi: "Utilization > GPU" as sampled by the driver (``nvidia-smi -q -d UTILIZATION`` shows
        the min/max/avg of these)."""
        try:
            value_type, samples = _nvml(pynvml.nvmlDeviceGetSamples, self._handle(device),
                                        pynvml.NVML_GPU_UTILIZATION_SAMPLES, since_us)
        except NoData:
            return []
        field = _SAMPLE_FIELD.get(value_type, "uiVal")
        return [
            UtilizationSample(int(s.timeStamp), float(getattr(s.sampleValue, field)) / 100)
            for s in samples
            if s.timeStamp > since_us
        ]

    def memory(self, device: str) -> Memory:
        """Bytes. nvidia-smi: "FB Memory Usage > Total / Used / Reserved". Drivers without
        nvmlDeviceGetMemoryInfo_v2 (before R510) give no reserved figure and count it in used."""
        handle = self._handle(device)
        try:
            info = _nvml(pynvml.nvmlDeviceGetMemoryInfo, handle, pynvml.nvmlMemory_v2)
            return Memory(int(info.total), int(info.used), int(info.reserved))
        except (FunctionNotFound, NotSupported):
            info = _nvml(pynvml.nvmlDeviceGetMemoryInfo, handle)
            return Memory(int(info.total), int(info.used))

    def temperature_celsius(self, device: str) -> float:
        """Celsius. nvidia-smi: "Temperature > GPU Current Temp"."""
        return float(_nvml(pynvml.nvmlDeviceGetTemperature, self._handle(device),
                           pynvml.NVML_TEMPERATURE_GPU))

    def slowdown_temperature_celsius(self, device: str) -> float:
        """Celsius. nvidia-smi: "Temperature > GPU Slowdown Temp" (newer drivers print it relative to
        T.Limit instead; NVML still answers the absolute value)."""
        return float(_nvml(pynvml.nvmlDeviceGetTemperatureThreshold, self._handle(device),
                           pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN))

    def shutdown_temperature_celsius(self, device: str) -> float:
        """Celsius. nvidia-smi: "Temperature > GPU Shutdown Temp"."""
        return float(_nvml(pynvml.nvmlDeviceGetTemperatureThreshold, self._handle(device),
                           pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN))

    def power_watts(self, device: str) -> float:
        """Watts (NVML: milliwatts). nvidia-smi: "GPU Power Readings > Power Draw" (power.draw)."""
        return _nvml(pynvml.nvmlDeviceGetPowerUsage, self._handle(device)) / 1000

    def power_limit_watts(self, device: str) -> float:
        """Watts (NVML: milliwatts). nvidia-smi: "GPU Power Readings > Current Power Limit" (enforced)."""
        return _nvml(pynvml.nvmlDeviceGetEnforcedPowerLimit, self._handle(device)) / 1000

    def energy_joules(self, device: str) -> float:
        """Joules since the driver loaded (NVML: millijoules). No nvidia-smi -q field; Volta and later."""
        return _nvml(pynvml.nvmlDeviceGetTotalEnergyConsumption, self._handle(device)) / 1000

    def clocks(self, device: str) -> Clocks:
        """Hertz (NVML: MHz). nvidia-smi: "Clocks > SM", "Clocks > Memory"."""
        handle = self._handle(device)
        return Clocks(_nvml(pynvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_SM) * 1e6,
                      _nvml(pynvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_MEM) * 1e6)

    def max_clocks(self, device: str) -> Clocks:
        """Hertz (NVML: MHz). nvidia-smi: "Max Clocks > SM", "Max Clocks > Memory"."""
        handle = self._handle(device)
        return Clocks(_nvml(pynvml.nvmlDeviceGetMaxClockInfo, handle, pynvml.NVML_CLOCK_SM) * 1e6,
                      _nvml(pynvml.nvmlDeviceGetMaxClockInfo, handle, pynvml.NVML_CLOCK_MEM) * 1e6)

    def fan_ratio(self, device: str) -> float:
        """Ratio 0-1 of the fan's maximum (NVML: percent). nvidia-smi: "Fan Speed". Passively cooled
        boards answer NotSupported."""
        return _nvml(pynvml.nvmlDeviceGetFanSpeed, self._handle(device)) / 100

    def clock_event_reasons(self, device: str) -> dict[str, bool]:
        """nvidia-smi: "Clocks Event Reasons" (called "Clocks Throttle Reasons" before R535, whose NVML
        has only the ...ThrottleReasons functions: used as the fallback)."""
        handle = self._handle(device)
        active = int(_first_of(handle, pynvml.nvmlDeviceGetCurrentClocksEventReasons,
                               pynvml.nvmlDeviceGetCurrentClocksThrottleReasons))
        try:
            supported = int(_first_of(handle, pynvml.nvmlDeviceGetSupportedClocksEventReasons,
                                      pynvml.nvmlDeviceGetSupportedClocksThrottleReasons))
        except (NotSupported, FunctionNotFound):
            supported = pynvml.nvmlClocksEventReasonAll
        return {name: bool(active & bit) for name, bit in _REASON_BITS.items() if supported & bit}

    def violation_seconds(self, device: str, policy: str) -> float:
        """Seconds (NVML: nanoseconds) clocks were held down by ``policy``. nvidia-smi: "Clocks Event
        Reasons Counters" shows the power, sync-boost and thermal ones in microseconds."""
        status = _nvml(pynvml.nvmlDeviceGetViolationStatus, self._handle(device), _POLICIES[policy])
        return status.violationTime / 1e9

    def pcie_link(self, device: str) -> PcieLink:
        """nvidia-smi: "PCI > GPU Link Info > PCIe Generation > Current / Max" and
        "Link Width > Current / Max"."""
        handle = self._handle(device)
        return PcieLink(
            _nvml(pynvml.nvmlDeviceGetCurrPcieLinkGeneration, handle),
            _nvml(pynvml.nvmlDeviceGetMaxPcieLinkGeneration, handle),
            _nvml(pynvml.nvmlDeviceGetCurrPcieLinkWidth, handle),
            _nvml(pynvml.nvmlDeviceGetMaxPcieLinkWidth, handle),
        )

    def pcie_throughput(self, device: str) -> PcieThroughput:
        """Bytes per second (NVML: KiB/s over a 20 ms window). nvidia-smi: "PCI > Tx / Rx Throughput"."""
        handle = self._handle(device)
        return PcieThroughput(
            _nvml(pynvml.nvmlDeviceGetPcieThroughput, handle, pynvml.NVML_PCIE_UTIL_TX_BYTES) * 1024.0,
            _nvml(pynvml.nvmlDeviceGetPcieThroughput, handle, pynvml.NVML_PCIE_UTIL_RX_BYTES) * 1024.0,
        )

    def pcie_replays(self, device: str) -> int:
        """Count. nvidia-smi: "PCI > Replays Since Reset"."""
        return int(_nvml(pynvml.nvmlDeviceGetPcieReplayCounter, self._handle(device)))

    def ecc_errors(self, device: str) -> EccErrors:
        """Counts since the board was made (aggregate). nvidia-smi: "ECC Errors > Aggregate"."""
        handle = self._handle(device)
        return EccErrors(
            int(_nvml(pynvml.nvmlDeviceGetTotalEccErrors, handle, pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED,
                      pynvml.NVML_AGGREGATE_ECC)),
            int(_nvml(pynvml.nvmlDeviceGetTotalEccErrors, handle, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                      pynvml.NVML_AGGREGATE_ECC)),
        )

    def remapped_rows(self, device: str) -> RemappedRows:
        """Counts and flags. nvidia-smi: "Remapped Rows > Correctable Error / Uncorrectable Error / Pending /
        Remapping Failure Occurred" (Ampere and later data-center GPUs)."""
        corr, unc, pending, failed = _nvml(pynvml.nvmlDeviceGetRemappedRows, self._handle(device))
        return RemappedRows(int(corr), int(unc), bool(pending), bool(failed))

    def processes(self, device: str) -> list[GpuProcess]:
        """Compute processes and their memory in bytes. nvidia-smi: "Processes > Process ID / Used GPU Memory"
        (graphics-only processes are not listed)."""
        # _v3 needs R510; _v2 (R450) answers the same fields for the older drivers still found in clusters.
        found = _first_of(self._handle(device), pynvml.nvmlDeviceGetComputeRunningProcesses_v3,
                          pynvml.nvmlDeviceGetComputeRunningProcesses_v2)
        return [GpuProcess(int(p.pid), None if p.usedGpuMemory is None else int(p.usedGpuMemory))
                for p in found]

    def _physical_handle(self, device: str) -> Any:
        """The handle of the GPU itself: a MIG instance has no placement of its own."""
        parent, _instance = self._mig_ids.get(device, (device, -1))
        return self._handle(parent)

    def cpu_affinity(self, device: str) -> frozenset[int]:
        """CPU ids from NVML's bitmask, 64 CPUs per word. nvidia-smi topo -m: "CPU Affinity"."""
        words = _nvml(pynvml.nvmlDeviceGetCpuAffinity, self._physical_handle(device), _AFFINITY_WORDS)
        return _bits(words)

    def memory_affinity(self, device: str) -> frozenset[int]:
        """NUMA node ids from NVML's bitmask. nvidia-smi topo -m: "NUMA Affinity"."""
        words = _nvml(pynvml.nvmlDeviceGetMemoryAffinity, self._physical_handle(device), _AFFINITY_WORDS,
                      pynvml.NVML_AFFINITY_SCOPE_NODE)
        return _bits(words)

    def gpm(self, device: str) -> GpmMetrics | None:
        """Ratios 0-1 (NVML: percent) over the interval since the previous call. No nvidia-smi -q field
        (``nvidia-smi dmon --gpm-metrics 2,3,5,10``). Hopper and later; a MIG instance is measured per GPU
        instance (its compute instances read the same)."""
        handle = self._handle(device)
        parent, gpu_instance = self._mig_ids.get(device, (device, -1))
        parent_handle = self._handle(parent)
        if device not in self._gpm_supported:
            if not _nvml(pynvml.nvmlGpmQueryDeviceSupport, parent_handle).isSupportedDevice:
                raise NotSupported("GPM is not supported on this GPU")
            self._gpm_supported.add(device)
        sample = _nvml(pynvml.nvmlGpmSampleAlloc)
        try:
            if gpu_instance >= 0:
                _nvml(pynvml.nvmlGpmMigSampleGet, parent_handle, gpu_instance, sample)
            else:
                _nvml(pynvml.nvmlGpmSampleGet, handle, sample)
        except BackendError:
            _free_gpm_sample(sample)
            raise
        previous = self._gpm_previous.pop(device, None)
        self._gpm_previous[device] = sample
        if previous is None:
            return None
        request = pynvml.c_nvmlGpmMetricsGet_t()
        request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(_GPM_METRICS)
        request.sample1 = previous
        request.sample2 = sample
        for slot, metric in enumerate(_GPM_METRICS):
            request.metrics[slot].metricId = metric
        try:
            _nvml(pynvml.nvmlGpmMetricsGet, request)
        finally:
            _free_gpm_sample(previous)
        metrics = [request.metrics[slot] for slot in range(len(_GPM_METRICS))]
        values = [m.value / 100 if m.nvmlReturn == pynvml.NVML_SUCCESS else None for m in metrics]
        return GpmMetrics(*values)

    def xid_events(self) -> list[XidEvent]:
        """XID codes (nvidia-smi has no field; the kernel log's "NVRM: Xid" lines). The GPUs are registered
        for nvmlEventTypeXidCriticalError once; every call then polls the event set with timeout 0, so a
        scrape never waits for an event."""
        if self._event_set is None:
            self._register_xid_events()
        events: list[XidEvent] = []
        for _ in range(MAX_XID_EVENTS_PER_SCRAPE):
            try:
                data = _nvml(pynvml.nvmlEventSetWait_v2, self._event_set, 0)
            except NoData:
                break
            if data.eventType & pynvml.nvmlEventTypeXidCriticalError:
                key = self._event_keys.get(_address(data.device))
                if key is not None:
                    events.append(XidEvent(key, int(data.eventData)))
        return events

    def _register_xid_events(self) -> None:
        event_set = _nvml(pynvml.nvmlEventSetCreate)
        for key in self._top:
            handle = self._handles.get(key)
            if handle is None:
                continue
            try:
                supported = _nvml(pynvml.nvmlDeviceGetSupportedEventTypes, handle)
                if supported & pynvml.nvmlEventTypeXidCriticalError:
                    _nvml(pynvml.nvmlDeviceRegisterEvents, handle, pynvml.nvmlEventTypeXidCriticalError, event_set)
                    self._event_keys[_address(handle)] = key
            except (NotSupported, FunctionNotFound):
                continue
        if not self._event_keys:
            with contextlib.suppress(BackendError):
                _nvml(pynvml.nvmlEventSetFree, event_set)
            raise NotSupported("no GPU reports XID events")
        self._event_set = event_set

def _address(handle: Any) -> int | None:
    """A device handle's address: the same GPU's handle compares equal however NVML hands it out."""
    return ctypes.cast(handle, ctypes.c_void_p).value


# Affinity masks are asked in 64-bit words: 16 words hold 1024 CPUs (or NUMA nodes), Linux's usual NR_CPUS.
_AFFINITY_WORDS = 16


def _bits(words: Any) -> frozenset[int]:
    return frozenset(64 * i + bit for i, word in enumerate(words) for bit in range(64) if int(word) >> bit & 1)


def _first_of(handle: Any, current: Callable[[Any], T], legacy: Callable[[Any], T]) -> T:
    """``current(handle)``, or ``legacy(handle)`` where the driver's NVML predates ``current``."""
    try:
        return _nvml(current, handle)
    except FunctionNotFound:
        return _nvml(legacy, handle)


def _free_gpm_sample(sample: Any) -> None:
    try:
        _nvml(pynvml.nvmlGpmSampleFree, sample)
    except BackendError as err:
        log.debug("freeing a GPM sample failed: %s", err)
