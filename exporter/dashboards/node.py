"""Node view: the nvidia-smi + htop + iotop picture of one node on one page.

Reads the catalogue's host and GPU signals as the bundle's sources carry them (exporter/dashboards/signals.py)
and the training collector's series, for one ``$instance``; answers "what is this node's hardware doing while
the job trains, and which part is the bottleneck?".
"""

from __future__ import annotations

from typing import Any

from bottleneck_exporter.dashboards import verdict_catalogue
from bottleneck_exporter.dashboards.annotations import with_verdict_annotations
from bottleneck_exporter.dashboards.panels import (
    Panel,
    Query,
    Threshold,
    dashboard,
    heatmap,
    row,
    stat,
    table,
    timeseries,
    with_unit_of,
)
from bottleneck_exporter.dashboards.signals import Signals, drawn
from bottleneck_exporter.dashboards.thresholds import threshold
from bottleneck_exporter.dashboards.variables import CLUSTER, cluster_variable, gpu_variable, node_variable
from bottleneck_exporter.heuristics.sources import DEFAULT_BUNDLE

UID = verdict_catalogue.NODE_VIEW
N = f'{CLUSTER}, instance=~"$instance"'
G = f'{N}, gpu=~"$gpu"'
RI = "$__rate_interval"


def gpu_panels(s: Signals) -> list[Panel]:
    # Two rows: what a person checks first fits the first screen, the clocks and links below it open on demand.
    return [row("GPUs"), *gpu_utilization_panels(s), row("GPU clocks, links and processes"),
            *gpu_throttling_panels(s), *gpu_link_panels(s), *gpu_process_panels(s)]


def gpu_utilization_panels(s: Signals) -> list[Panel]:
    """Whether the GPUs answer, how busy they are and how full their memory is."""
    return [
        drawn(
            s, stat,
            "GPUs up",
            "GPUs answering NVML on this node; a GPU that fell off the bus (GPU_IS_LOST) counts as "
            "down and needs draining.",
            "count:GPUs",
            [
                s.query("gpu_up", N, "up", around=lambda up: f"sum({up})"),
                s.query("gpu_up", N, "down", around=lambda up: f"count({up} == 0) or vector(0)"),
            ],
            width=4,
            thresholds=[],
        ),
        drawn(
            s, timeseries,
            "GPU utilization",
            "nvidia-smi GPU-Util per GPU: share of time at least one kernel ran, averaged over the interval. "
            "A sawtooth between ~0 and ~1 means the GPU waits for each batch; a flat low line means small "
            "kernels or a small batch.",
            "percentunit",
            [s.query("gpu_util", G, "GPU {{gpu}}")],
            width=10,
            min_value=0,
            max_value=1,
        ),
        drawn(
            s, heatmap,
            "GPU-Util samples (sub-second)",
            "Distribution of NVML's sub-second GPU-Util samples per "
            "interval. Mass at both 0 and 1 is the sawtooth of a GPU starved between batches; a 15 s average "
            "hides it.",
            "percentunit",
            [s.query("gpu_util_samples", G, around=lambda samples: f"sum by (le) ({samples})")],
            width=10,
        ),
        drawn(
            s, timeseries,
            "GPU memory used",
            "Framebuffer memory used / total per GPU. Low memory with low utilization "
            "suggests a bigger batch; above the nearly-full threshold an OOM is close.",
            "percentunit",
            [s.query("gpu_mem", G, "GPU {{gpu}}")],
            width=8,
            min_value=0,
            max_value=1,
            thresholds=[Threshold(threshold("gpu_memory_full_ratio"), "red")],
        ),
        drawn(
            s, timeseries,
            "SM activity and tensor activity (GPM)",
            "NVML GPM on Hopper and newer (DCGM profiling fields beside dcgm-exporter): how busy the SMs and "
            "tensor cores really are (GPU-Util counts a single tiny kernel as 100%). Empty on older GPUs.",
            "percentunit",
            [
                s.query("gpu_sm_activity", G, "SM activity GPU {{gpu}}"),
                s.query("gpu_tensor_activity", G, "tensor GPU {{gpu}}"),
            ],
            width=8,
            min_value=0,
            max_value=1,
        ),
    ]


