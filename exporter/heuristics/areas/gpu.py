"""The GPU area: utilisation, memory, clocks, temperature, PCIe and the faults NVML reports.

Reads our gpu collector's series (``bottleneck_gpu_*``, NVML) or dcgm-exporter's (each record's ``sources``,
relabelled to our ``uuid`` by ``dcgm_as_ours``). Exposes ``AREA``: the ``instance_gpu`` recording rules, the
node's slowdown cause that the straggler verdict names, the dashboards' GPU signals and the verdicts of the
alert group ``bottleneck-gpu`` (sawtooth, memory under-used or nearly full, throttled, too hot, PCIe
degraded, lost, ECC and XID errors)::

    instance_gpu:bottleneck_gpu_utilization:avg5m{gpu="0",instance="gpu-node-1:9847",uuid="GPU-5e1f7c3a-0000"} 0.1
    instance:bottleneck_node_slowdown_cause:info{cause="a GPU of its node is throttled (...)",instance="gpu-node-2"} 1

Its scenarios are in ``bottleneck_exporter.heuristics.scenarios.gpu``.
"""

from __future__ import annotations

from bottleneck_exporter.heuristics.model import GPU, Area, Heuristic, Record, Signal, Tier
from bottleneck_exporter.heuristics.parameters import W
from bottleneck_exporter.heuristics.sources import DCGM, dcgm_as_ours

# What a node shows that would slow a rank on it (condition, cause), in the order in which the record node_cause
# below names the first that holds.
SLOWDOWN_CAUSES: tuple[tuple[str, str], ...] = (
    ("max by (instance) (increase(bottleneck_gpu_xid_errors_total[${xid_window}])) > 0",
     "XID errors on a GPU of its node"),
    ("max by (instance) (<<throttle>>) > ${throttle_active_ratio}",
     "a GPU of its node is throttled (thermal, HW slowdown or power brake)"),
    ("max by (instance) (<<pcie>> < 1 and on (instance, gpu) <<gpu_util>> > ${pcie_busy_util})",
     "a GPU of its node runs on a degraded PCIe link"),
    ("max by (instance) (<<loader_busiest>> or <<loader_cpu_of_available>>) >= ${loader_busy_ratio}",
     "its node's DataLoader workers use all the CPU they can get"),
    ("max by (instance) (<<cpu_pressure>>) > ${cpu_pressure_ratio}",
     "tasks on its node queue for the CPUs (PSI cpu)"),
    ("max by (instance) (<<memory_pressure>>) > ${memory_pressure_ratio}",
     "its node stalls on memory (PSI memory)"),
    ("count by (instance) (bottleneck_train_info)",
     "none of its node's signals stands out: work only this rank does"),
)


