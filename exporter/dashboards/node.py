"""Node view: the nvidia-smi + htop + iotop picture of one node on one page.

Reads the host collectors' series (gpu, cpu, memory, pressure, disk, network, training processes) for one
``$instance``; answers "what is this node's hardware doing while the job trains, and which part is the
bottleneck?".
"""

from __future__ import annotations

from typing import Any

from exporter.dashboards import verdict_catalogue
from exporter.dashboards.panels import (
    Panel,
    Query,
    Threshold,
    dashboard,
    heatmap,
    row,
    stat,
    table,
    timeseries,
)
from exporter.dashboards.thresholds import parameter, threshold
from exporter.dashboards.variables import gpu_variable, node_variable
from exporter.heuristics.catalogue import signal

UID = "bottleneck-node"
N = 'instance=~"$instance"'
G = f'{N}, gpu=~"$gpu"'
RI = "$__rate_interval"
# The clock-event reasons that cost speed, as the GpuThrottled verdict counts them.
HARMFUL_CLOCK_REASONS = parameter("throttle_reasons")


def gpu_panels() -> list[Panel]:
    return [row("GPUs"), *gpu_utilization_panels(), *gpu_throttling_panels(), *gpu_link_panels(),
            *gpu_process_panels()]


def gpu_utilization_panels() -> list[Panel]:
    """Whether the GPUs answer, how busy they are and how full their memory is."""
    return [
        stat(
            "GPUs up",
            "GPUs answering NVML on this node; a GPU that fell off the bus (GPU_IS_LOST) counts as "
            "down and needs draining.",
            "none",
            [
                Query(f"sum(bottleneck_gpu_up{{{N}}})", "up"),
                Query(f"count(bottleneck_gpu_up{{{N}}} == 0) or vector(0)", "down"),
            ],
            width=4,
            thresholds=[],
        ),
        timeseries(
            "GPU utilization",
            "nvidia-smi GPU-Util per GPU: share of time at least one kernel ran. A "
            "sawtooth between ~0 and ~1 means the GPU waits for each batch; a flat low line means small "
            "kernels or a small batch.",
            "percentunit",
            [Query(f"bottleneck_gpu_utilization_ratio{{{G}}}", "GPU {{gpu}}")],
            width=10,
            min_value=0,
            max_value=1,
        ),
        heatmap(
            "GPU-Util samples (sub-second)",
            "Distribution of NVML's sub-second GPU-Util samples per "
            "interval. Mass at both 0 and 1 is the sawtooth of a GPU starved between batches; a 15 s average "
            "hides it.",
            "percentunit",
            [Query(f"sum by (le) (increase(bottleneck_gpu_utilization_samples_bucket{{{G}}}[{RI}]))")],
            width=10,
        ),
        timeseries(
            "GPU memory used",
            "Framebuffer memory used / total per GPU. Low memory with low utilization "
            "suggests a bigger batch; above the nearly-full threshold an OOM is close.",
            "percentunit",
            [
                Query(signal("gpu_mem", G), "GPU {{gpu}}")
            ],
            width=8,
            min_value=0,
            max_value=1,
            thresholds=[Threshold(threshold("gpu_memory_full_ratio"), "red")],
        ),
        timeseries(
            "SM activity and tensor activity (GPM)",
            "NVML GPM on Hopper and newer: how busy the SMs and "
            "tensor cores really are (GPU-Util counts a single tiny kernel as 100%). Empty on older GPUs.",
            "percentunit",
            [
                Query(f"bottleneck_gpu_sm_activity_ratio{{{G}}}", "SM activity GPU {{gpu}}"),
                Query(f"bottleneck_gpu_tensor_activity_ratio{{{G}}}", "tensor GPU {{gpu}}"),
            ],
            width=8,
            min_value=0,
            max_value=1,
        ),
    ]


