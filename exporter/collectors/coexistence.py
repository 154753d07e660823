"""Running beside node_exporter and dcgm-exporter: which of our series they already carry, and the presets.

A cluster that already scrapes node_exporter and dcgm-exporter needs from us only what they lack: the training
processes, the push receiver, and the GPU series no other exporter has. ``--collector.preset`` names one of
``PRESETS``::

    bottleneck-exporter --collector.preset=beside-node-exporter-and-dcgm

turns the host collectors off (every series they export has a node_exporter twin in ``NODE_EXPORTER``) and
makes the gpu collector export only ``GPU_UNIQUE`` (``--collector.gpu.only-unique``): every other GPU series
has a twin in ``DCGM_EXPORTER``, read from dcgm-exporter's default counters (``etc/default-counters.csv`` of
NVIDIA/dcgm-exporter; tests/fixtures/dcgm-exporter/ is a scrape of it). Where the exporter has no GPU access,
``beside-node-exporter-and-dcgm-only`` leaves every GPU fact to dcgm-exporter. A preset only changes defaults: an
explicit ``--[no-]collector.<name>`` or ``--collector.<name>.<option>`` (flag or config file) still wins.
docs/coexistence.md is the table for people; tests/test_coexistence.py holds these tables against the real
node_exporter and the recorded dcgm-exporter scrape.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any


@dataclasses.dataclass(frozen=True)
class Twin:
    """The peer's series that carries the same fact as (a part of) one of our families.

    ``series`` is the peer's PromQL for it; ``match`` selects the samples of ours it stands for (ours carry the
    distinction in a label, the peer in its name); ``scale`` turns the peer's unit into ours (our value =
    peer value x scale). A number is a fact no exporter needs to carry: the value is always that."""

    series: str
    match: Mapping[str, str] = dataclasses.field(default_factory=dict)
    scale: float = 1.0


def _twins(*twins: Twin) -> tuple[Twin, ...]:
    return twins


# Our host families -> node_exporter (default collectors: cpu, stat, loadavg, schedstat, meminfo, vmstat,
# pressure, diskstats, netdev, netclass, infiniband). Labels keep their names (cpu, mode, device, port).
NODE_EXPORTER: dict[str, tuple[Twin, ...]] = {
    "bottleneck_cpu_seconds_total": _twins(Twin("node_cpu_seconds_total")),
    "bottleneck_cpu_all_seconds_total": _twins(Twin("sum without (cpu) (node_cpu_seconds_total)")),
    "bottleneck_cpus": _twins(Twin('count without (cpu, mode) (node_cpu_seconds_total{mode="idle"})')),
    "bottleneck_load1": _twins(Twin("node_load1")),
    "bottleneck_load5": _twins(Twin("node_load5")),
    "bottleneck_load15": _twins(Twin("node_load15")),
    "bottleneck_context_switches_total": _twins(Twin("node_context_switches_total")),
    "bottleneck_procs_running": _twins(Twin("node_procs_running")),
    "bottleneck_procs_blocked": _twins(Twin("node_procs_blocked")),
    "bottleneck_cpu_runqueue_wait_seconds_total": _twins(Twin("node_schedstat_waiting_seconds_total")),
    "bottleneck_cpu_all_runqueue_wait_seconds_total":
        _twins(Twin("sum without (cpu) (node_schedstat_waiting_seconds_total)")),
    "bottleneck_memory_total_bytes": _twins(Twin("node_memory_MemTotal_bytes")),
    "bottleneck_memory_available_bytes": _twins(Twin("node_memory_MemAvailable_bytes")),
    "bottleneck_memory_free_bytes": _twins(Twin("node_memory_MemFree_bytes")),
    "bottleneck_memory_buffers_bytes": _twins(Twin("node_memory_Buffers_bytes")),
    "bottleneck_memory_cached_bytes": _twins(Twin("node_memory_Cached_bytes")),
    "bottleneck_memory_swap_total_bytes": _twins(Twin("node_memory_SwapTotal_bytes")),
    "bottleneck_memory_swap_free_bytes": _twins(Twin("node_memory_SwapFree_bytes")),
    "bottleneck_memory_swapped_in_pages_total": _twins(Twin("node_vmstat_pswpin")),
    "bottleneck_memory_swapped_out_pages_total": _twins(Twin("node_vmstat_pswpout")),
    "bottleneck_memory_major_faults_total": _twins(Twin("node_vmstat_pgmajfault")),
    "bottleneck_memory_oom_kills_total": _twins(Twin("node_vmstat_oom_kill")),
    "bottleneck_pressure_seconds_total": _twins(
        Twin("node_pressure_cpu_waiting_seconds_total", {"resource": "cpu", "kind": "some"}),
        # "CPU full is undefined at the system level ... set to zero" (the kernel's accounting/psi.rst); no
        # node_exporter release exports it.
        Twin("0", {"resource": "cpu", "kind": "full"}),
        Twin("node_pressure_io_waiting_seconds_total", {"resource": "io", "kind": "some"}),
        Twin("node_pressure_io_stalled_seconds_total", {"resource": "io", "kind": "full"}),
        Twin("node_pressure_memory_waiting_seconds_total", {"resource": "memory", "kind": "some"}),
        Twin("node_pressure_memory_stalled_seconds_total", {"resource": "memory", "kind": "full"}),
    ),
    "bottleneck_disk_reads_completed_total": _twins(Twin("node_disk_reads_completed_total")),
    "bottleneck_disk_read_bytes_total": _twins(Twin("node_disk_read_bytes_total")),
    "bottleneck_disk_read_time_seconds_total": _twins(Twin("node_disk_read_time_seconds_total")),
    "bottleneck_disk_writes_completed_total": _twins(Twin("node_disk_writes_completed_total")),
    "bottleneck_disk_written_bytes_total": _twins(Twin("node_disk_written_bytes_total")),
    "bottleneck_disk_write_time_seconds_total": _twins(Twin("node_disk_write_time_seconds_total")),
    "bottleneck_disk_io_time_seconds_total": _twins(Twin("node_disk_io_time_seconds_total")),
    "bottleneck_disk_io_time_weighted_seconds_total": _twins(Twin("node_disk_io_time_weighted_seconds_total")),
    "bottleneck_disk_io_now": _twins(Twin("node_disk_io_now")),
    "bottleneck_network_receive_bytes_total": _twins(Twin("node_network_receive_bytes_total")),
    "bottleneck_network_receive_packets_total": _twins(Twin("node_network_receive_packets_total")),
    "bottleneck_network_receive_errors_total": _twins(Twin("node_network_receive_errs_total")),
    "bottleneck_network_receive_drop_total": _twins(Twin("node_network_receive_drop_total")),
    "bottleneck_network_transmit_bytes_total": _twins(Twin("node_network_transmit_bytes_total")),
    "bottleneck_network_transmit_packets_total": _twins(Twin("node_network_transmit_packets_total")),
    "bottleneck_network_transmit_errors_total": _twins(Twin("node_network_transmit_errs_total")),
    "bottleneck_network_transmit_drop_total": _twins(Twin("node_network_transmit_drop_total")),
    "bottleneck_network_speed_bytes": _twins(Twin("node_network_speed_bytes")),
    "bottleneck_network_up": _twins(Twin("node_network_up")),
    "bottleneck_infiniband_port_received_bytes_total": _twins(Twin("node_infiniband_port_data_received_bytes_total")),
    "bottleneck_infiniband_port_transmitted_bytes_total":
        _twins(Twin("node_infiniband_port_data_transmitted_bytes_total")),
    "bottleneck_infiniband_port_received_packets_total": _twins(Twin("node_infiniband_port_packets_received_total")),
    "bottleneck_infiniband_port_transmitted_packets_total":
        _twins(Twin("node_infiniband_port_packets_transmitted_total")),
    "bottleneck_infiniband_port_receive_errors_total": _twins(Twin("node_infiniband_port_errors_received_total")),
    "bottleneck_infiniband_port_transmit_discards_total":
        _twins(Twin("node_infiniband_port_discards_transmitted_total")),
    "bottleneck_infiniband_port_transmit_wait_total": _twins(Twin("node_infiniband_port_transmit_wait_total")),
    "bottleneck_infiniband_port_link_downed_total": _twins(Twin("node_infiniband_link_downed_total")),
    "bottleneck_infiniband_port_speed_bytes": _twins(Twin("node_infiniband_rate_bytes_per_second")),
    "bottleneck_infiniband_port_up": _twins(Twin("node_infiniband_state_id == bool 4")),
}

# Our GPU families -> dcgm-exporter's default counters (labels gpu, UUID (= our uuid), pci_bus_id, device,
# modelName, hostname, DCGM_FI_DRIVER_VERSION, and pod/namespace/container on Kubernetes).
_MIB = 2.0**20
DCGM_EXPORTER: dict[str, tuple[Twin, ...]] = {
    "bottleneck_gpu_utilization_ratio": _twins(Twin("DCGM_FI_DEV_GPU_UTIL", scale=0.01)),
    "bottleneck_gpu_memory_utilization_ratio": _twins(Twin("DCGM_FI_DEV_MEM_COPY_UTIL", scale=0.01)),
    "bottleneck_gpu_memory_used_bytes": _twins(Twin("DCGM_FI_DEV_FB_USED", scale=_MIB)),
    "bottleneck_gpu_memory_total_bytes":
        _twins(Twin("DCGM_FI_DEV_FB_FREE + DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_RESERVED", scale=_MIB)),
    "bottleneck_gpu_memory_reserved_bytes": _twins(Twin("DCGM_FI_DEV_FB_RESERVED", scale=_MIB)),
    "bottleneck_gpu_temperature_celsius": _twins(Twin("DCGM_FI_DEV_GPU_TEMP")),
    "bottleneck_gpu_power_watts": _twins(Twin("DCGM_FI_DEV_POWER_USAGE")),
    "bottleneck_gpu_energy_joules_total": _twins(Twin("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", scale=0.001)),
    "bottleneck_gpu_clock_hertz": _twins(Twin("DCGM_FI_DEV_SM_CLOCK", {"clock": "sm"}, scale=1e6),
                                         Twin("DCGM_FI_DEV_MEM_CLOCK", {"clock": "memory"}, scale=1e6)),
    "bottleneck_gpu_pcie_throughput_bytes_per_second":
        _twins(Twin("DCGM_FI_PROF_PCIE_TX_BYTES", {"direction": "tx"}),
               Twin("DCGM_FI_PROF_PCIE_RX_BYTES", {"direction": "rx"})),
    "bottleneck_gpu_pcie_replays_total": _twins(Twin("DCGM_FI_DEV_PCIE_REPLAY_COUNTER")),
    "bottleneck_gpu_remapped_rows": _twins(Twin("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", {"cause": "correctable"}),
                                           Twin("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
                                                {"cause": "uncorrectable"})),
    "bottleneck_gpu_remapped_rows_failed": _twins(Twin("DCGM_FI_DEV_ROW_REMAP_FAILURE")),
    "bottleneck_gpu_tensor_activity_ratio": _twins(Twin("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")),
    "bottleneck_gpu_dram_bandwidth_utilization_ratio": _twins(Twin("DCGM_FI_PROF_DRAM_ACTIVE")),
}

# The GPU families --collector.gpu.only-unique keeps, and why each stays beside dcgm-exporter's default counters.
GPU_UNIQUE: dict[str, str] = {
    "bottleneck_gpu_up": "1 or 0 per GPU: tells a GPU that fell off the bus from an idle one; the default counters "
                         "have no such series.",
    "bottleneck_gpu_info": "Joins our GPU series to dcgm-exporter's on uuid = UUID, and carries the CUDA version, "
                           "VBIOS and MIG mode its labels lack.",
    "bottleneck_gpu_utilization_samples": "NVML's sub-second GPU-Util samples behind the sawtooth verdict; "
                                          "DCGM_FI_DEV_GPU_UTIL is one value per scrape and cannot show them.",
    "bottleneck_gpu_slowdown_temperature_celsius": "The thermal thresholds are not among dcgm-exporter's default "
                                                   "counters (DCGM_FI_DEV_SLOWDOWN_TEMP is not enabled).",
    "bottleneck_gpu_shutdown_temperature_celsius": "Not among the default counters (DCGM_FI_DEV_SHUTDOWN_TEMP).",
    "bottleneck_gpu_power_limit_watts": "The power-capped verdict needs the enforced limit; the default counters "
                                        "have the draw only (DCGM_FI_DEV_POWER_MGMT_LIMIT is not enabled).",
    "bottleneck_gpu_clock_max_hertz": "Clocks as a share of their maximum need the maximum; the default counters "
                                      "have current clocks only (DCGM_FI_DEV_MAX_SM_CLOCK is not enabled).",
    "bottleneck_gpu_fan_ratio": "Not among the default counters (DCGM_FI_DEV_FAN_SPEED_RATIO).",
    "bottleneck_gpu_clock_event_active": "One series per clock-event (throttle) reason; the default counters have "
                                         "no reasons at all (DCGM_FI_DEV_CLOCKS_EVENT_REASONS, a bitmask, and "
                                         "DCGM_EXP_CLOCK_EVENTS_COUNT are not enabled).",
    "bottleneck_gpu_throttled_seconds_total": "The violation counters are commented out in the default counters "
                                              "(DCGM_FI_DEV_POWER_VIOLATION and the others).",
    "bottleneck_gpu_pcie_link_generation": "The PCIe link's generation and width (a GPU trained down in its slot) "
                                           "are not among the default counters (DCGM_FI_DEV_PCIE_LINK_GEN).",
    "bottleneck_gpu_pcie_link_max_generation": "Not among the default counters (DCGM_FI_DEV_PCIE_MAX_LINK_GEN).",
    "bottleneck_gpu_pcie_link_width": "Not among the default counters (DCGM_FI_DEV_PCIE_LINK_WIDTH).",
    "bottleneck_gpu_pcie_link_max_width": "Not among the default counters (DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH).",
    "bottleneck_gpu_ecc_errors_total": "The ECC counters are commented out in the default counters "
                                       "(DCGM_FI_DEV_ECC_SBE_AGG_TOTAL and the others).",
    "bottleneck_gpu_remapped_rows_pending": "The default counters have remapped and failed rows, not a pending "
                                            "remapping (DCGM_FI_DEV_ROW_REMAP_PENDING).",
    "bottleneck_gpu_xid_errors_total": "A count per XID code; DCGM_FI_DEV_XID_ERRORS is a gauge of the last code "
                                       "only, which hides repeats and a second code in the same interval.",
    "bottleneck_gpu_process_memory_used_bytes": "GPU memory per process name; dcgm-exporter has none (only with "
                                                "--kubernetes-virtual-gpus does it split DCGM_FI_DEV_FB_USED by pod "
                                                "on a shared GPU).",
    "bottleneck_gpu_sm_activity_ratio": "DCGM_FI_PROF_SM_ACTIVE is commented out in the default counters.",
    "bottleneck_gpu_sm_occupancy_ratio": "DCGM_FI_PROF_SM_OCCUPANCY is commented out in the default counters.",
    "bottleneck_gpu_idle_seconds_total": "GPU time held idle, counted between scrapes from the sub-second "
                                         "samples; dcgm-exporter has utilization per scrape only.",
    "bottleneck_gpu_process_idle_seconds_total": "Idle GPU time per process holding it; dcgm-exporter has no "
                                                 "per-process series.",
    "bottleneck_gpu_process_local_cpus_ratio": "A process's allowed CPUs against its GPU's CPU affinity; "
                                               "dcgm-exporter exports no topology.",
    "bottleneck_gpu_process_local_memory_ratio": "A process's allowed NUMA nodes against its GPU's.",
}

# Collectors whose every series has a node_exporter twin (tests/test_coexistence.py holds this to NODE_EXPORTER).
HOST_COLLECTORS = ("cpu", "disk", "memory", "network", "pressure")


@dataclasses.dataclass(frozen=True)
class Preset:
    """Defaults for running beside other exporters: collectors turned off, collector options set."""

    help: str
    collectors_off: tuple[str, ...]
    options: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    # The rule bundle (exporter/heuristics/sources.py) whose sources this preset assumes: the status page
    # evaluates it, reading the peers it names (--node-exporter.url, --dcgm-exporter.url).
    bundle: str = "bottleneck"


PRESETS: dict[str, Preset] = {
    "beside-node-exporter": Preset("host collectors off, the gpu collector whole", HOST_COLLECTORS,
                                   bundle="node-exporter"),
    "beside-node-exporter-and-dcgm": Preset(
        "host collectors off, the gpu collector only what dcgm-exporter lacks (--collector.gpu.only-unique)",
        HOST_COLLECTORS, {"gpu": {"only-unique": True}}, bundle="node-exporter-dcgm"),
    # Where the exporter has no GPU access (no NVML, no kubelet socket) and dcgm-exporter alone covers the GPUs:
    # the kubernetes collector only says which pod holds which GPU, which dcgm-exporter's own pod labels say
    # there. What is left has no twin anywhere: training processes and the push receiver.
    "beside-node-exporter-and-dcgm-only": Preset(
        "host, gpu and kubernetes collectors off: training processes and the push receiver only",
        (*HOST_COLLECTORS, "gpu", "kubernetes"), bundle="node-exporter-dcgm-only"),
}