RECORDS: tuple[Record, ...] = (
    Record("gpu_util", f"instance_gpu:bottleneck_gpu_utilization:avg{W}",
           f"avg_over_time(bottleneck_gpu_utilization_ratio[{W}])", "gpu",
           {DCGM: dcgm_as_ours(f"avg_over_time(DCGM_FI_DEV_GPU_UTIL[{W}]) / 100")}),
    Record("gpu_temp", "instance_gpu:bottleneck_gpu_temperature:celsius", "bottleneck_gpu_temperature_celsius", "gpu",
           {DCGM: dcgm_as_ours("DCGM_FI_DEV_GPU_TEMP")}),
    # NVML's total is dcgm-exporter's used + free + reserved (FB_RESERVED is missing before dcgm-exporter 3.3).
    Record("gpu_mem", "instance_gpu:bottleneck_gpu_memory_used:ratio",
           "bottleneck_gpu_memory_used_bytes / bottleneck_gpu_memory_total_bytes", "gpu",
           {DCGM: dcgm_as_ours("DCGM_FI_DEV_FB_USED\n/\n(DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE + "
                        "(DCGM_FI_DEV_FB_RESERVED or 0 * DCGM_FI_DEV_FB_FREE))")}),
    Record("gpu_idle_samples", f"instance_gpu:bottleneck_gpu_utilization_samples_idle:ratio_rate{W}",
           'sum without (le) (rate(bottleneck_gpu_utilization_samples_bucket{le="${sawtooth_idle_le}"}'
           f"[{W}]))\n/\nrate(bottleneck_gpu_utilization_samples_count[{W}])", "gpu"),
    Record("gpu_busy_samples", f"instance_gpu:bottleneck_gpu_utilization_samples_busy:ratio_rate{W}",
           '1 - (\n  sum without (le) (rate(bottleneck_gpu_utilization_samples_bucket{le="${sawtooth_busy_le}"}'
           f"[{W}]))\n  /\n  rate(bottleneck_gpu_utilization_samples_count[{W}])\n)", "gpu"),
    Record("pcie", "instance_gpu:bottleneck_gpu_pcie_link:ratio_of_max",
           "(bottleneck_gpu_pcie_link_generation / bottleneck_gpu_pcie_link_max_generation)\n"
           "*\n(bottleneck_gpu_pcie_link_width / bottleneck_gpu_pcie_link_max_width)", "gpu"),
    Record("throttle", f"instance_gpu:bottleneck_gpu_harmful_clock_events:ratio_avg{W}",
           'max without (reason) (avg_over_time(bottleneck_gpu_clock_event_active{reason=~"${throttle_reasons}"}'
           f"[{W}]))", "gpu"),
    # The idle seconds per second over the held-idle window, held or not, rated once: the window is six rate
    # windows long, the largest read of the GPU records (docs/rules.md, "What the rules cost on a fleet").
    Record("gpu_idle_long", "instance_gpu:bottleneck_gpu_idle_seconds:rate${gpu_held_idle_window}",
           "rate(bottleneck_gpu_idle_seconds_total[${gpu_held_idle_window}])", "gpu"),
    # Held: a process holds memory on it, or the kubelet allocated it to a pod (with or without a process).
    # The pod's case comes first: its GPU is held whether or not a process has memory on it.
    Record("gpu_held_idle", "instance_gpu:bottleneck_gpu_held_idle:ratio_rate${gpu_held_idle_window}",
           "(\n  sum without (held) (<<gpu_idle_long>>)\n"
           "  and on (instance, uuid) bottleneck_gpu_kubernetes_info\n)\nor on (instance, uuid)\n"
           'sum without (held) (<<gpu_idle_long>>{held="process"})', "gpu"),
    # What a node shows that would slow a rank on it, the first that holds in this order (label cause; the
    # value is its rank, the first the highest, which catalogue.first_holding picks by).
    # Kept in the last recording group: it reads the node and GPU records of the same evaluation.
    # A bundle without a source keeps the other causes (dcgm-exporter's default counters: no XID counter,
    # no clock-event reasons, no PCIe link state).
    Record("node_cause", "instance:bottleneck_node_slowdown_cause:info", "", "gpu", parts=tuple(
        f'label_replace(\n  0 * ({condition}) + {len(SLOWDOWN_CAUSES) - rank},\n'
        f'  "cause", "{cause}", "instance", ".*"\n)' for rank, (condition, cause) in enumerate(SLOWDOWN_CAUSES))),
)