def gpu_throttling_panels() -> list[Panel]:
    """Temperature, power and clocks: whether the driver holds the GPUs below full speed, and why."""
    return [
        timeseries(
            "Temperature vs slowdown threshold",
            "GPU core temperature and the temperature at which the driver starts slowing the clocks down.",
            "celsius",
            [
                Query(f"bottleneck_gpu_temperature_celsius{{{G}}}", "GPU {{gpu}}"),
                Query(f"bottleneck_gpu_slowdown_temperature_celsius{{{G}}}", "slowdown GPU {{gpu}}"),
            ],
            width=8,
        ),
        timeseries(
            "Power draw vs limit",
            "Board power draw and the enforced power limit; draw pinned at the "
            "limit goes with a sw_power_cap throttle reason.",
            "watt",
            [
                Query(f"bottleneck_gpu_power_watts{{{G}}}", "GPU {{gpu}}"),
                Query(f"bottleneck_gpu_power_limit_watts{{{G}}}", "limit GPU {{gpu}}"),
            ],
            width=8,
        ),
        timeseries(
            "SM clock vs max",
            "Current SM clock as a share of its maximum; a drop while busy is throttling.",
            "percentunit",
            [
                Query(
                    f'bottleneck_gpu_clock_hertz{{{G}, clock="sm"}} / '
                    f'bottleneck_gpu_clock_max_hertz{{{G}, clock="sm"}}',
                    "GPU {{gpu}}",
                )
            ],
            width=8,
            min_value=0,
            max_value=1,
        ),
        timeseries(
            "Throttle reasons active",
            "Clock-event reasons NVML reports as active, only those that cost speed (thermal, HW "
            "slowdown, power brake; the GpuThrottled verdict's list): idle, application-clock and display "
            "reasons are benign.",
            "none",
            [
                Query(
                    f"max by (gpu, reason) (bottleneck_gpu_clock_event_active{{{G}, "
                    f'reason=~"{HARMFUL_CLOCK_REASONS}"}})',
                    "GPU {{gpu}} {{reason}}",
                )
            ],
            width=8,
            min_value=0,
            max_value=1,
            bars=True,
        ),
        timeseries(
            "Time throttled",
            "Share of time the clocks were held down, per reason (nvmlDeviceGetViolationStatus).",
            "percentunit",
            [Query(f"rate(bottleneck_gpu_throttled_seconds_total{{{G}}}[{RI}])", "GPU {{gpu}} {{reason}}")],
            width=8,
            min_value=0,
        ),
    ]


def gpu_link_panels() -> list[Panel]:
    """The PCIe link and the hardware's own error counters: a bad slot, riser or memory."""
    return [
        table(
            "PCIe link",
            "PCIe generation and lane width, current vs maximum. The link drops to Gen1 when idle "
            "by design; only a lower width or generation while the GPU is busy points at a bad slot or "
            "riser.",
            "none",
            [
                Query(f"bottleneck_gpu_pcie_link_generation{{{G}}}", instant=True, table=True),
                Query(f"bottleneck_gpu_pcie_link_max_generation{{{G}}}", instant=True, table=True),
                Query(f"bottleneck_gpu_pcie_link_width{{{G}}}", instant=True, table=True),
                Query(f"bottleneck_gpu_pcie_link_max_width{{{G}}}", instant=True, table=True),
                Query(f"bottleneck_gpu_utilization_ratio{{{G}}}", instant=True, table=True),
            ],
            width=12,
            hide=("Time", "job", "instance", "__name__"),
            rename={
                "Value #A": "gen",
                "Value #B": "max gen",
                "Value #C": "width",
                "Value #D": "max width",
                "Value #E": "GPU-Util",
            },
        ),
        timeseries(
            "PCIe throughput",
            "Host-device traffic per direction.",
            "Bps",
            [Query(f"bottleneck_gpu_pcie_throughput_bytes_per_second{{{G}}}", "GPU {{gpu}} {{direction}}")],
            width=12,
        ),
        timeseries(
            "ECC errors and PCIe replays",
            "New uncorrected ECC errors (drain the node) and PCIe replays (a flaky link) per interval.",
            "short",
            [
                Query(
                    f'increase(bottleneck_gpu_ecc_errors_total{{{G}, type="uncorrected"}}[{RI}])',
                    "uncorrected ECC GPU {{gpu}}",
                ),
                Query(f"increase(bottleneck_gpu_pcie_replays_total{{{G}}}[{RI}])", "PCIe replays GPU {{gpu}}"),
            ],
            width=12,
            min_value=0,
        ),
    ]


def gpu_process_panels() -> list[Panel]:
    """Which processes hold GPU memory."""
    return [
        timeseries(
            "GPU memory by process",
            "Framebuffer memory per process name (top processes).",
            "bytes",
            [Query(f"sum by (process) (bottleneck_gpu_process_memory_used_bytes{{{G}}})", "{{process}}")],
            width=12,
            stack=True,
        ),
    ]

