"""The node area: the host's CPUs, memory, storage and NICs, and the training processes' loaders on it.

Reads our host collectors' series (``bottleneck_cpu_*``, ``bottleneck_memory_*``, ``bottleneck_pressure_*``,
``bottleneck_disk_*``, ``bottleneck_network_*``) or node_exporter's (each record's ``sources``), and the
training collector's per-process series (``bottleneck_training_*``). Exposes ``AREA``: the ``instance``
recording rules, the dashboards' host signals and the verdicts of the alert group ``bottleneck-node``
(loader saturated, CPU limit throttling, CPU saturated or overloaded, oversubscribed, context-switch storm,
memory pressure, swapping, network-bound)::

    instance:bottleneck_cpu_busy:ratio_rate5m{instance="gpu-node-1:9847",job="bottleneck-exporter"} 0.97
    ALERTS{alertname="BottleneckCpuSaturated",alertstate="firing",instance="gpu-node-1:9847",severity="warning"} 1

Node verdicts hold only on a node where a job trains (``WHERE_A_JOB_TRAINS``). Its scenarios are in
``bottleneck_exporter.heuristics.scenarios.node``.
"""

from __future__ import annotations

from bottleneck_exporter.heuristics.model import NODE, Area, Heuristic, Record, Signal, Tier
from bottleneck_exporter.heuristics.parameters import W
from bottleneck_exporter.heuristics.sources import NODE_EXPORTER


def _cpu_cores(metric: str, op: str) -> str:
    return f'sum without (cpu, mode) (rate({metric}{{mode{op}"idle|iowait"}}[{W}]))'


def _psi(resource: str) -> str:
    return (f'sum without (resource, kind) (rate(bottleneck_pressure_seconds_total{{resource="{resource}", '
            f'kind="some"}}[{W}]))')


def _nic(rx: str, tx: str, speed: str) -> str:
    return f"(\n  rate({rx}[{W}])\n    > rate({tx}[{W}])\n  or rate({tx}[{W}])\n)\n/ ({speed} > 0)"