# What the dashboards draw beyond the records, over our own series; every bundle reads them through its
# sources.
SIGNALS: tuple[Signal, ...] = (
    Signal("gpu_up", "bottleneck_gpu_up"),
    Signal("gpu_util_samples", f"increase(bottleneck_gpu_utilization_samples_bucket[{W}])"),
    Signal("gpu_sm_activity", "bottleneck_gpu_sm_activity_ratio"),
    Signal("gpu_tensor_activity", "bottleneck_gpu_tensor_activity_ratio"),
    Signal("gpu_slowdown_temp", "bottleneck_gpu_slowdown_temperature_celsius"),
    Signal("gpu_power", "bottleneck_gpu_power_watts"),
    Signal("gpu_power_limit", "bottleneck_gpu_power_limit_watts"),
    Signal("gpu_sm_clock_of_max",
           'bottleneck_gpu_clock_hertz{clock="sm"} / bottleneck_gpu_clock_max_hertz{clock="sm"}'),
    Signal("gpu_clock_events", 'bottleneck_gpu_clock_event_active{reason=~"${throttle_reasons}"}'),
    Signal("gpu_throttled", f"rate(bottleneck_gpu_throttled_seconds_total[{W}])"),
    Signal("gpu_pcie_generation", "bottleneck_gpu_pcie_link_generation"),
    Signal("gpu_pcie_max_generation", "bottleneck_gpu_pcie_link_max_generation"),
    Signal("gpu_pcie_width", "bottleneck_gpu_pcie_link_width"),
    Signal("gpu_pcie_max_width", "bottleneck_gpu_pcie_link_max_width"),
    Signal("gpu_pcie_rx", 'bottleneck_gpu_pcie_throughput_bytes_per_second{direction="rx"}'),
    Signal("gpu_pcie_tx", 'bottleneck_gpu_pcie_throughput_bytes_per_second{direction="tx"}'),
    Signal("gpu_ecc_uncorrected", f'increase(bottleneck_gpu_ecc_errors_total{{type="uncorrected"}}[{W}])'),
    Signal("gpu_pcie_replays", f"increase(bottleneck_gpu_pcie_replays_total[{W}])"),
    Signal("gpu_process_memory", "bottleneck_gpu_process_memory_used_bytes"),
    # Share of the time a GPU was idle, held or not (a pod's allocation holds it), and per holding process.
    Signal("gpu_idle_share", f"sum without (held) (rate(bottleneck_gpu_idle_seconds_total[{W}]))"),
    Signal("gpu_process_idle_share", f"rate(bottleneck_gpu_process_idle_seconds_total[{W}])"),
)


# What each XID the alerts watch means, and what to do (NVIDIA's Xid catalogue, docs.nvidia.com/deploy/xid-errors).
XID_MEANINGS: dict[int, tuple[str, str]] = {
    13: ("Graphics Engine Exception: the job ran an illegal instruction or accessed memory out of range",
         "fix or restart the job; if it recurs with healthy code, run the GPU's diagnostics (dcgmi diag)"),
    31: ("GPU memory page fault: the job accessed an address it does not own (a bug, a bad kernel, or "
         "corrupted memory)", "restart the job; run compute-sanitizer on it; if it recurs across jobs, test "
         "the GPU"),
    43: ("GPU stopped processing: the job's channel hit a fault and was reset (the job crashed or was killed)",
         "restart the job; the GPU itself is fine unless other XIDs come with it"),
    48: ("Double-bit ECC error: memory corruption the GPU could not correct",
         "drain the node, reset the GPU; replace the card if it recurs"),
    63: ("Row remapping event (ECC page retirement): a memory row was marked for remapping",
         "reset the GPU when its jobs end, so the remapping takes effect"),
    64: ("Row remapping or page retirement failed", "drain the node and reset the GPU; the card may need RMA"),
    74: ("NVLink error: a link between GPUs failed", "drain the node, reset the GPUs, check the NVLink bridges "
         "or NVSwitch fabric"),
    79: ("GPU has fallen off the bus: the driver lost contact over PCIe",
         "drain the node and reboot; check the slot, riser, power cables and temperatures"),
    92: ("High single-bit ECC error rate", "watch the ECC counters; plan a replacement if it persists"),
    94: ("Contained ECC error: the affected job was stopped, others go on",
         "restart the job; reset the GPU when it is idle"),
    95: ("Uncontained ECC error: every job on the GPU is affected", "drain the node and reset the GPU"),
    119: ("GSP RPC timeout: the GPU's system processor stopped answering",
          "drain the node, reset the GPU or reboot; update the driver"),
    120: ("GSP error: the GPU's system processor failed", "drain the node, reset the GPU; update the driver"),
}


def _xid_runbook(codes: str) -> str:
    """One line per XID for the runbook: what it means; what to do."""
    return "\n\n" + "\n".join(f"- XID {code}: {XID_MEANINGS[int(code)][0]}. Do: {XID_MEANINGS[int(code)][1]}."
                               for code in codes.split("|"))