def cpu_panels() -> list[Panel]:
    saturated = threshold("cpu_busy_ratio")
    return [
        row("CPU"),
        timeseries(
            "Busy per core",
            "Share of each core's time not idle (htop's per-core bars). One core pegged "
            "near 1 while the others idle is a single-threaded loader. 'node' is the whole node's busy share "
            "(idle and iowait excluded); above the dashed line the CPU-saturated verdict applies.",
            "percentunit",
            [
                Query(f'1 - rate(bottleneck_cpu_seconds_total{{{N}, mode="idle"}}[{RI}])', "cpu {{cpu}}"),
                Query(signal("cpu_busy", N), "node"),
            ],
            width=12,
            min_value=0,
            max_value=1,
            thresholds=[Threshold(saturated, "red")],
        ),
        timeseries(
            "CPU time by mode",
            "Whole-node CPU time by mode as a share of all cores; iowait means cores "
            "idle waiting for storage, steal means the hypervisor took them.",
            "percentunit",
            [
                Query(
                    f'avg by (mode) (rate(bottleneck_cpu_seconds_total{{{N}, mode!="idle"}}[{RI}]))',
                    "{{mode}}",
                )
            ],
            width=12,
            stack=True,
            min_value=0,
            max_value=1,
        ),
        timeseries(
            "Load per core",
            "Load average divided by online CPUs; above the oversubscription threshold "
            "more threads want to run than there are cores.",
            "short",
            [
                Query(signal("load_per_cpu", N), "load1 / cores"),
                Query(f"bottleneck_load5{{{N}}} / bottleneck_cpus{{{N}}}", "load5 / cores"),
            ],
            width=8,
            min_value=0,
            thresholds=[Threshold(threshold("load_per_cpu"), "red")],
        ),
        timeseries(
            "Run-queue wait per core",
            "Seconds runnable tasks waited for each core, per second (/proc/schedstat): the average number "
            "of tasks queued for it, the cost of too many threads or workers. Above 1 tasks always queue.",
            "short",
            [Query(f"rate(bottleneck_cpu_runqueue_wait_seconds_total{{{N}}}[{RI}])", "cpu {{cpu}}")],
            width=8,
            min_value=0,
        ),
        timeseries(
            "Context switches and runnable tasks",
            "Context switches per second and tasks running or blocked on IO right now.",
            "short",
            [
                Query(f"rate(bottleneck_context_switches_total{{{N}}}[{RI}])", "context switches/s"),
                Query(f"bottleneck_procs_running{{{N}}}", "running"),
                Query(f"bottleneck_procs_blocked{{{N}}}", "blocked"),
            ],
            width=8,
            min_value=0,
        ),
    ]


def loader_panels() -> list[Panel]:
    loader_busy = threshold("loader_busy_ratio")
    return [
        row("Training processes and loader threads"),
        timeseries(
            "CPU by thread role",
            "CPU of each trainer, split by role: main (with num_workers=0 the main "
            "thread is the loader), data_worker, pin_memory, other; in cores.",
            "short",
            [
                Query(
                    f"sum by (process, local_rank, role) (rate(bottleneck_training_cpu_seconds_total{{{N}}}[{RI}]))",
                    "{{process}} r{{local_rank}} {{role}}",
                )
            ],
            width=12,
            stack=True,
            min_value=0,
        ),
        timeseries(
            "Busiest thread per role",
            "The busiest thread of each role as a share of one core; a loader "
            "at the line is CPU-bound and starves the GPU.",
            "percentunit",
            [
                Query(
                    f"bottleneck_training_busiest_thread_cpu_ratio{{{N}}}",
                    "{{process}} r{{local_rank}} {{role}}",
                )
            ],
            width=12,
            min_value=0,
            max_value=1,
            thresholds=[Threshold(loader_busy, "red")],
        ),
        timeseries(
            "Threads and DataLoader workers",
            "Threads per role, and DataLoader worker processes found for each trainer.",
            "short",
            [
                Query(f"bottleneck_training_threads{{{N}}}", "{{process}} r{{local_rank}} {{role}} threads"),
                Query(
                    f"bottleneck_training_dataloader_workers_found{{{N}}}",
                    "{{process}} r{{local_rank}} workers",
                ),
            ],
            width=8,
            min_value=0,
        ),
        timeseries(
            "Trainer memory (RSS)",
            "Resident memory of each trainer plus its workers.",
            "bytes",
            [Query(f"bottleneck_training_resident_memory_bytes{{{N}}}", "{{process}} r{{local_rank}}")],
            width=8,
            min_value=0,
        ),
        timeseries(
            "Trainer reads and involuntary switches",
            "Bytes the trainer and workers read per second, and "
            "involuntary context switches per second (preempted for lack of cores).",
            "short",
            [
                Query(
                    f"rate(bottleneck_training_io_read_bytes_total{{{N}}}[{RI}])",
                    "{{process}} r{{local_rank}} read B/s",
                ),
                Query(
                    f'rate(bottleneck_training_context_switches_total{{{N}, kind="involuntary"}}[{RI}])',
                    "{{process}} r{{local_rank}} involuntary/s",
                ),
            ],
            width=8,
            min_value=0,
        ),
    ]


