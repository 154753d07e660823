"""The catalogue's parameters: every threshold and setting the rules read, each with the sentence that explains
it (the runbook's table of parameters), and how an override is parsed and a value written.

Expressions read a parameter as ``${name}``; ``W`` is every rate's and average's window. Overrides come from
``--set NAME=VALUE`` (``generate``, ``diagnose``)::

    --set data_wait_ratio=0.3 --set rate_window=2m
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from bottleneck_exporter.heuristics.model import CatalogueError, Parameter
from bottleneck_exporter.heuristics.promql import PromQLError, parse_duration


def _parameters(*params: Parameter) -> dict[str, Parameter]:
    return {p.name: p for p in params}


PARAMETERS: dict[str, Parameter] = _parameters(
    Parameter("rate_window", "5m", "Window of every rate and average. Longer is steadier, shorter reacts "
              "faster; keep it at least four scrape intervals. Recording-rule names end in it.", "duration"),
    Parameter("exporter_job", "bottleneck-exporter", "Prometheus `job` of the scrape config that scrapes "
              "the exporters (BottleneckExporterDown watches `up` of this job).", "text"),
    Parameter("cluster_label", "cluster", "Label that names the cluster a series comes from (an external label of "
              "each cluster's Prometheus or agent, or a target label). Every aggregation keeps it and every join "
              "matches on it, so that one ruler over several clusters keeps their jobs and nodes apart; a "
              "Prometheus whose series lack it evaluates the rules as if it were not there.", "label"),
    Parameter("rule_interval", "1m", "How often every rule group is evaluated (its `interval:`, whatever the "
              "Prometheus' global evaluation_interval). Keep the rate window at least four times as long.",
              "duration"),
    Parameter("runbook_base_url",
              "https://github.com/bottleneck-exporter/bottleneck-exporter/blob/main/docs/runbook.md",
              "Where docs/runbook.md is published; every alert's runbook_url is this plus `#<alert name in "
              "lower case>`.", "text"),
    Parameter("data_wait_ratio", 0.5, "Share of the step a rank spends waiting for the next batch above "
              "which training is input-bound (the PyTorch profiler already suggests more workers at 5%)."),
    Parameter("loader_busy_ratio", 0.9, "Share of one core above which a loader thread counts as busy: a "
              "DataLoader worker, or the trainer's main thread when it has no workers (num_workers=0)."),
    Parameter("loader_gpu_util_max", 0.3, "GPU-Util below which a node's GPUs count as starved while a "
              "loader thread is busy (BottleneckLoaderSaturated, which needs no hook)."),
    Parameter("io_pressure_ratio", 0.3, "Share of time some task on the node stalls on IO (PSI io some) "
              "above which storage counts as the bottleneck."),
    Parameter("disk_busy_ratio", 0.9, "Share of time a block device is busy (io_time, iostat %util) above "
              "which it counts as saturated."),
    Parameter("sawtooth_idle_le", "0.05", "Upper bound of the GPU-Util sample bucket counted as idle; must "
              "be one of the gpu collector's bucket bounds, written as it appears in `le`.", "text"),
    Parameter("sawtooth_busy_le", "0.8", "Upper bound of the bucket below which samples are not busy; "
              "samples above it count as busy. Must be a bucket bound of the gpu collector.", "text"),
    Parameter("sawtooth_idle_share", 0.25, "Share of GPU-Util samples at or below 5% (the idle bucket) needed "
              "for a sawtooth."),
    Parameter("sawtooth_busy_share", 0.25, "Share of GPU-Util samples above 80% needed for a sawtooth; with "
              "the idle share it tells bursts from a flat low line."),
    Parameter("cpu_busy_ratio", 0.9, "Share of all CPU time that is busy (not idle, not iowait) above "
              "which the node's CPUs are saturated."),
    Parameter("cpu_starved_gpu_util", 0.5, "GPU-Util below which a GPU that holds a job's memory counts as "
              "underfed: with saturated CPUs, the CPUs are then the bottleneck (BottleneckCpuSaturated)."),
    Parameter("cpu_starved_data_wait", 0.2, "Data-wait share of a rank above which saturated CPUs count as "
              "starving its input pipeline (BottleneckCpuSaturated)."),
    Parameter("runqueue_wait_per_cpu", 0.25, "Seconds per second, per CPU, that runnable tasks wait for a "
              "core (/proc/schedstat) above which tasks queue for the CPUs."),
    Parameter("cpu_pressure_ratio", 0.5, "Share of time at least one task waits for a CPU (PSI cpu some) "
              "above which tasks queue for the cores. A job that keeps exactly one thread per core stays well "
              "below it; twice as many runnable threads as cores read near 100%."),
    Parameter("loader_cpu_share", 0.5, "Share of the node's busy CPU time that DataLoader workers must use "
              "for saturated cores to count as the loaders' own (not other processes starving them)."),
    Parameter("load_per_cpu", 1.5, "Load average (1 min) per CPU above which runnable tasks queue for "
              "the cores."),
    Parameter("workers_per_cpu", 1.0, "DataLoader workers (summed over the ranks on a node) per CPU above "
              "which the node is oversubscribed."),
    Parameter("context_switches_per_cpu", 20000, "Context switches per second per CPU above which the "
              "node thrashes between too many threads."),
    Parameter("memory_available_ratio", 0.1, "MemAvailable share of RAM below which the node is short of "
              "memory (warning)."),
    Parameter("memory_available_ratio_critical", 0.05, "MemAvailable share of RAM below which the OOM "
              "killer is close (critical)."),
    Parameter("memory_pressure_ratio", 0.1, "Share of time at least one task stalls on memory (PSI memory "
              "some: reclaim, swap-in, thrashing) above which the node is short of memory (warning), whatever "
              "MemAvailable says. Kernels without PSI leave this condition out."),
    Parameter("memory_pressure_ratio_critical", 0.3, "PSI memory some share above which the memory "
              "shortage is critical."),
    Parameter("swap_pages_per_second", 100, "Pages swapped in plus out per second above which swapping "
              "slows training (4 KiB pages: 100/s is 400 KiB/s of random IO)."),
    Parameter("gpu_memory_underused_ratio", 0.5, "GPU memory share below which a training GPU has room "
              "for a bigger batch."),
    Parameter("gpu_memory_underused_util", 0.7, "GPU-Util below which a GPU with unused memory counts as "
              "underused (a busy GPU with spare memory is fine)."),
    Parameter("gpu_memory_in_use_ratio", 0.02, "GPU memory share below which a GPU counts as not used by "
              "any training process (so idle spare GPUs do not raise BottleneckGpuMemoryUnderused)."),
    Parameter("gpu_memory_full_ratio", 0.95, "GPU memory share above which an out-of-memory error is "
              "close. PyTorch's caching allocator keeps freed blocks, so compare with the hook's peak."),
    Parameter("launch_bound_gpu_util", 0.5, "GPU-Util below which a GPU is underfed although data arrives "
              "in time (small kernels, launch overhead)."),
    Parameter("launch_bound_data_wait", 0.1, "Data-wait share below which input is not the problem."),
    Parameter("throttle_reasons", "sw_thermal_slowdown|hw_thermal_slowdown|hw_slowdown|hw_power_brake_slowdown",
              "Clock-event reasons that cost speed (regex over `reason`). gpu_idle, applications_clocks_setting "
              "and display_clock_setting are benign; sw_power_cap is normal at full load.", "regex"),
    Parameter("throttle_active_ratio", 0.2, "Share of scrapes with a harmful clock-event reason active above "
              "which a GPU counts as throttled."),
    Parameter("gpu_temperature_margin_celsius", 5, "Degrees below the GPU's own slowdown temperature at "
              "which BottleneckGpuTooHot fires."),
    Parameter("pcie_busy_util", 0.5, "GPU-Util above which a PCIe link below its maximum is a fault (links "
              "drop to Gen1 when idle by design)."),
    Parameter("gpu_imbalance_spread", 0.4, "Difference in GPU busy share between the busiest and the "
              "idlest rank of one job above which the job is imbalanced."),
    Parameter("straggler_factor", 1.2, "A rank whose step time, or whose own work per step (the step minus "
              "the time it waits in collectives), exceeds this many times the job's median is a straggler."),
    Parameter("network_saturation_ratio", 0.9, "Share of the link speed above which a NIC is saturated."),
    Parameter("xid_window", "1h", "How long an XID error keeps its alert firing: an XID is one event, "
              "and the GPU stays suspect until someone has looked.", "duration"),
    Parameter("xid_fatal", "48|63|64|74|79|92|94|95|119|120", "XID codes that mean a broken GPU, a GPU off "
              "the bus or one that needs a reset (regex over `xid`); see the runbook of BottleneckGpuXidFatal.",
              "regex"),
    Parameter("xid_application", "13|31|43", "XID codes that mean a job crashed on the GPU (illegal memory "
              "access, engine exception, channel reset): usually the application, sometimes the GPU.",
              "regex"),
    Parameter("collective_ratio", 0.5, "Share of the step a rank has a collective in flight (DDP's gradient "
              "all-reduce, FSDP's all-gather and reduce-scatter, from launch to completion) above which it is "
              "communication-bound, for a rank whose exposed wait the hook cannot measure (NCCL, FSDP). Gradient "
              "collectives overlap backward, and backward is about two thirds of a step's compute: below "
              "this share the backward can still hide it."),
    Parameter("gc_ratio", 0.1, "Share of the step a rank spends in Python's garbage collector above which "
              "collections hold training back. A loop that leaves the collector alone spends well under 1% there "
              "(young collections of a few hundred objects take microseconds); a gc.collect() every step over "
              "millions of live objects takes most of it."),
    Parameter("checkpoint_ratio", 0.1, "Share of a rank's stepping time spent in checkpoint saves on the "
              "training thread above which saving holds training back (a 2-minute save every 20 minutes)."),
    Parameter("long_step_lost_ratio", 0.1, "Share of a rank's stepping time lost to long steps (their time "
              "above the median step; a step is long beyond median + 3 sigma, SageMaker's StepOutlier bound, "
              "and three times the median) above which they are a verdict of their own. Below it, the loss is "
              "within what a busy machine's scheduling costs a healthy loop."),
    Parameter("startup_max_seconds", 1200, "Seconds from a training process's start to the end of its first "
              "step above which its start-up is slow (SageMaker's MaxInitializationTime: 20 minutes)."),
    Parameter("recompiles_per_minute", 0.2, "torch.compile recompilations a minute (over the rate window) above "
              "which a rank keeps recompiling: one every five minutes, held for 15 minutes. A warm-up's "
              "recompilations (the first shapes, an evaluation pass, an epoch's last batch) end within its "
              "first minutes; after them a healthy job has none."),
    Parameter("exposed_collective_ratio", 0.2, "Share of the step a rank waits for collectives that its "
              "compute did not hide (DDP's gradient all-reduce after backward's last bucket launch) above which "
              "it is communication-bound. The TensorBoard profiler plugin advised at 10 % of the step, nsys-ai "
              "flags 20 %: an alert that holds 10 minutes takes the higher, where the fix pays for itself."),
    Parameter("memory_growth_ratio_per_hour", 0.05, "Share of the node's memory per hour above which a "
              "training process's resident memory that keeps growing is a leak: at 5 % an hour a leak fills "
              "the node within a day (SageMaker's GPUMemoryIncrease fires on a rise of 5 points)."),
    Parameter("gpu_memory_growth_ratio_per_hour", 0.05, "Share of its CUDA device's memory per hour above which "
              "the memory a rank's tensors hold (torch.cuda.memory_allocated at a step end) that keeps growing is a "
              "leak: at 5 % an hour it fills the device within a day, as memory_growth_ratio_per_hour does the "
              "node's."),
    Parameter("cuda_alloc_retries_per_minute", 1, "CUDA caching-allocator retries (num_alloc_retries) per "
              "minute above which a rank runs at the edge of its GPU's memory: each retry frees the cache, "
              "synchronising the device."),
    Parameter("stall_factor", 20, "A rank with no finished step for this many times its mean step time is "
              "stalled (warning)."),
    Parameter("stall_min_seconds", 300, "...and for at least this many seconds, so that checkpoints and "
              "evaluation passes do not count as stalls (warning). The push receiver keeps a silent rank's "
              "series while its process runs, if it pushes over the Unix socket; over UDP it forgets the "
              "rank after --push.job-expiry (10m): there keep this plus the alert's for: below that."),
    Parameter("placement_local_cpus_ratio", 0.1, "Share of the CPUs a rank may run on that are near its "
              "GPU (the GPU's CPU affinity) below which it runs on the far socket. Pinned wholly to the other "
              "socket reads 0; an unpinned rank reads one over the number of NUMA nodes (0.5 on two sockets), "
              "so keep it below that."),
    Parameter("placement_local_memory_ratio", 0.1, "Share of the NUMA nodes a rank may allocate from that "
              "are its GPU's below which its host memory lies across the interconnect (numactl --membind to "
              "the other node reads 0)."),
    Parameter("pageable_batches_ratio", 0.5, "Share of the batches the hook samples on a CUDA rank whose host "
              "tensors are in pageable (not pinned) memory above which its copies to the GPU block the "
              "training thread."),
    Parameter("gpu_held_idle_window", "30m", "How long a GPU must have been held while idle before "
              "BottleneckGpuHeldIdle names it: a notebook left overnight, not a job between two epochs.",
              "duration"),
    Parameter("gpu_held_idle_ratio", 0.95, "Share of gpu_held_idle_window the GPU was held (a process with "
              "memory on it, or allocated to a pod) while its utilization stayed at or below the gpu "
              "collector's idle-ratio (5%)."),
    Parameter("stall_factor_critical", 60, "Step-time multiple without a finished step for the critical "
              "stall alert."),
    Parameter("stall_min_seconds_critical", 1800, "Minimum silence, in seconds, for the critical stall alert: "
              "a hang this long is not a slow checkpoint and holds the job's GPUs for nothing. Needs the Unix "
              "socket (a UDP rank is forgotten after --push.job-expiry)."),
    Parameter("cpu_throttled_periods_ratio", 0.25, "Share of CFS periods (100 ms each by default) in which a "
              "trainer's cgroup used up its CPU limit, above which the limit holds training back "
              "(kubernetes-mixin's CPUThrottlingHigh fires at the same 25%)."),
    Parameter("cpu_throttled_idle_cores", 1, "Idle cores (idle and iowait, over the window) the node must "
              "have for a throttled trainer to be held back by its CPU limit rather than by a busy node."),
    Parameter("loader_data_wait_ratio", 0.2, "Share of the step a rank spends waiting for the next batch above "
              "which BottleneckTooFewLoaderWorkers names the num_workers to set, when its workers are too few for "
              "the cores left to them: lower than data_wait_ratio, since more workers on idle cores cost nothing "
              "and win the wait back (TensorFlow's profiler calls a program HIGHLY input-bound from 20% of the step "
              "waiting for input, moderately from 5%; the PyTorch profiler suggested more workers at 5%)."),
    Parameter("loader_workers_cores_ratio", 0.7, "An input-bound rank's DataLoader workers below this share "
              "of the cores left to them (its workers plus its share of the node's idle cores, no more than its "
              "share of a CPU limit less a core for the main thread) are too few: SageMaker "
              "Debugger's Dataloader rule flags fewer parallel loaders than 70% of the cores."),
    Parameter("tensor_core_capability", 7.0, "CUDA compute capability from which a GPU has Tensor Cores (Volta, "
              "7.0): below it autocast's float16 brings no matmul speed-up, so BottleneckNoMixedPrecision stays "
              "silent."),
    Parameter("tensor_activity_ratio", 0.05, "NVML GPM tensor activity (share of time the SMs ran Tensor-Core "
              "instructions, Hopper and later) above which a node's GPUs use their Tensor Cores in a precision the "
              "hook cannot see (an autocast inside a compiled model): BottleneckNoMixedPrecision stays silent there "
              "for a job whose float32 matmuls are exact (with TF32 on, the activity is TF32's)."),
    Parameter("loader_worker_starts_per_hour", 20, "DataLoader worker starts an hour (over the rate window) above "
              "which a rank re-forks its workers too often: two or more in one 5-minute window (epochs under "
              "2.5 minutes each forking a new set); a single start reads at most 15 an hour there."),
)

# Every rate's and average's window, as expressions write it.
W = "${rate_window}"


def format_value(value: float | str) -> str:
    """A parameter's value as expressions and texts write it: 5.0 → ``5``, 0.05 → ``0.05``, text as it is."""
    if isinstance(value, str):
        return value
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def parse_parameter(name: str, raw: object) -> float | str:
    """Parse an override for parameter ``name``; raises CatalogueError naming it."""
    if name not in PARAMETERS:
        raise CatalogueError(f"unknown parameter {name!r}; known: {', '.join(sorted(PARAMETERS))}")
    param = PARAMETERS[name]
    if param.kind == "number":
        try:
            number = float(raw)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise CatalogueError(f"parameter {name}: expected a number, got {raw!r}") from None
        if number != number or number in (float("inf"), float("-inf")):
            raise CatalogueError(f"parameter {name}: expected a finite number, got {raw!r}")
        return number
    text = str(raw)
    if param.kind == "duration":
        try:
            parse_duration(text)
        except PromQLError:
            raise CatalogueError(f"parameter {name}: expected a duration such as 5m or 30s, got {raw!r}") from None
    if param.kind == "regex":
        try:
            re.compile(text)
        except re.error as err:
            raise CatalogueError(f"parameter {name}: not a valid regular expression ({err}): {raw!r}") from None
    if param.kind == "label" and not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", text):
        raise CatalogueError(f"parameter {name}: expected a label name such as cluster, got {raw!r}")
    if not text:
        raise CatalogueError(f"parameter {name}: must not be empty")
    return text


def parse_sets(pairs: Sequence[str]) -> dict[str, str]:
    """``["data_wait_ratio=0.3", ...]`` (the ``--set`` flags) → overrides for :func:`resolve`."""
    overrides: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise CatalogueError(f"--set {pair!r}: expected NAME=VALUE")
        overrides[name.strip()] = value.strip()
    return overrides