def gpu_throttling_panels(s: Signals) -> list[Panel]:
    """Temperature, power and clocks: whether the driver holds the GPUs below full speed, and why."""
    return [
        drawn(
            s, timeseries,
            "Temperature vs slowdown threshold",
            "GPU core temperature and the temperature at which the driver starts slowing the clocks down.",
            "celsius",
            [
                s.query("gpu_temp", G, "GPU {{gpu}}"),
                s.query("gpu_slowdown_temp", G, "slowdown GPU {{gpu}}"),
            ],
            width=8,
        ),
        drawn(
            s, timeseries,
            "Power draw vs limit",
            "Board power draw and the enforced power limit; draw pinned at the "
            "limit goes with a sw_power_cap throttle reason.",
            "watt",
            [
                s.query("gpu_power", G, "GPU {{gpu}}"),
                s.query("gpu_power_limit", G, "limit GPU {{gpu}}"),
            ],
            width=8,
        ),
        drawn(
            s, timeseries,
            "SM clock vs max",
            "Current SM clock as a share of its maximum; a drop while busy is throttling.",
            "percentunit",
            [s.query("gpu_sm_clock_of_max", G, "GPU {{gpu}}")],
            width=8,
            min_value=0,
            max_value=1,
        ),
        drawn(
            s, timeseries,
            "Throttle reasons active",
            "Clock-event reasons NVML reports as active, only those that cost speed (thermal, HW "
            "slowdown, power brake; the GpuThrottled verdict's list): idle, application-clock and display "
            "reasons are benign.",
            "bool_on_off",
            [s.query("gpu_clock_events", G, "GPU {{gpu}} {{reason}}",
                     around=lambda events: f"max by (gpu, reason) ({events})")],
            width=8,
            min_value=0,
            max_value=1,
            bars=True,
        ),
        drawn(
            s, timeseries,
            "Time throttled",
            "Share of time the clocks were held down, per reason (nvmlDeviceGetViolationStatus).",
            "percentunit",
            [s.query("gpu_throttled", G, "GPU {{gpu}} {{reason}}")],
            width=8,
            min_value=0,
        ),
    ]


def gpu_link_panels(s: Signals) -> list[Panel]:
    """The PCIe link and the hardware's own error counters: a bad slot, riser or memory."""
    return [
        with_unit_of(drawn(
            s, table,
            "PCIe link",
            "PCIe generation and lane width, current vs maximum. The link drops to Gen1 when idle "
            "by design; only a lower width or generation while the GPU is busy points at a bad slot or "
            "riser.",
            "none",
            [s.query(key, G, instant=True, table=True) for key in (
                "gpu_pcie_generation", "gpu_pcie_max_generation", "gpu_pcie_width", "gpu_pcie_max_width",
                "gpu_util")],
            whole=True,
            width=12,
            hide=("Time", "job", "instance", "__name__"),
            rename={
                "Value #A": "gen",
                "Value #B": "max gen",
                "Value #C": "width",
                "Value #D": "max width",
                "Value #E": "GPU-Util",
            },
        ), "GPU-Util", "percentunit"),
        drawn(
            s, timeseries,
            "PCIe throughput",
            "Host-device traffic per direction.",
            "Bps",
            [s.query(f"gpu_pcie_{direction}", G, f"GPU {{{{gpu}}}} {direction}") for direction in ("rx", "tx")],
            width=12,
        ),
        drawn(
            s, timeseries,
            "ECC errors and PCIe replays",
            "New uncorrected ECC errors (drain the node) and PCIe replays (a flaky link) per interval.",
            "count:errors",
            [
                s.query("gpu_ecc_uncorrected", G, "uncorrected ECC GPU {{gpu}}"),
                s.query("gpu_pcie_replays", G, "PCIe replays GPU {{gpu}}"),
            ],
            width=12,
            min_value=0,
        ),
    ]


def gpu_process_panels(s: Signals) -> list[Panel]:
    """Which processes hold GPU memory."""
    return [
        drawn(
            s, timeseries,
            "GPU memory by process",
            "Framebuffer memory per process name (top processes).",
            "bytes",
            [s.query("gpu_process_memory", G, "{{process}}", around=lambda memory: f"sum by (process) ({memory})")],
            width=12,
            stack=True,
        ),
    ]