def memory_panels() -> list[Panel]:
    return [
        row("Memory, swap and pressure"),
        timeseries(
            "Memory available",
            "MemAvailable as a share of MemTotal; below the threshold the page cache "
            "is squeezed and workers may get OOM-killed.",
            "percentunit",
            [
                Query(signal("mem_available", N), "available")
            ],
            width=8,
            min_value=0,
            max_value=1,
            thresholds=[Threshold(threshold("memory_available_ratio"), "red")],
        ),
        timeseries(
            "Swap activity",
            "Pages swapped in and out per second; any sustained swapping during training is a bottleneck.",
            "short",
            [
                Query(f"rate(bottleneck_memory_swapped_in_pages_total{{{N}}}[{RI}])", "swap in pages/s"),
                Query(f"rate(bottleneck_memory_swapped_out_pages_total{{{N}}}[{RI}])", "swap out pages/s"),
                Query(f"rate(bottleneck_memory_major_faults_total{{{N}}}[{RI}])", "major faults/s"),
            ],
            width=8,
            min_value=0,
        ),
        timeseries(
            "Swap used",
            "Swap space in use (SwapTotal - SwapFree); growing while training means the job no longer fits in RAM.",
            "bytes",
            [
                Query(
                    f"bottleneck_memory_swap_total_bytes{{{N}}} - bottleneck_memory_swap_free_bytes{{{N}}}",
                    "swap used",
                )
            ],
            width=8,
            min_value=0,
        ),
        timeseries(
            "Pressure stall (PSI)",
            "Share of time some (or all) tasks stalled on CPU, memory or IO "
            "(/proc/pressure). 'some io' high with a starving GPU means the input pipeline waits on "
            "storage.",
            "percentunit",
            [Query(f"rate(bottleneck_pressure_seconds_total{{{N}}}[{RI}])", "{{resource}} {{kind}}")],
            width=16,
            min_value=0,
            max_value=1,
        ),
        timeseries(
            "OOM kills",
            "Processes the kernel OOM killer ended, per interval: a DataLoader worker killed for memory "
            "restarts the epoch or crashes the job.",
            "short",
            [Query(f"increase(bottleneck_memory_oom_kills_total{{{N}}}[{RI}])", "OOM kills")],
            width=8,
            min_value=0,
            bars=True,
        ),
    ]