RECORDS: tuple[Record, ...] = (
    # The busy and idle cores, and the busy share derived from those two. Ours read the node's CPU time by mode
    # (8 series); node_exporter has only the per-CPU, per-mode counters, the largest family these rules read
    # (256 series on a 32-CPU node), so they are rated once here and never again (docs/rules.md, "What the
    # rules cost on a fleet").
    Record("cpu_busy_cores", f"instance:bottleneck_cpu_busy_cores:rate{W}",
           _cpu_cores("bottleneck_cpu_all_seconds_total", "!~"), "node",
           {NODE_EXPORTER: _cpu_cores("node_cpu_seconds_total", "!~")}),
    Record("cpu_free_cores", f"instance:bottleneck_cpu_free_cores:rate{W}",
           _cpu_cores("bottleneck_cpu_all_seconds_total", "=~"), "node",
           {NODE_EXPORTER: _cpu_cores("node_cpu_seconds_total", "=~")}),
    Record("cpu_busy", f"instance:bottleneck_cpu_busy:ratio_rate{W}",
           "<<cpu_busy_cores>>\n/\n(<<cpu_busy_cores>> + <<cpu_free_cores>>)", "node"),
    # node_exporter has no CPU count: it has one idle counter per CPU.
    Record("cpus", "instance:bottleneck_cpus:count", "bottleneck_cpus", "node",
           {NODE_EXPORTER: 'count without (cpu, mode) (node_cpu_seconds_total{mode="idle"})'}),
    Record("cpu_pressure", f"instance:bottleneck_cpu_pressure_some:ratio_rate{W}", _psi("cpu"), "node",
           {NODE_EXPORTER: f"rate(node_pressure_cpu_waiting_seconds_total[{W}])"}),
    Record("memory_pressure", f"instance:bottleneck_memory_pressure_some:ratio_rate{W}", _psi("memory"), "node",
           {NODE_EXPORTER: f"rate(node_pressure_memory_waiting_seconds_total[{W}])"}),
    Record("runqueue_wait", f"instance:bottleneck_cpu_runqueue_wait_per_cpu:ratio_rate{W}",
           f"rate(bottleneck_cpu_all_runqueue_wait_seconds_total[{W}])\n/\n<<cpus>>", "node",
           {NODE_EXPORTER: f"sum without (cpu) (rate(node_schedstat_waiting_seconds_total[{W}]))\n/\n<<cpus>>"}),
    Record("load_per_cpu", "instance:bottleneck_load1_per_cpu:ratio", "bottleneck_load1 / <<cpus>>", "node",
           {NODE_EXPORTER: "node_load1 / <<cpus>>"}),
    Record("ctx_per_cpu", f"instance:bottleneck_context_switches_per_cpu:rate{W}",
           f"rate(bottleneck_context_switches_total[{W}]) / <<cpus>>", "node",
           {NODE_EXPORTER: f"rate(node_context_switches_total[{W}]) / <<cpus>>"}),
    Record("mem_available", "instance:bottleneck_memory_available:ratio",
           "bottleneck_memory_available_bytes / bottleneck_memory_total_bytes", "node",
           {NODE_EXPORTER: "node_memory_MemAvailable_bytes / node_memory_MemTotal_bytes"}),
    Record("swap_io", f"instance:bottleneck_memory_swap_io_pages:rate{W}",
           f"rate(bottleneck_memory_swapped_in_pages_total[{W}])\n+\n"
           f"rate(bottleneck_memory_swapped_out_pages_total[{W}])", "node",
           {NODE_EXPORTER: f"rate(node_vmstat_pswpin[{W}])\n+\nrate(node_vmstat_pswpout[{W}])"}),
    Record("io_pressure", f"instance:bottleneck_io_pressure_some:ratio_rate{W}", _psi("io"), "node",
           {NODE_EXPORTER: f"rate(node_pressure_io_waiting_seconds_total[{W}])"}),
    Record("disk_busy", f"instance_device:bottleneck_disk_io_time:ratio_rate{W}",
           f"rate(bottleneck_disk_io_time_seconds_total[{W}])", "node",
           {NODE_EXPORTER: f"rate(node_disk_io_time_seconds_total[{W}])"}),
    Record("net_util", f"instance_device:bottleneck_network_throughput:ratio_rate{W}",
           _nic("bottleneck_network_receive_bytes_total", "bottleneck_network_transmit_bytes_total",
                "bottleneck_network_speed_bytes"), "node",
           {NODE_EXPORTER: _nic("node_network_receive_bytes_total", "node_network_transmit_bytes_total",
                                "node_network_speed_bytes")}),
    # The busiest-thread gauge covers one scrape interval: averaged over the window, so that one scrape in
    # which a pegged loader blocked on a lock does not restart the alerts' for: clock.
    Record("loader_busiest", f"instance_process:bottleneck_training_loader_busiest_thread:ratio_avg{W}",
           'max without (role) (avg_over_time(bottleneck_training_busiest_thread_cpu_ratio{role="data_worker"}'
           f'[{W}]))\nor\nmax without (role) (\n  avg_over_time(bottleneck_training_busiest_thread_cpu_ratio'
           f'{{role="main"}}[{W}])\n'
           "  and on (instance, process, local_rank) (bottleneck_training_dataloader_workers_found == 0)\n)",
           "node"),
    # DataLoader workers' CPU (cores) per training process, and the share of the CPU they could get that
    # they use: their own plus what is left idle. Workers that share saturated cores are each below a full
    # core, yet together they take all there is.
    Record("loader_cpu", f"instance_process:bottleneck_training_loader_cpu:rate{W}",
           'sum without (role, mode) (rate(bottleneck_training_cpu_seconds_total{role="data_worker"}'
           f"[{W}]))", "node"),
    Record("loader_cpu_of_available", f"instance_process:bottleneck_training_loader_cpu:ratio_of_available_rate{W}",
           "<<loader_cpu>>\n/\n(<<loader_cpu>> + on (instance) group_left () <<cpu_free_cores>>)", "node"),
    # Share of the CFS periods in which a trainer's cgroups ran out of their CPU limit (NaN, so never above a
    # threshold, while the cgroups have nothing to run).
    Record("trainer_throttled", f"instance_process:bottleneck_training_cpu_throttled_periods:ratio_rate{W}",
           f"rate(bottleneck_training_cpu_throttled_periods_total[{W}])\n/\n"
           f"rate(bottleneck_training_cpu_periods_total[{W}])", "node"),
    Record("training_processes", "instance:bottleneck_training_processes:count",
           "count by (instance) (bottleneck_train_info)\nor\ncount by (instance) (bottleneck_training_process_info)",
           "node"),
)