def cpu_panels(s: Signals) -> list[Panel]:
    saturated = threshold("cpu_busy_ratio")
    return [
        row("CPU"),
        drawn(
            s, timeseries,
            "Busy per core",
            "Share of each core's time not idle (htop's per-core bars). One core pegged "
            "near 1 while the others idle is a single-threaded loader. 'node' is the whole node's busy share "
            "(idle and iowait excluded); above the dashed line the CPU-saturated verdict applies.",
            "percentunit",
            [
                s.query("cpu_core_busy", N, "cpu {{cpu}}"),
                s.query("cpu_busy", N, "node"),
            ],
            width=12,
            min_value=0,
            max_value=1,
            thresholds=[Threshold(saturated, "red")],
        ),
        drawn(
            s, timeseries,
            "CPU time by mode",
            "Whole-node CPU time by mode as a share of all cores; iowait means cores "
            "idle waiting for storage, steal means the hypervisor took them.",
            "percentunit",
            [s.query("cpu_mode", N, "{{mode}}", around=lambda mode: f"avg by (mode) ({mode})")],
            width=12,
            stack=True,
            min_value=0,
            max_value=1,
        ),
        drawn(
            s, timeseries,
            "Load per core",
            "Load average divided by online CPUs; above the oversubscription threshold "
            "more threads want to run than there are cores.",
            "count:tasks/core",
            [
                s.query("load_per_cpu", N, "load1 / cores"),
                s.query("load5_per_cpu", N, "load5 / cores"),
            ],
            width=8,
            min_value=0,
            thresholds=[Threshold(threshold("load_per_cpu"), "red")],
        ),
        drawn(
            s, timeseries,
            "Run-queue wait per core",
            "Seconds runnable tasks waited for each core, per second (/proc/schedstat): the average number "
            "of tasks queued for it, the cost of too many threads or workers. Above 1 tasks always queue.",
            "suffix: s/s",
            [s.query("runqueue_wait_per_core", N, "cpu {{cpu}}")],
            width=8,
            min_value=0,
        ),
        with_unit_of(drawn(
            s, timeseries,
            "Context switches and runnable tasks",
            "Context switches per second and tasks running or blocked on IO right now.",
            "count:switches/s",
            [
                s.query("context_switches", N, "context switches/s"),
                s.query("procs_running", N, "running"),
                s.query("procs_blocked", N, "blocked"),
            ],
            width=8,
            min_value=0,
        ), "running|blocked", "count:tasks"),
    ]