HEURISTICS: tuple[Heuristic, ...] = (
    Heuristic(
        name="GpuSawtooth",
        verdict="GPU waits in bursts (sawtooth utilisation)",
        expr="<<gpu_idle_samples>> > ${sawtooth_idle_share}\nand\n<<gpu_busy_samples>> > ${sawtooth_busy_share}",
        for_="10m",
        summary="GPU {{ $labels.gpu }} on {{ $labels.instance }} alternates between busy and idle.",
        description="{{ $value | humanizePercentage }} of the GPU-Util samples of GPU {{ $labels.gpu }} on "
        "{{ $labels.instance }} are near 0% while more than ${sawtooth_busy_share:pct} are above 80%: the "
        "GPU computes a batch, then waits for the next one.",
        advice="Overlap loading with compute: more DataLoader workers, pin_memory=True with "
        "non_blocking copies, prefetch_factor; see BottleneckInputBound.",
        meaning="A sawtooth (up to ~100%, down to ~0%, repeat) means the GPU is starved between batches; a "
        "15 s average would show a harmless-looking 50%. The sub-second NVML samples reveal the shape.",
        evidence="`bottleneck_gpu_utilization_samples_bucket` (the NVML sub-second samples as a histogram).",
        compares=('gpu_idle_samples',), threshold="sawtooth_idle_share",
        scope=GPU, unit="percentunit", group="gpu", tiers=(Tier("info"),),
    ),
    Heuristic(
        name="GpuMemoryUnderused",
        verdict="GPU memory underused",
        expr="<<gpu_mem>> < ${gpu_memory_underused_ratio}\nand <<gpu_mem>> > ${gpu_memory_in_use_ratio}\n"
        "and <<gpu_util>> < ${gpu_memory_underused_util}\nand on (instance) <<training_processes>>",
        for_="15m",
        summary="GPU {{ $labels.gpu }} on {{ $labels.instance }} has room for a bigger batch.",
        description="GPU {{ $labels.gpu }} on {{ $labels.instance }} uses only {{ $value | humanizePercentage }} "
        "of its memory and is less than ${gpu_memory_underused_util:pct} busy while training runs on the "
        "node.",
        advice="Raise the batch size (memory grows about linearly with it; scale the learning rate), or "
        "train a larger model per GPU.",
        meaning="A small batch leaves both memory and compute unused: the GPU finishes each batch quickly "
        "and spends its time on launch overhead and synchronisation.",
        evidence="`bottleneck_gpu_memory_used_bytes` / `..._total_bytes`, `bottleneck_gpu_utilization_ratio`, "
        "`bottleneck_train_dataloader_batch_size`.",
        compares=('gpu_mem',), threshold="gpu_memory_underused_ratio",
        scope=GPU, unit="percentunit", group="gpu", tiers=(Tier("info"),),
    ),
    Heuristic(
        name="GpuMemoryNearlyFull",
        verdict="GPU memory nearly full",
        expr="<<gpu_mem>> > ${gpu_memory_full_ratio}",
        for_="10m",
        summary="GPU {{ $labels.gpu }} on {{ $labels.instance }} is close to running out of memory.",
        description="GPU {{ $labels.gpu }} on {{ $labels.instance }} uses {{ $value | humanizePercentage }} "
        "of its memory (threshold ${gpu_memory_full_ratio:pct}).",
        advice="Risk of CUDA out-of-memory: smaller batch, mixed precision (AMP), activation checkpointing; "
        "check the hook's peak allocation before acting (PyTorch caches freed memory).",
        meaning="The next larger batch, a longer sequence or fragmentation will fail with CUDA OOM. NVML "
        "counts PyTorch's cached blocks as used, so this can also be a full cache with room inside.",
        evidence="`bottleneck_gpu_memory_used_bytes`, `bottleneck_train_cuda_memory_peak_bytes`, "
        "`bottleneck_train_cuda_memory_reserved_bytes`, `bottleneck_gpu_process_memory_used_bytes`.",
        compares=('gpu_mem',), threshold="gpu_memory_full_ratio",
        scope=GPU, unit="percentunit", group="gpu",
    ),
    Heuristic(
        name="GpuThrottled",
        verdict="thermal / power throttling",
        expr="<<throttle>> > ${throttle_active_ratio}",
        for_="10m",
        summary="GPU {{ $labels.gpu }} on {{ $labels.instance }} is throttled.",
        description="A harmful clock-event reason (thermal, HW slowdown or power brake) was active on GPU "
        "{{ $labels.gpu }} of {{ $labels.instance }} in {{ $value | humanizePercentage }} of the scrapes.",
        advice="Check cooling and airflow (fans, blocked intakes, ambient temperature), the power supply and "
        "power limits; compare with the node's other GPUs.",
        meaning="The GPU lowers its clocks to protect itself: every kernel runs slower, and in a "
        "data-parallel job the whole job waits for this GPU.",
        evidence="`bottleneck_gpu_clock_event_active` by reason, `bottleneck_gpu_throttled_seconds_total`, "
        "`bottleneck_gpu_temperature_celsius`, `bottleneck_gpu_clock_hertz`.",
        compares=('throttle',), threshold="throttle_active_ratio",
        scope=GPU, unit="percentunit", group="gpu",
    ),
    Heuristic(
        name="GpuTooHot",
        verdict="thermal throttling (GPU at its slowdown temperature)",
        # The slowdown temperature is ours alone; the temperature may come from dcgm-exporter (another job).
        expr="<<gpu_temp>>\n>= on (instance, gpu) group_left ()\nbottleneck_gpu_slowdown_temperature_celsius - "
        "${gpu_temperature_margin_celsius}",
        for_="5m",
        summary="GPU {{ $labels.gpu }} on {{ $labels.instance }} is at its slowdown temperature.",
        description="GPU {{ $labels.gpu }} on {{ $labels.instance }} is at {{ $value | humanize }} °C, within "
        "${gpu_temperature_margin_celsius} °C of the temperature at which it slows its clocks down.",
        advice="Improve cooling: fans, airflow, ambient temperature, blocked intakes; spread jobs over "
        "cooler GPUs.",
        meaning="Above the slowdown temperature the GPU throttles its clocks; near it, any extra load tips "
        "it over.",
        evidence="`bottleneck_gpu_temperature_celsius`, `bottleneck_gpu_slowdown_temperature_celsius`, "
        "`bottleneck_gpu_fan_ratio`, `bottleneck_gpu_power_watts`.",
        scope=GPU, unit="celsius", group="gpu",
    ),
    Heuristic(
        name="PcieDegraded",
        verdict="PCIe link degraded",
        # on (instance, gpu): the link state and the utilization may come from different exporters (jobs).
        expr="<<pcie>> < 1\nand on (instance, gpu) <<gpu_util>> > ${pcie_busy_util}",
        for_="10m",
        summary="GPU {{ $labels.gpu }} on {{ $labels.instance }} runs on a degraded PCIe link.",
        description="The PCIe link of GPU {{ $labels.gpu }} on {{ $labels.instance }} runs at "
        "{{ $value | humanizePercentage }} of its maximum (generation x width) while the GPU is busy.",
        advice="Re-seat the card, check the slot (x16, not x4) and the riser, update the BIOS; compare "
        "with the node's other GPUs.",
        meaning="Links drop to a low generation when idle by design; a link still below its maximum "
        "generation or width under load points at the slot, the riser or the card.",
        evidence="`bottleneck_gpu_pcie_link_generation` / `..._max_generation`, `bottleneck_gpu_pcie_link_width` "
        "/ `..._max_width`, `bottleneck_gpu_pcie_replays_total`.",
        compares=('pcie',), threshold="1",
        scope=GPU, unit="percentunit", group="gpu",
    ),
    Heuristic(
        name="GpuHeldIdle",
        verdict="GPU held but idle",
        # A pod's GPU is named once per pod that holds it (time-slicing shares one GPU between pods).
        expr="bottleneck_gpu_kubernetes_info\n* on (instance, uuid) group_left (gpu)\n"
        "(<<gpu_held_idle>> > ${gpu_held_idle_ratio})\nor on (instance, uuid)\n"
        "<<gpu_held_idle>> > ${gpu_held_idle_ratio}",
        for_="5m",
        summary="GPU {{ $labels.gpu }} on {{ $labels.instance }} is held but idle.",
        description="GPU {{ $labels.gpu }} on {{ $labels.instance }} was held (memory held by a process, or "
        "allocated to a pod) and idle for {{ $value | humanizePercentage }} of the last ${gpu_held_idle_window}: "
        "a GPU nobody else can use and nobody uses. Pod, where the kubelet allocated it to one: "
        "{{ $labels.namespace }}/{{ $labels.pod }}.",
        advice="Find its holder (the pod, or `bottleneck_gpu_process_idle_seconds_total` for the process): shut "
        "down the idle notebook kernel or the finished job, release the GPU in interactive sessions "
        "(`del model; torch.cuda.empty_cache()` frees memory, only ending the process frees the GPU), and give "
        "notebooks an idle culler (JupyterHub's cull_idle_timeout) or a time-slicing/MIG share instead of a "
        "whole GPU.",
        meaning="Fleet studies rank held-but-unused GPUs among the largest wastes of a cluster: a notebook "
        "left open overnight, a job that finished its work but not its process, a pod that requested a GPU it "
        "never uses. The scheduler sees the GPU as taken, so other jobs queue while it sits idle.",
        evidence="`bottleneck_gpu_idle_seconds_total` (held=process), "
        "`bottleneck_gpu_process_idle_seconds_total` (which process), `bottleneck_gpu_kubernetes_info` (which "
        "pod), `bottleneck_gpu_process_memory_used_bytes`; the fleet dashboard's idle GPU-hours by namespace, "
        "job and pod.",
        compares=("gpu_held_idle",), threshold="gpu_held_idle_ratio",
        scope=GPU, unit="percentunit", group="gpu",
    ),
    Heuristic(
        name="RankOnFarSocket",
        verdict="rank placed on the far socket from its GPU",
        # min without (): drops the names, so that the union of the two ratios keeps one series per rank.
        expr="(\n  min without () (bottleneck_gpu_process_local_cpus_ratio)"
        " < ${placement_local_cpus_ratio}\n  or\n  min without () "
        "(bottleneck_gpu_process_local_memory_ratio) < ${placement_local_memory_ratio}\n)\n"
        "* on (instance, process, local_rank) group_left (training_job)\n"
        "max by (instance, process, local_rank, training_job) (bottleneck_training_process_info)",
        for_="10m",
        summary="Rank {{ $labels.process }} (local rank {{ $labels.local_rank }}) on {{ $labels.instance }} runs "
        "on the far socket from GPU {{ $labels.gpu }}.",
        description="Only {{ $value | humanizePercentage }} of the CPUs (or NUMA nodes) that "
        "{{ $labels.process }} (local rank {{ $labels.local_rank }}, training job {{ $labels.training_job }}) on "
        "{{ $labels.instance }} may use are near its GPU {{ $labels.gpu }}: every batch, pinned "
        "buffer and kernel launch crosses the socket interconnect.",
        advice="Bind each rank to its GPU's socket: `torchrun --numa-binding=node` (recent PyTorch) or "
        "`numactl --cpunodebind=N --membind=N` with N from `nvidia-smi topo -m` (NUMA Affinity); in Kubernetes "
        "set the kubelet's `topologyManagerPolicy: single-numa-node` (or `restricted`) with "
        "`cpuManagerPolicy: static`; fix launcher scripts that pin rank r to socket r % 2 while the GPUs are "
        "numbered the other way.",
        meaning="A GPU hangs off one CPU socket's PCIe root. A rank whose CPUs (Cpus_allowed_list) or memory "
        "(Mems_allowed_list) are all on the other socket copies every batch across the interconnect (UPI, "
        "Infinity Fabric), reads its pinned buffers from remote memory and launches kernels with the added "
        "latency; the loss grows with the input bandwidth. An unpinned rank is not flagged: the scheduler may "
        "move it.",
        evidence="`bottleneck_gpu_process_local_cpus_ratio`, `bottleneck_gpu_process_local_memory_ratio`, "
        "`nvidia-smi topo -m` (CPU and NUMA Affinity), `grep -E '(Cpus|Mems)_allowed_list' /proc/PID/status`, "
        "`taskset -cp PID`.",
        compares=(), threshold="",
        scope=("instance", "gpu", "uuid", "process", "local_rank"), unit="percentunit", group="gpu",
    ),
    Heuristic(
        name="GpuLost",
        verdict="hardware fault (GPU lost)",
        expr="bottleneck_gpu_up == 0",
        for_="1m",
        summary="GPU {{ $labels.gpu }} on {{ $labels.instance }} fell off the bus.",
        description="GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on {{ $labels.instance }} no longer answers "
        "NVML (GPU is lost); the other GPUs are still reported.",
        advice="Drain the node: the GPU needs a reset or a reboot; check dmesg for Xid errors, then the "
        "card, its power and the slot.",
        meaning="NVML reported GPU_IS_LOST: the driver lost contact with the card. Every job on it has "
        "failed or hangs.",
        evidence="`bottleneck_gpu_up`, the kernel log (Xid 79), `bottleneck_gpu_info`.",
        scope=GPU, unit="short", group="gpu", tiers=(Tier("critical"),),
    ),
    Heuristic(
        name="GpuUncorrectableErrors",
        verdict="hardware fault (uncorrectable ECC errors)",
        expr='increase(bottleneck_gpu_ecc_errors_total{type="uncorrected"}[${rate_window}]) > 0',
        for_="1m",
        summary="GPU {{ $labels.gpu }} on {{ $labels.instance }} reports uncorrectable memory errors.",
        description="GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on {{ $labels.instance }} counted "
        "{{ $value | humanize }} uncorrectable ECC errors in the last ${rate_window}.",
        advice="Drain the node and reset the GPU; if errors return or row remapping failed, replace the "
        "card.",
        meaning="Uncorrectable ECC errors corrupt results or kill the process using the memory; pending "
        "or failed row remapping means the card needs attention.",
        evidence="`bottleneck_gpu_ecc_errors_total{type=\"uncorrected\"}`, `bottleneck_gpu_remapped_rows_pending`, "
        "`bottleneck_gpu_remapped_rows_failed`.",
        scope=GPU, unit="short", group="gpu", tiers=(Tier("critical"),),
    ),
    Heuristic(
        name="GpuXidFatal",
        verdict="hardware fault (XID error)",
        expr='increase(bottleneck_gpu_xid_errors_total{xid=~"${xid_fatal}"}[${xid_window}]) > 0',
        for_="1m",
        summary="GPU {{ $labels.gpu }} on {{ $labels.instance }} reported XID {{ $labels.xid }}.",
        description="GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on {{ $labels.instance }} reported XID "
        "{{ $labels.xid }} ({{ $value | humanize }} in the last ${xid_window}): a broken GPU, a GPU off the "
        "bus, or one that needs a reset.",
        advice="Drain the node (no new jobs on it), read the runbook's line for this XID, reset the GPU or "
        "reboot; replace the card if the XID returns.",
        meaning="NVML reported an XID event (the driver's error report, also in the kernel log as "
        "`NVRM: Xid`). These codes mean the hardware or its firmware failed; jobs on the GPU crashed or "
        "compute wrong results. The alert holds for ${xid_window} after the last one. Per XID (default list):"
        + _xid_runbook("48|63|64|74|79|92|94|95|119|120"),
        evidence="`bottleneck_gpu_xid_errors_total` by xid, `bottleneck_gpu_up`, "
        "`bottleneck_gpu_ecc_errors_total`, `bottleneck_gpu_remapped_rows_pending`, the kernel log "
        "(`dmesg | grep Xid`).",
        scope=("instance", "gpu", "uuid", "xid"), unit="short", group="gpu", tiers=(Tier("critical"),),
    ),
    Heuristic(
        name="GpuXidApplication",
        verdict="job crashed on the GPU (XID error)",
        expr='increase(bottleneck_gpu_xid_errors_total{xid=~"${xid_application}"}[${xid_window}]) > 0',
        for_="1m",
        summary="A job on GPU {{ $labels.gpu }} of {{ $labels.instance }} crashed (XID {{ $labels.xid }}).",
        description="GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on {{ $labels.instance }} reported XID "
        "{{ $labels.xid }} ({{ $value | humanize }} in the last ${xid_window}): a job on it hit a GPU "
        "exception.",
        advice="Look at the job that ran on this GPU (its log ends with a CUDA error); fix or restart it. "
        "If the same XID hits different jobs on this GPU only, test the GPU.",
        meaning="These XIDs usually come from the application (illegal memory access, an out-of-range "
        "instruction, a killed kernel), rarely from the GPU. Per XID (default list):" + _xid_runbook("13|31|43"),
        evidence="`bottleneck_gpu_xid_errors_total` by xid, the job's log, the kernel log "
        "(`dmesg | grep Xid`).",
        scope=("instance", "gpu", "uuid", "xid"), unit="short", group="gpu",
    ),
)

AREA = Area("gpu", RECORDS, SIGNALS, HEURISTICS)