# What the dashboards draw beyond the records, over our own series; every bundle reads them through its
# sources.
SIGNALS: tuple[Signal, ...] = (
    # CPUs
    Signal("cpu_core_busy", f'1 - rate(bottleneck_cpu_seconds_total{{mode="idle"}}[{W}])'),
    Signal("cpu_mode", f'rate(bottleneck_cpu_seconds_total{{mode!="idle"}}[{W}])'),
    Signal("load5_per_cpu", "bottleneck_load5 / <<cpus>>"),
    Signal("runqueue_wait_per_core", f"rate(bottleneck_cpu_runqueue_wait_seconds_total[{W}])"),
    Signal("context_switches", f"rate(bottleneck_context_switches_total[{W}])"),
    Signal("procs_running", "bottleneck_procs_running"),
    Signal("procs_blocked", "bottleneck_procs_blocked"),
    # Memory
    Signal("swap_in", f"rate(bottleneck_memory_swapped_in_pages_total[{W}])"),
    Signal("swap_out", f"rate(bottleneck_memory_swapped_out_pages_total[{W}])"),
    Signal("major_faults", f"rate(bottleneck_memory_major_faults_total[{W}])"),
    Signal("swap_used", "bottleneck_memory_swap_total_bytes - bottleneck_memory_swap_free_bytes"),
    Signal("oom_kills", f"increase(bottleneck_memory_oom_kills_total[{W}])"),
    # Disks
    Signal("disk_read_bytes", f"rate(bottleneck_disk_read_bytes_total[{W}])"),
    Signal("disk_written_bytes", f"rate(bottleneck_disk_written_bytes_total[{W}])"),
    Signal("disk_queue", f"rate(bottleneck_disk_io_time_weighted_seconds_total[{W}])"),
    Signal("disk_read_latency", f"rate(bottleneck_disk_read_time_seconds_total[{W}])\n/\n"
                                f"rate(bottleneck_disk_reads_completed_total[{W}])"),
    # Network
    Signal("net_rx", f'rate(bottleneck_network_receive_bytes_total{{device!="lo"}}[{W}])'),
    Signal("net_tx", f'rate(bottleneck_network_transmit_bytes_total{{device!="lo"}}[{W}])'),
    Signal("ib_rx", f"rate(bottleneck_infiniband_port_received_bytes_total[{W}])"),
    Signal("ib_tx", f"rate(bottleneck_infiniband_port_transmitted_bytes_total[{W}])"),
    Signal("net_rx_util",
           f"rate(bottleneck_network_receive_bytes_total[{W}])\n/ (bottleneck_network_speed_bytes > 0)"),
    Signal("net_tx_util",
           f"rate(bottleneck_network_transmit_bytes_total[{W}])\n/ (bottleneck_network_speed_bytes > 0)"),
    Signal("net_errors", f"rate(bottleneck_network_receive_errors_total[{W}])\n+\n"
                         f"rate(bottleneck_network_transmit_errors_total[{W}])"),
    Signal("net_drops", f"rate(bottleneck_network_receive_drop_total[{W}])\n+\n"
                        f"rate(bottleneck_network_transmit_drop_total[{W}])"),
)