def loader_panels() -> list[Panel]:
    loader_busy = threshold("loader_busy_ratio")
    return [
        row("Training processes and loader threads"),
        timeseries(
            "CPU by thread role",
            "CPU of each trainer, split by role: main (with num_workers=0 the main "
            "thread is the loader), data_worker, pin_memory, other; in cores.",
            "percentunit",
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
            "count:threads",
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
        with_unit_of(timeseries(
            "Trainer reads and involuntary switches",
            "Bytes the trainer and workers read per second, and "
            "involuntary context switches per second (preempted for lack of cores).",
            "Bps",
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
        ), ".* involuntary/s", "count:switches/s"),
    ]


def memory_panels(s: Signals) -> list[Panel]:
    return [
        row("Memory, swap and pressure"),
        drawn(
            s, timeseries,
            "Memory available",
            "MemAvailable as a share of MemTotal; below the threshold the page cache "
            "is squeezed and workers may get OOM-killed.",
            "percentunit",
            [s.query("mem_available", N, "available")],
            width=8,
            min_value=0,
            max_value=1,
            thresholds=[Threshold(threshold("memory_available_ratio"), "red")],
        ),
        drawn(
            s, timeseries,
            "Swap activity",
            "Pages swapped in and out per second; any sustained swapping during training is a bottleneck.",
            "count:pages/s",
            [
                s.query("swap_in", N, "swap in pages/s"),
                s.query("swap_out", N, "swap out pages/s"),
                s.query("major_faults", N, "major faults/s"),
            ],
            width=8,
            min_value=0,
        ),
        drawn(
            s, timeseries,
            "Swap used",
            "Swap space in use (SwapTotal - SwapFree); growing while training means the job no longer fits in RAM.",
            "bytes",
            [s.query("swap_used", N, "swap used")],
            width=8,
            min_value=0,
        ),
        drawn(
            s, timeseries,
            "Pressure stall (PSI)",
            "Share of time at least one task stalled on CPU, memory or IO (/proc/pressure, 'some'), as the "
            "verdicts read it. io high with a starving GPU means the input pipeline waits on storage.",
            "percentunit",
            [s.query(f"{resource}_pressure", N, resource) for resource in ("cpu", "memory", "io")],
            width=16,
            min_value=0,
            max_value=1,
        ),
        drawn(
            s, timeseries,
            "OOM kills",
            "Processes the kernel OOM killer ended, per interval: a DataLoader worker killed for memory "
            "restarts the epoch or crashes the job.",
            "count:kills",
            [s.query("oom_kills", N, "OOM kills")],
            width=8,
            min_value=0,
            bars=True,
        ),
    ]


def disk_panels(s: Signals) -> list[Panel]:
    return [
        row("Disks"),
        drawn(
            s, timeseries,
            "Disk throughput",
            "Bytes read and written per second per device (iotop's totals).",
            "Bps",
            [
                s.query("disk_read_bytes", N, "{{device}} read"),
                s.query("disk_written_bytes", N, "{{device}} write"),
            ],
            width=6,
            min_value=0,
        ),
        drawn(
            s, timeseries,
            "Disk utilization",
            "Share of time the device had IO in flight (iostat %util); near 1 while "
            "the GPU starves means an IO-bound input pipeline.",
            "percentunit",
            [s.query("disk_busy", N, "{{device}}")],
            width=6,
            min_value=0,
            max_value=1,
            thresholds=[Threshold(threshold("disk_busy_ratio"), "red")],
        ),
        drawn(
            s, timeseries,
            "Disk queue depth",
            "Average requests in flight per device (weighted IO time per second, iostat aqu-sz).",
            "count:requests",
            [s.query("disk_queue", N, "{{device}}")],
            width=6,
            min_value=0,
        ),
        drawn(
            s, timeseries,
            "Disk read latency",
            "Mean time per completed read (iostat r_await); milliseconds on a local NVMe, far more on a "
            "saturated disk or a remote filesystem.",
            "s",
            [s.query("disk_read_latency", N, "{{device}}")],
            width=6,
            min_value=0,
        ),
    ]


def network_panels(s: Signals) -> list[Panel]:
    return [
        row("Network"),
        drawn(
            s, timeseries,
            "Network throughput",
            "Bytes received and sent per second per interface and InfiniBand port; remote storage and "
            "all-reduce both travel here.",
            "Bps",
            [
                s.query("net_rx", N, "{{device}} rx"),
                s.query("net_tx", N, "{{device}} tx"),
                s.query("ib_rx", N, "{{device}}:{{port}} IB rx"),
                s.query("ib_tx", N, "{{device}}:{{port}} IB tx"),
            ],
            width=8,
            min_value=0,
        ),
        drawn(
            s, timeseries,
            "Link utilization",
            "Throughput per direction as a share of the link speed; the NetworkBound verdict reads the "
            "larger direction against the dashed line.",
            "percentunit",
            [s.query(f"net_{short}_util", N, f"{{{{device}}}} {short}") for short in ("rx", "tx")],
            width=8,
            min_value=0,
            max_value=1,
            thresholds=[Threshold(threshold("network_saturation_ratio"), "red")],
        ),
        drawn(
            s, timeseries,
            "Errors and drops",
            "Receive/transmit errors and drops per second per interface: a bad cable, a full ring buffer.",
            "pps",
            [
                s.query("net_errors", N, "{{device}} errors/s"),
                s.query("net_drops", N, "{{device}} drops/s"),
            ],
            width=8,
            min_value=0,
        ),
    ]


def build(regenerate: str, bundle: str = DEFAULT_BUNDLE) -> dict[str, Any]:
    s = Signals(bundle)
    variables = [
        cluster_variable(),
        node_variable(bundle, single=True, description="The node (scrape target) to show."),
        gpu_variable(bundle),
    ]
    verdicts = verdict_catalogue.verdict_table(
        "Verdicts on this node",
        "Bottleneck verdicts firing now about this node, its GPUs and the ranks running on it. The verdict "
        "timeline dashboard shows each one's signal, threshold, advice and runbook.",
        N,
        "instance, training_job, rank, gpu, process, device",
        bundle,
        height=5,
    )
    panels = [
        row("Verdicts"),
        verdicts,
        *gpu_panels(s),
        *cpu_panels(s),
        *loader_panels(),
        *memory_panels(s),
        *disk_panels(s),
        *network_panels(s),
    ]
    return with_verdict_annotations(dashboard(
        s.uid(UID),
        s.title("Bottleneck / Node"),
        "One node: GPUs with throttle and PCIe state, cores, loader "
        "threads, memory and swap, pressure, disks and network on one page.",
        panels,
        variables,
        tags=s.tags("node"),
        regenerate=regenerate,
    ), bundle)