def disk_panels() -> list[Panel]:
    return [
        row("Disks"),
        timeseries(
            "Disk throughput",
            "Bytes read and written per second per device (iotop's totals).",
            "Bps",
            [
                Query(f"rate(bottleneck_disk_read_bytes_total{{{N}}}[{RI}])", "{{device}} read"),
                Query(f"rate(bottleneck_disk_written_bytes_total{{{N}}}[{RI}])", "{{device}} write"),
            ],
            width=6,
            min_value=0,
        ),
        timeseries(
            "Disk utilization",
            "Share of time the device had IO in flight (iostat %util); near 1 while "
            "the GPU starves means an IO-bound input pipeline.",
            "percentunit",
            [Query(signal("disk_busy", N), "{{device}}")],
            width=6,
            min_value=0,
            max_value=1,
            thresholds=[Threshold(threshold("disk_busy_ratio"), "red")],
        ),
        timeseries(
            "Disk queue depth",
            "Average requests in flight per device (weighted IO time per second, iostat aqu-sz).",
            "short",
            [Query(f"rate(bottleneck_disk_io_time_weighted_seconds_total{{{N}}}[{RI}])", "{{device}}")],
            width=6,
            min_value=0,
        ),
        timeseries(
            "Disk read latency",
            "Mean time per completed read (iostat r_await); milliseconds on a local NVMe, far more on a "
            "saturated disk or a remote filesystem.",
            "s",
            [
                Query(
                    f"rate(bottleneck_disk_read_time_seconds_total{{{N}}}[{RI}]) / "
                    f"rate(bottleneck_disk_reads_completed_total{{{N}}}[{RI}])",
                    "{{device}}",
                )
            ],
            width=6,
            min_value=0,
        ),
    ]


def network_panels() -> list[Panel]:
    return [
        row("Network"),
        timeseries(
            "Network throughput",
            "Bytes received and sent per second per interface and InfiniBand port; remote storage and "
            "all-reduce both travel here.",
            "Bps",
            [
                Query(
                    f'rate(bottleneck_network_receive_bytes_total{{{N}, device!="lo"}}[{RI}])',
                    "{{device}} rx",
                ),
                Query(
                    f'rate(bottleneck_network_transmit_bytes_total{{{N}, device!="lo"}}[{RI}])',
                    "{{device}} tx",
                ),
                Query(
                    f"rate(bottleneck_infiniband_port_received_bytes_total{{{N}}}[{RI}])",
                    "{{device}}:{{port}} IB rx",
                ),
                Query(
                    f"rate(bottleneck_infiniband_port_transmitted_bytes_total{{{N}}}[{RI}])",
                    "{{device}}:{{port}} IB tx",
                ),
            ],
            width=8,
            min_value=0,
        ),
        timeseries(
            "Link utilization",
            "Throughput per direction as a share of the link speed; the NetworkBound verdict reads the "
            "larger direction against the dashed line.",
            "percentunit",
            [
                Query(
                    f"rate(bottleneck_network_{direction}_bytes_total{{{N}}}[{RI}]) "
                    f"/ (bottleneck_network_speed_bytes{{{N}}} > 0)",
                    f"{{{{device}}}} {short}",
                )
                for direction, short in (("receive", "rx"), ("transmit", "tx"))
            ],
            width=8,
            min_value=0,
            max_value=1,
            thresholds=[Threshold(threshold("network_saturation_ratio"), "red")],
        ),
        timeseries(
            "Errors and drops",
            "Receive/transmit errors and drops per second per interface: a bad cable, a full ring buffer.",
            "short",
            [
                Query(
                    f"rate(bottleneck_network_receive_errors_total{{{N}}}[{RI}]) + "
                    f"rate(bottleneck_network_transmit_errors_total{{{N}}}[{RI}])",
                    "{{device}} errors/s",
                ),
                Query(
                    f"rate(bottleneck_network_receive_drop_total{{{N}}}[{RI}]) + "
                    f"rate(bottleneck_network_transmit_drop_total{{{N}}}[{RI}])",
                    "{{device}} drops/s",
                ),
            ],
            width=8,
            min_value=0,
        ),
    ]


def build(regenerate: str) -> dict[str, Any]:
    variables = [
        node_variable(single=True, description="The node (scrape target) to show."),
        gpu_variable(),
    ]
    verdicts = verdict_catalogue.verdict_table(
        "Verdicts on this node",
        "Bottleneck verdicts firing now about this node, its GPUs and the ranks running on it. The verdict "
        "timeline dashboard shows each one's signal, threshold, advice and runbook.",
        N,
        "instance, training_job, rank, gpu, process, device",
        height=5,
    )
    panels = [
        row("Verdicts"),
        verdicts,
        *gpu_panels(),
        *cpu_panels(),
        *loader_panels(),
        *memory_panels(),
        *disk_panels(),
        *network_panels(),
    ]
    return dashboard(
        UID,
        "Bottleneck / Node",
        "One node: GPUs with throttle and PCIe state, cores, loader "
        "threads, memory and swap, pressure, disks and network on one page.",
        panels,
        variables,
        tags=["node"],
        regenerate=regenerate,
    )