# Node verdicts hold only where a job trains: a saturated CPU or NIC on a node without training is no
# training bottleneck.
WHERE_A_JOB_TRAINS = "\nand on (instance) <<training_processes>>"

# A trainer's CPU limit throttles it while cores of the node idle: the limit, not the node, holds it back.
# The input-bound verdicts yield to it (their advice, more workers, would only share the same quota).
THROTTLED = ("<<trainer_throttled>> > ${cpu_throttled_periods_ratio}\n"
             "and on (instance) <<cpu_free_cores>> >= ${cpu_throttled_idle_cores}")


HEURISTICS: tuple[Heuristic, ...] = (
    Heuristic(
        name="LoaderSaturated",
        verdict="input-bound (data loading)",
        expr="(\n  <<loader_busiest>> >= ${loader_busy_ratio}\n  or\n"
        "  <<loader_cpu_of_available>> >= ${loader_busy_ratio}\n"
        "  and on (instance) sum by (instance) (<<loader_cpu>>) / on (instance) <<cpu_busy_cores>> "
        ">= ${loader_cpu_share}\n)\nand on (instance)\nmax by (instance) (<<gpu_util>>) < ${loader_gpu_util_max}\n"
        "unless on (instance, process, local_rank) (\n  " + THROTTLED.replace("\n", "\n  ") + "\n)",
        for_="5m",
        summary="The DataLoader of {{ $labels.process }} on {{ $labels.instance }} uses all the CPU it can get "
        "while the GPUs idle.",
        description="GPU-Util is under ${loader_gpu_util_max:pct} on {{ $labels.instance }} while the loaders of "
        "{{ $labels.process }} (local rank {{ $labels.local_rank }}) use all the CPU they can get: "
        "{{ $value | humanizePercentage }} of a core for the busiest loader thread, or, where the workers "
        "share the cores, of the CPU the node leaves them.",
        advice="Raise DataLoader num_workers (num_workers=0 makes the main thread the loader), set "
        "pin_memory=True and persistent_workers=True; make transforms cheaper or move them to the GPU.",
        meaning="Seen from outside the training process (no hook needed): the GPUs are mostly idle while the "
        "loaders use all the CPU they can get. Either one loader thread is at a full core (a DataLoader worker, "
        "`pt_data_worker`, or the trainer's main thread when no workers exist), or the workers share "
        "saturated cores, each below a full core, taking together at least ${loader_busy_ratio:pct} of the CPU "
        "not used by others and at least ${loader_cpu_share:pct} of the node's busy CPU time.",
        evidence="`bottleneck_training_busiest_thread_cpu_ratio` by role, "
        "`bottleneck_training_cpu_seconds_total{role=\"data_worker\"}` against `bottleneck_cpu_seconds_total`, "
        "`bottleneck_training_dataloader_workers_found`, `bottleneck_gpu_utilization_ratio`. When the "
        "loaders' CPU limit throttles them while cores idle, BottleneckTrainerCpuThrottled fires instead.",
        compares=('loader_busiest', 'loader_cpu_of_available'), threshold="loader_busy_ratio",
        scope=("instance", "process", "local_rank"), unit="percentunit", group="node",
    ),
    Heuristic(
        name="CpuSaturated",
        verdict="CPU saturated",
        # Busy CPUs alone are a healthy CPU-only job; they are a bottleneck when something starves for them.
        expr="<<cpu_busy>> > ${cpu_busy_ratio}\nand on (instance) (\n"
        "  max by (instance) (<<gpu_util>> < ${cpu_starved_gpu_util} and <<gpu_mem>> > ${gpu_memory_in_use_ratio})\n"
        "  or max by (instance) (<<data_wait>>) > ${cpu_starved_data_wait}\n"
        "  or max by (instance) (<<runqueue_wait>>) > ${runqueue_wait_per_cpu}\n"
        "  or max by (instance) (<<cpu_pressure>>) > ${cpu_pressure_ratio}\n)" + WHERE_A_JOB_TRAINS,
        for_="10m",
        summary="The CPUs of {{ $labels.instance }} are saturated and training starves for them.",
        description="{{ $labels.instance }} is {{ $value | humanizePercentage }} busy across all its CPUs "
        "(threshold ${cpu_busy_ratio:pct}) while something starves: a GPU holding a job's memory under "
        "${cpu_starved_gpu_util:pct} busy, a rank waiting for data over ${cpu_starved_data_wait:pct} of its "
        "steps, or tasks queueing for a core (run-queue wait or PSI cpu).",
        advice="Stop competing processes, keep num_workers at or below the free cores, set torch threads "
        "per rank (OMP_NUM_THREADS), move preprocessing to the GPU.",
        meaning="No core is left for the trainer, its loaders or the CUDA driver threads; everything on the "
        "node slows down together. Busy cores alone are no verdict: a CPU-only job that uses every core for "
        "its own compute is healthy. The rule fires only on a node where a job trains and something starves: "
        "underfed GPUs, a rank waiting for data, or tasks queueing for a core (`/proc/schedstat` run-queue "
        "wait, or PSI cpu where the kernel has it).",
        evidence="`bottleneck_cpu_seconds_total` by mode, `bottleneck_training_cpu_seconds_total` by role, "
        "`bottleneck_pressure_seconds_total{resource=\"cpu\"}`, `bottleneck_cpu_runqueue_wait_seconds_total`, "
        "`bottleneck_gpu_utilization_ratio`, the ranks' data wait.",
        compares=('cpu_busy',), threshold="cpu_busy_ratio",
        scope=NODE, unit="percentunit", group="node",
    ),
    Heuristic(
        name="TrainerCpuThrottled",
        verdict="CPU limit throttling (cgroup CFS quota)",
        # $value is the limit in cores; humanize1024 prints it plainly (0.2, 4) where humanize says 200m.
        expr="bottleneck_training_cpu_limit_cores\nand on (instance, process, local_rank) (\n  "
        + THROTTLED.replace("\n", "\n  ") + "\n)",
        for_="10m",
        summary="The CPU limit of {{ $labels.process }} on {{ $labels.instance }} throttles it while cores idle.",
        description="{{ $labels.process }} (local rank {{ $labels.local_rank }}) and its DataLoader workers on "
        "{{ $labels.instance }} are held to a CPU limit of {{ $value | humanize1024 }} cores by their cgroup's CFS "
        "quota and are throttled in more than ${cpu_throttled_periods_ratio:pct} of its periods, each time "
        "waiting for the next period, while at least ${cpu_throttled_idle_cores} of the node's cores idle.",
        advice="Raise or remove the CPU limit of the training pods (resources.limits.cpu; keep the request), "
        "or match num_workers to the limit (the main thread and the workers share it: about one core each); "
        "for whole cores of their own, run the kubelet with cpu-manager-policy=static and give Guaranteed "
        "training pods whole-core requests equal to their limits.",
        meaning="Not CPU saturation: the node has idle cores, but the trainer's cgroup may use only its quota "
        "of CPU time per CFS period (100 ms by default; quota / period is the limit in cores). Once the trainer, "
        "its DataLoader workers and their threads use it up, every one of them waits for the next period, "
        "so batches come late and the GPU waits, while `top` shows a node far from 100%. More workers make it "
        "worse: they share the same quota. The cost is the throttled time: "
        "`rate(bottleneck_training_cpu_throttled_seconds_total[5m])` is the CPU time per second the limit "
        "withheld, summed over CPUs.",
        evidence="`bottleneck_training_cpu_limit_cores`, `bottleneck_training_cpu_throttled_periods_total` "
        "against `bottleneck_training_cpu_periods_total`, `bottleneck_training_cpu_throttled_seconds_total`, "
        "the node's idle CPU in `bottleneck_cpu_seconds_total`, the loaders' CPU in "
        "`bottleneck_training_cpu_seconds_total{role=\"data_worker\"}`; in Kubernetes the pod's "
        "`resources.limits.cpu`.",
        scope=("instance", "process", "local_rank"), unit="short", group="node",
    ),
    Heuristic(
        name="CpuOverloaded",
        verdict="CPU saturated (run queue longer than the cores)",
        expr="<<load_per_cpu>> > ${load_per_cpu}" + WHERE_A_JOB_TRAINS,
        for_="10m",
        summary="More tasks want to run on {{ $labels.instance }} than it has CPUs.",
        description="The 1-minute load average of {{ $labels.instance }} is {{ $value | humanize }} per CPU "
        "(threshold ${load_per_cpu}).",
        advice="Run fewer processes or threads: lower num_workers and torch threads per rank, move other "
        "jobs off the node.",
        meaning="Runnable (and uninterruptible) tasks queue for the cores; each waits its turn, and the "
        "trainer's step time grows with the queue.",
        evidence="`bottleneck_load1`, `bottleneck_cpus`, `bottleneck_procs_running`, "
        "`bottleneck_cpu_runqueue_wait_seconds_total`.",
        compares=('load_per_cpu',), threshold="load_per_cpu",
        scope=NODE, unit="count:tasks/core", group="node",
    ),
    Heuristic(
        name="DataLoaderWorkersExceedCpus",
        verdict="oversubscribed (more DataLoader workers than CPUs)",
        expr="(\n  sum by (instance) (bottleneck_train_dataloader_num_workers)\n"
        "  or sum by (instance) (bottleneck_training_dataloader_workers_found)\n)\n"
        "> on (instance) ${workers_per_cpu} * max by (instance) (<<cpus>>)",
        for_="10m",
        summary="{{ $labels.instance }} runs more DataLoader workers than it has CPUs.",
        description="{{ $value | humanize }} DataLoader workers run on {{ $labels.instance }} (all ranks "
        "together), more than ${workers_per_cpu} per CPU.",
        advice="Lower num_workers per rank so that workers x ranks on the node stay at or below the cores; "
        "set torch threads per rank accordingly.",
        meaning="Every rank starts num_workers processes; with several ranks per node they multiply and "
        "fight for the cores, so adding workers makes loading slower, not faster.",
        evidence="`bottleneck_train_dataloader_num_workers` per rank, "
        "`bottleneck_training_dataloader_workers_found`, `bottleneck_cpus`.",
        scope=NODE, unit="count:workers/core", group="node",
    ),
    Heuristic(
        name="ContextSwitchStorm",
        verdict="oversubscribed (context-switch storm)",
        expr="<<ctx_per_cpu>> > ${context_switches_per_cpu}" + WHERE_A_JOB_TRAINS,
        for_="15m",
        summary="{{ $labels.instance }} switches between threads very often.",
        description="{{ $labels.instance }} makes {{ $value | humanize }} context switches per second per CPU "
        "(threshold ${context_switches_per_cpu}).",
        advice="Fewer threads: lower num_workers, set OMP_NUM_THREADS / torch.set_num_threads per rank so "
        "that ranks x threads fit the cores.",
        meaning="Too many runnable threads share the cores (often intra-op thread pools of every rank and "
        "every worker); time goes to switching and cache misses.",
        evidence="`bottleneck_context_switches_total`, `bottleneck_training_context_switches_total` by "
        "process, `bottleneck_training_threads`.",
        compares=('ctx_per_cpu',), threshold="context_switches_per_cpu",
        scope=NODE, unit="count:switches/s", group="node", tiers=(Tier("info"),),
    ),
    Heuristic(
        name="MemoryPressure",
        verdict="memory pressure",
        expr="(\n  <<mem_available>> < ${memory_available_ratio}\n  or on (instance)\n"
        "  <<mem_available>> and on (instance) max by (instance) (<<memory_pressure>>) > ${memory_pressure_ratio}"
        "\n)" + WHERE_A_JOB_TRAINS,
        for_="5m",
        summary="{{ $labels.instance }} is running out of memory.",
        description="Only {{ $value | humanizePercentage }} of the RAM of {{ $labels.instance }} is available "
        "(threshold ${memory_available_ratio:pct}; critical below ${memory_available_ratio_critical:pct}), or "
        "tasks stall on memory more than ${memory_pressure_ratio:pct} of the time (PSI memory; critical above "
        "${memory_pressure_ratio_critical:pct}).",
        advice="Smaller batch, fewer DataLoader workers or a lower prefetch_factor (every worker holds "
        "prefetched batches), share the dataset instead of copying it per worker, add RAM.",
        meaning="The page cache is gone and the kernel reclaims memory from the training processes; next "
        "come swapping and the OOM killer.",
        evidence="`bottleneck_memory_available_bytes`, `bottleneck_pressure_seconds_total{resource=\"memory\"}` "
        "(PSI, where the kernel has it), `bottleneck_training_resident_memory_bytes` per process, "
        "`bottleneck_memory_oom_kills_total`.",
        compares=('mem_available',), threshold="memory_available_ratio",
        scope=NODE, unit="percentunit", group="node",
        tiers=(Tier("warning"), Tier("critical", {"memory_available_ratio": "memory_available_ratio_critical",
                                                  "memory_pressure_ratio": "memory_pressure_ratio_critical"})),
    ),
    Heuristic(
        name="Swapping",
        verdict="memory pressure (swapping)",
        expr="<<swap_io>> > ${swap_pages_per_second}" + WHERE_A_JOB_TRAINS,
        for_="10m",
        summary="{{ $labels.instance }} is swapping.",
        description="{{ $labels.instance }} swaps {{ $value | humanize }} pages per second in and out "
        "(threshold ${swap_pages_per_second}).",
        advice="Reduce memory use (batch size, num_workers, prefetch_factor, in-RAM caches) or add RAM; "
        "sustained swapping during training is always a bottleneck.",
        meaning="Pages of running processes go to disk and come back: every touch of a swapped page is a "
        "disk read on the training's critical path.",
        evidence="`bottleneck_memory_swapped_in_pages_total`, `bottleneck_memory_swapped_out_pages_total`, "
        "`bottleneck_memory_major_faults_total`.",
        compares=('swap_io',), threshold="swap_pages_per_second",
        scope=NODE, unit="count:pages/s", group="node",
    ),
    Heuristic(
        name="NetworkBound",
        verdict="network-bound",
        expr="<<net_util>> > ${network_saturation_ratio}" + WHERE_A_JOB_TRAINS,
        for_="10m",
        summary="NIC {{ $labels.device }} of {{ $labels.instance }} is saturated.",
        description="{{ $labels.device }} on {{ $labels.instance }} carries {{ $value | humanizePercentage }} "
        "of its link speed (threshold ${network_saturation_ratio:pct}).",
        advice="Bigger DDP buckets, gradient accumulation or compression, overlap communication with "
        "backward; for remote data, cache locally; a faster interconnect (InfiniBand, more NICs).",
        meaning="All-reduce traffic or remote data reads fill the link; every step waits for the network.",
        evidence="`bottleneck_network_receive_bytes_total`, `..._transmit_bytes_total`, "
        "`bottleneck_network_speed_bytes`, `bottleneck_infiniband_port_received_bytes_total`.",
        compares=('net_util',), threshold="network_saturation_ratio",
        scope=("instance", "device"), unit="percentunit", group="node",
    ),
)

AREA = Area("node", RECORDS, SIGNALS, HEURISTICS)
