"""The training area: what one job's ranks say about where their steps go.

Reads the push receiver's per-rank series (``bottleneck_train_*``: phases, steps, GPU busy time, the last
step's time), and for the input-bound and IO-bound verdicts the node's storage and loader records. Exposes
``AREA``: the ``job_rank`` recording rules and the verdicts of the alert group ``bottleneck-training``
(input-bound, too few loader workers, IO-bound, launch-bound, GPU imbalance, straggler, communication-bound,
garbage-collection pauses, blocking checkpoints, long steps, slow start, memory growing on the host and on
the GPU, CUDA allocator retries, setup mistakes, stalled)::

    job_rank:bottleneck_train_data_wait:ratio_rate5m{instance="gpu-node-1:9847",rank="0",training_job="resnet50"} 0.8
    ALERTS{alertname="BottleneckInputBound",alertstate="firing",rank="0",severity="warning",training_job="resnet50"} 1

Its scenarios are in ``bottleneck_exporter.heuristics.scenarios.training``.
"""

from __future__ import annotations

from bottleneck_exporter.heuristics.areas.node import THROTTLED
from bottleneck_exporter.heuristics.model import RANK, Area, Heuristic, Record, Tier
from bottleneck_exporter.heuristics.parameters import W
from bottleneck_exporter.heuristics.sources import NODE_EXPORTER


def _of_rank(metric: str) -> str:
    """A training process's series as its rank's: the process of the rank's job with its LOCAL_RANK on its node.
    By the job too, not LOCAL_RANK alone: jobs started without torchrun all have LOCAL_RANK "" (the highest
    of theirs was every one's). A trainer the push receiver did not register (a push over UDP: no kernel
    says which process sent it) has no job: its rank is the one with its LOCAL_RANK."""
    def joined(by: str, carried: str, processes: str) -> str:
        return ("0 * bottleneck_train_info\n  + on (instance, " + by + ") group_left ()\n"
                "  max by (instance, " + by + ") (\n    " + metric + "\n"
                "    * on (instance, process, local_rank) group_left (" + carried + ")\n"
                "    (0 * " + processes + " + 1)\n  )")
    return ("max by (instance, job, training_job, rank) (\n  "
            + joined("training_job, local_rank", "training_job", "bottleneck_training_process_info")
            + "\n  or\n  "
            + joined("local_rank", "", 'bottleneck_training_process_info{training_job=""}') + "\n)")


RECORDS: tuple[Record, ...] = (
    # The namespace and pod of each rank, which every verdict about a rank carries (model.WORKLOAD_JOIN): the
    # pod the hook reports from inside it where there is one, else the rank's own target labels (beside
    # kube-prometheus-stack the exporter's namespace, elsewhere none) from the one series every rank that
    # steps has, so that the join drops no rank. Always 1 (group): the join multiplies by it.
    Record("workload", "job_rank:bottleneck_train_workload:info",
           "group by (instance, training_job, rank, namespace, pod) (bottleneck_train_kubernetes_info)\n"
           "or on (instance, training_job, rank)\n"
           "group by (instance, training_job, rank, namespace) (bottleneck_train_steps_total)", "training"),
    # The rates most records divide by, each taken once (the phase counters are the largest family the
    # training records read: docs/rules.md, "What the rules cost on a fleet"): every phase's seconds per second,
    # which the records below read a phase of (<<phase_rate>>{phase="..."}) instead of rating it again; the
    # seconds per second a rank spends stepping, in its collectives, and its steps per second.
    Record("phase_rate", f"job_rank_phase:bottleneck_train_phase_seconds:rate{W}",
           f"rate(bottleneck_train_phase_seconds_total[{W}])", "training"),
    Record("stepping", f"job_rank:bottleneck_train_stepping_seconds:rate{W}",
           'sum without (phase) (<<phase_rate>>{phase="step"})', "training"),
    Record("collective_time", f"job_rank:bottleneck_train_collective_seconds:rate{W}",
           'sum without (phase) (<<phase_rate>>{phase="collective"})', "training"),
    Record("steps_rate", f"job_rank:bottleneck_train_steps:rate{W}", f"rate(bottleneck_train_steps_total[{W}])",
           "training"),
    # The hook samples one batch in 64 on a CUDA rank; no sample in the window leaves the ratio out (0/0).
    Record("pageable_batches", f"job_rank:bottleneck_train_pageable_batches:ratio_rate{W}",
           f'sum without (memory) (rate(bottleneck_train_host_batches_total{{memory="pageable"}}[{W}]))\n'
           f"/\nsum without (memory) (rate(bottleneck_train_host_batches_total[{W}]))", "training"),
    # The share of the data wait the loop spends moving its batches to the device, where the hook times the copy
    # apart (Lightning's batch_to_device; docs/hook.md, "Host-to-device copies"): from pageable memory the copy
    # holds the training thread, from pinned memory with non_blocking=True it is only queued.
    Record("host_to_device", f"job_rank:bottleneck_train_host_to_device:ratio_of_data_wait_rate{W}",
           f"rate(bottleneck_train_host_to_device_seconds_total[{W}])\n"
           '/\nsum without (phase) (<<phase_rate>>{phase="data_wait"})', "training"),
    Record("data_wait", f"job_rank:bottleneck_train_data_wait:ratio_rate{W}",
           'sum without (phase) (<<phase_rate>>{phase="data_wait"})\n/\n<<stepping>>', "training"),
    Record("step_mean", f"job_rank:bottleneck_train_step_seconds:mean{W}",
           f"rate(bottleneck_train_step_duration_seconds_sum[{W}])\n"
           f"/\nrate(bottleneck_train_step_duration_seconds_count[{W}])", "training"),
    # Host seconds per step this rank waits in its collectives: the hook's collective phase where the rank
    # reports it, else backward (DDP's all-reduce wait sits inside backward, so backward is the proxy).
    Record("collective_wait", f"job_rank:bottleneck_train_collective_wait_seconds:mean{W}",
           '(\n  <<collective_time>>\n'
           '  or\n  sum without (phase) (<<phase_rate>>{phase="backward"})\n)'
           "\n/\n<<steps_rate>>", "training"),
    # busy / (busy + idle), written so that it rates the busy seconds once: an idle GPU (busy 0) gives
    # 1 / (1 + Inf) = 0 as the quotient does, and a rank with neither is left out (NaN) as it is.
    Record("gpu_busy", f"job_rank:bottleneck_train_gpu_busy:ratio_rate{W}",
           f"1 / (\n  1\n  +\n  rate(bottleneck_train_gpu_idle_seconds_total[{W}])\n  /\n"
           f"  rate(bottleneck_train_gpu_busy_seconds_total[{W}])\n)", "training"),
    Record("step_vs_median", f"job_rank:bottleneck_train_step_seconds:ratio_to_job_median{W}",
           "<<step_mean>>\n/ on (training_job) group_left ()\nquantile by (training_job) (0.5, <<step_mean>>)",
           "training"),
    # In a synchronous job every rank's step is as long as the slowest rank's; what differs is how long
    # each waits for the others. The step minus that wait is the rank's own work, wherever it is spent
    # (in a phase or between phases): the rank the others wait for is the one with the most.
    Record("own_work", f"job_rank:bottleneck_train_own_work_seconds:mean{W}", "<<step_mean>> - <<collective_wait>>",
           "training"),
    Record("own_vs_median", f"job_rank:bottleneck_train_own_work_seconds:ratio_to_job_median{W}",
           "<<own_work>>\n/ on (training_job) group_left ()\nquantile by (training_job) (0.5, <<own_work>>)",
           "training"),
    # Seconds per step in each place a rank's time can go: the named phases (backward without the
    # collective wait where the rank reports it) and between_phases (its own code outside them).
    Record("phase_per_step", f"job_rank_phase:bottleneck_train_phase_seconds:per_step_rate{W}",
           # Divided by the steps once, all places together: the places are joined first (one or another over
           # the rank's phases), then matched with their rank's steps.
           '(\n  <<phase_rate>>{phase=~"data_wait|forward|optimizer"}\n'
           '  or\n  <<phase_rate>>{phase="backward"}\n  - ignoring (phase) group_left ()\n  <<collective_time>>\n'
           '  or\n  <<phase_rate>>{phase="backward"}\n'
           "  or\n  label_replace(\n    <<stepping>>\n"
           '    - sum without (phase) (<<phase_rate>>{phase=~"data_wait|forward|backward|optimizer"}),\n'
           '    "phase", "between_phases", "phase", ".*"\n  )\n)\n'
           "/ ignoring (phase) group_left ()\n<<steps_rate>>", "training"),
    # Each place's seconds per step above the job's median for it, plus a nanosecond-scale priority per
    # place, so that equal excesses (all zero on a rank like its peers) still have exactly one largest. The
    # priority is taken off the median, once per job and place, rather than added to every rank's place.
    Record("phase_excess", f"job_rank_phase:bottleneck_train_phase_seconds:excess_over_job_median_rate{W}",
           "<<phase_per_step>>\n- on (training_job, phase) group_left ()\n(\n"
           "  quantile by (training_job, phase) (0.5, <<phase_per_step>>)"
           "\n  - on (phase) group_left ()\n  (\n" + "\n    or\n".join(
               f'    label_replace(vector({priority}e-09), "phase", "{place}", "phase", ".*")'
               for priority, place in ((5, "between_phases"), (4, "data_wait"), (3, "forward"),
                                       (2, "backward"), (1, "optimizer"))) + "\n  )\n)", "training"),
    # Where each rank's time goes beyond its peers': the place with the largest excess (label phase), picked
    # by topk rather than by joining every rank's places with their maximum (docs/rules.md, "What the rules
    # cost on a fleet"). A rank whose every excess is NaN (no step in the window) keeps one, NaN.
    Record("slow_phase", f"job_rank:bottleneck_train_slow_phase:excess_seconds_rate{W}",
           "topk by (instance, training_job, rank) (1, <<phase_excess>>)", "training"),
    # A rank's share of its CPU limit (the ranks of one container share its limit).
    Record("rank_cpu_limit", "job_rank:bottleneck_training_cpu_limit_share_cores:max",
           _of_rank("bottleneck_training_cpu_limit_share_cores"), "training"),
    # The cores a rank's DataLoader workers could use: the workers it has plus its share of the node's idle
    # cores, and under a CPU limit no more than its share of the limit less a core for its main thread. The
    # limit caps, it does not reserve (a CFS quota is a ceiling; only the request, cpu.weight, is a share
    # under contention): on a node whose cores are all busy the limit's cores are not there, and more
    # workers would queue beside the processes BottleneckCpuSaturated tells to stop.
    Record("loader_cores_idle", f"job_rank:bottleneck_train_loader_cores_with_idle:rate{W}",
           "bottleneck_train_dataloader_num_workers\n+ on (instance) group_left ()\n(\n  <<cpu_free_cores>>\n"
           "  / on (instance)\n  count by (instance) (bottleneck_train_dataloader_num_workers)\n)", "training"),
    Record("loader_cores_limit", "job_rank:bottleneck_train_loader_cores_within_limit:max",
           "0 * bottleneck_train_dataloader_num_workers\n+ on (instance, training_job, rank) group_left ()\n"
           "(<<rank_cpu_limit>> - 1)", "training"),
    # A rank pinned to fewer CPUs than the node has (taskset, a cpuset: docker --cpuset-cpus, Slurm, the
    # kubelet's static CPU manager) runs its workers on those CPUs only, however many others idle.
    Record("rank_allowed_cpus", "job_rank:bottleneck_training_allowed_cpus:max",
           _of_rank("bottleneck_training_allowed_cpus"), "training"),
    Record("loader_cores_pinned", "job_rank:bottleneck_train_loader_cores_within_allowed_cpus:max",
           "0 * bottleneck_train_dataloader_num_workers\n+ on (instance, training_job, rank) group_left ()\n"
           "(<<rank_allowed_cpus>> < on (instance) group_left () <<cpus>>) - 1", "training"),
    Record("loader_cores_left", f"job_rank:bottleneck_train_loader_cores_left:rate{W}",
           # The lowest of those that exist. Not (a <= b) or b or a: MetricsQL
           # (vmalert) fills a series the comparison dropped with the right-hand value (docs/rules.md).
           'min without (cores) (\n  label_replace(<<loader_cores_idle>>, "cores", "idle", "", "")\n  or\n'
           '  label_replace(<<loader_cores_limit>>, "cores", "limit", "", "")\n  or\n'
           '  label_replace(<<loader_cores_pinned>>, "cores", "pinned", "", "")\n)', "training"),
    # What the training thread loses besides its phases, as shares of its stepping time: Python's collector
    # (overlapping whatever phase it stops), checkpoint saves and long steps (both between steps, mostly).
    Record("gc", f"job_rank:bottleneck_train_gc:ratio_rate{W}",
           f"sum without (generation) (rate(bottleneck_train_gc_seconds_total[{W}]))\n"
           f'/\n<<stepping>>',
           "training"),
    Record("checkpoint", f"job_rank:bottleneck_train_checkpoint:ratio_rate{W}",
           f"rate(bottleneck_train_checkpoint_seconds_total[{W}])\n"
           f'/\n<<stepping>>',
           "training"),
    Record("long_steps", f"job_rank:bottleneck_train_long_step_excess:ratio_rate{W}",
           f"rate(bottleneck_train_long_step_excess_seconds_total[{W}])\n"
           f'/\n<<stepping>>',
           "training"),
    # torch.compile's recompilations a minute: after the warm-up (the first shapes, an eval switch, an epoch's
    # last partial batch, each compiled once) a healthy job has none.
    Record("recompiles", f"job_rank:bottleneck_train_recompiles:per_minute_rate{W}",
           f"rate(bottleneck_train_recompiles_total[{W}]) * 60", "training"),
    Record("collective", f"job_rank:bottleneck_train_collective:ratio_rate{W}",
           '<<collective_time>>\n'
           '/\n<<stepping>>',
           "training"),
    # The share of the step the training thread waits for collectives that compute did not hide (the part
    # of the collective phase after backward's last launch), where the hook measures it (gloo DDP).
    Record("exposed_collective", f"job_rank:bottleneck_train_collective_exposed:ratio_rate{W}",
           f"rate(bottleneck_train_collective_exposed_seconds_total[{W}])\n"
           f'/\n<<stepping>>',
           "training"),
    # HTA's communication-computation overlap: the share of the collectives' time during which the rank
    # computed (in flight, not waited for). The hook's exposed time is part of the time in flight.
    Record("collective_overlap", f"job_rank:bottleneck_train_collective_overlap:ratio_rate{W}",
           f"1 - rate(bottleneck_train_collective_exposed_seconds_total[{W}])\n"
           f'/ <<collective_time>>',
           "training"),
    # How fast a training process's resident memory (its DataLoader workers' included) grows, bytes per
    # second (least squares over the window: a steady leak, not one jump), and at that pace the seconds
    # until the node has no memory available.
    Record("rss_growth", f"instance_process:bottleneck_training_resident_memory_bytes:deriv{W}",
           f"deriv(bottleneck_training_resident_memory_bytes[{W}])", "training"),
    Record("memory_runs_out", f"instance_process:bottleneck_training_memory_exhausted_in_seconds:deriv{W}",
           "1 / (<<rss_growth>> > 0)\n* on (instance) group_left ()\nbottleneck_memory_available_bytes",
           "training", {NODE_EXPORTER: "1 / (<<rss_growth>> > 0)\n* on (instance) group_left ()\n"
                                       "node_memory_MemAvailable_bytes"}),
    # The growth past which a process's memory would fill the node within a day or so (see the parameter).
    Record("memory_growth_limit", "instance:bottleneck_memory_growth_limit:bytes_per_second",
           "${memory_growth_ratio_per_hour} * bottleneck_memory_total_bytes / 3600", "training",
           {NODE_EXPORTER: "${memory_growth_ratio_per_hour} * node_memory_MemTotal_bytes / 3600"}),
    # The same for a CUDA rank's tensors: the growth of the memory they hold, read at a step end (the step's
    # activations freed, so a healthy job reads the same step after step), and at that pace the seconds until
    # they fill the rank's device. An upper bound: the CUDA context, other processes on the GPU and the
    # allocator's fragmentation take part of the device before that.
    Record("cuda_growth", f"job_rank:bottleneck_train_cuda_memory_allocated_bytes:deriv{W}",
           f"deriv(bottleneck_train_cuda_memory_allocated_bytes[{W}])", "training"),
    Record("cuda_memory_runs_out", f"job_rank:bottleneck_train_cuda_memory_exhausted_in_seconds:deriv{W}",
           "(bottleneck_train_cuda_memory_total_bytes - bottleneck_train_cuda_memory_allocated_bytes)\n"
           "/\n(<<cuda_growth>> > 0)", "training"),
    # CUDA allocator retries per second: each a cudaMalloc that failed, after which the caching allocator
    # freed its cached blocks (synchronising the device) and tried again.
    Record("cuda_alloc_retries", f"job_rank:bottleneck_train_cuda_allocator_retries:rate{W}",
           f"rate(bottleneck_train_cuda_allocator_retries_total[{W}])", "training"),
    # Memory the caching allocator holds that no tensor uses: its fragmentation.
    Record("cuda_unused_reserved", "job_rank:bottleneck_train_cuda_memory_unused_reserved:bytes",
           "bottleneck_train_cuda_memory_reserved_bytes - bottleneck_train_cuda_memory_allocated_bytes",
           "training"),
    # The share of the forwards the hook looked at (the first after each datagram) that ran under autocast;
    # absent (0/0) in a window without any.
    Record("autocast_share", f"job_rank:bottleneck_train_autocast_forwards:ratio_rate{W}",
           f"rate(bottleneck_train_autocast_forwards_total[{W}])\n/\n"
           f"rate(bottleneck_train_sampled_forwards_total[{W}])", "training"),
    # The busiest Tensor-Core activity among a node's GPUs where NVML GPM measures it (Hopper and later), else 0:
    # a bundle without the series keeps the verdicts that read it.
    Record("tensor_core_use", "instance:bottleneck_gpu_tensor_activity:max", "", "training", parts=(
        "max by (instance) (bottleneck_gpu_tensor_activity_ratio)",
        "0 * count by (instance) (bottleneck_train_info)")),
    # DataLoader worker processes started an hour: once for persistent workers, every epoch without them.
    Record("worker_starts", f"job_rank:bottleneck_train_dataloader_worker_starts:per_hour_rate{W}",
           f"rate(bottleneck_train_dataloader_worker_starts_total[{W}]) * 3600", "training"),
)


# The node's storage holds the input back and the loaders are not what is busy.
IO_BLOCKED = (
    "(\n    <<io_pressure>> > ${io_pressure_ratio}\n"
    "    or on (instance) max by (instance) (<<disk_busy>>) > ${disk_busy_ratio}\n  )\n"
    "  unless on (instance) max by (instance) (<<loader_busiest>>) >= ${loader_busy_ratio}"
)

# An input-bound rank whose workers use well under the cores left to them (SageMaker's Dataloader rule), and
# one more worker would still fit.
TOO_FEW_WORKERS = (
    "bottleneck_train_dataloader_num_workers < ${loader_workers_cores_ratio} * <<loader_cores_left>>\n"
    "  and bottleneck_train_dataloader_num_workers + 1 <= <<loader_cores_left>>\n"
    "  and on (instance, training_job, rank) <<data_wait>> > ${loader_data_wait_ratio}"
)

# What the input-bound verdicts leave to the others: storage holding the input back (BottleneckIoBound), and a
# CPU limit throttling the trainer while cores idle (BottleneckTrainerCpuThrottled).
NOT_IO_OR_LIMIT = ("\nunless on (instance) (\n  " + IO_BLOCKED + "\n)\nunless on (instance) (\n  "
                   + THROTTLED.replace("\n", "\n  ") + "\n)")


HEURISTICS: tuple[Heuristic, ...] = (
    Heuristic(
        name="InputBound",
        verdict="input-bound (data loading)",
        expr="<<data_wait>> > ${data_wait_ratio}" + NOT_IO_OR_LIMIT,
        for_="5m",
        summary="Training job {{ $labels.training_job }} is input-bound: the GPU waits for the DataLoader.",
        description="Rank {{ $labels.rank }} of job {{ $labels.training_job }} on {{ $labels.instance }} waits for the "
        "next batch {{ $value | humanizePercentage }} of every step (threshold ${data_wait_ratio:pct}).",
        advice="Raise DataLoader num_workers (4, 8, 16; not above the free cores: where the node has idle cores "
        "for them, BottleneckTooFewLoaderWorkers names the number), set pin_memory=True, "
        "persistent_workers=True and a prefetch_factor; make transforms cheaper or move augmentation to "
        "the GPU.",
        meaning="The training loop spends most of each step inside the DataLoader iterator: the model is "
        "fed slower than it computes. The classic cause is num_workers=0, where the trainer's main thread "
        "decodes and augments every batch itself while the GPU sits idle.",
        evidence="`bottleneck_train_phase_seconds_total{phase=\"data_wait\"}` against `phase=\"step\"` per "
        "rank; the DataLoader settings in `bottleneck_train_dataloader_num_workers` and "
        "`..._pin_memory`; the loader threads' CPU in `bottleneck_training_busiest_thread_cpu_ratio`. When "
        "the node's storage is the cause, BottleneckIoBound fires instead, and when a CPU limit throttles the "
        "trainer while cores idle, BottleneckTrainerCpuThrottled; when the rank's workers use well under the "
        "cores left to them, BottleneckTooFewLoaderWorkers fires beside it with the num_workers to set.",
        compares=('data_wait',), threshold="data_wait_ratio",
        scope=RANK, unit="percentunit", group="training",
    ),
    Heuristic(
        name="TooFewLoaderWorkers",
        verdict="input-bound (too few DataLoader workers)",
        expr="<<loader_cores_left>> - <<loader_cores_left>> % 1\nand on (instance, training_job, rank) (\n  "
        + TOO_FEW_WORKERS + "\n)" + NOT_IO_OR_LIMIT,
        for_="5m",
        summary="Rank {{ $labels.rank }} of job {{ $labels.training_job }} waits for data with cores to spare: "
        "set num_workers={{ $value | humanize }}.",
        description="Rank {{ $labels.rank }} of job {{ $labels.training_job }} on {{ $labels.instance }} waits for "
        "the next batch more than ${loader_data_wait_ratio:pct} of every step while its DataLoader workers are fewer "
        "than ${loader_workers_cores_ratio:pct} of the cores left to them; num_workers={{ $value | humanize }} "
        "uses those cores (its workers now plus its share of the node's idle cores; no more than its share of "
        "a CPU limit, or the CPUs it is pinned to, less a core for the main thread).",
        advice="Set DataLoader num_workers to the number this verdict names (its summary and evidence: the "
        "rank's workers plus its share of the node's idle cores, capped by its share of its CPU limit less one "
        "core for the main thread), with persistent_workers=True and pin_memory=True; then look "
        "again: a rank that still waits needs cheaper transforms or GPU-side augmentation.",
        meaning="The rank waits for its batches and its loaders are not what is short of CPU: the node has idle "
        "cores the rank could give to more DataLoader worker processes (SageMaker Debugger's Dataloader rule: fewer "
        "parallel loaders than 70% of the cores). It takes a smaller wait than BottleneckInputBound "
        "(${loader_data_wait_ratio:pct} of the step against ${data_wait_ratio:pct}): a job whose main thread "
        "loads a third of each step is not yet bound by its input, but workers on idle cores win that third "
        "back at no cost. The number to set is computed, not guessed: the workers the "
        "rank has plus the node's idle cores shared among the ranks on the node. Under a CPU limit (a "
        "Kubernetes pod's, `docker run --cpus`, systemd's CPUQuota=) it is no more than the rank's share of the "
        "limit (the ranks of one container share it: `bottleneck_training_cpu_limit_share_cores`) less one "
        "core for the main thread: the node's idle cores beyond the limit are not the rank's to take. Nor is "
        "the limit more than the node has: a CFS quota is a ceiling, not cores kept for the container, so on "
        "a node whose cores are all busy (BottleneckCpuSaturated) the rank is told no number, since more "
        "workers would only queue for the same cores. A rank pinned to fewer CPUs than "
        "the node has (taskset, a cpuset: docker --cpuset-cpus, Slurm, the kubelet's static CPU manager; "
        "`bottleneck_training_allowed_cpus`) gets no more than those CPUs less the main thread's core.",
        evidence="`bottleneck_train_dataloader_num_workers` per rank, the data wait in "
        "`bottleneck_train_phase_seconds_total{phase=\"data_wait\"}`, the node's idle CPU in "
        "`bottleneck_cpu_seconds_total`, `bottleneck_training_cpu_limit_cores` and "
        "`bottleneck_training_cpu_limit_share_cores` where a limit applies, `bottleneck_training_allowed_cpus`, "
        "`job_rank:bottleneck_train_loader_cores_left:rate${rate_window}` (the cores counted).",
        scope=RANK, unit="short", group="training",
    ),
    Heuristic(
        name="IoBound",
        verdict="IO-bound (input blocked on storage)",
        expr="<<data_wait>> > ${data_wait_ratio}\nand on (instance) (\n  " + IO_BLOCKED + "\n)",
        for_="5m",
        summary="Training job {{ $labels.training_job }} waits for storage, not for CPU.",
        description="Rank {{ $labels.rank }} of job {{ $labels.training_job }} on {{ $labels.instance }} waits for the "
        "next batch {{ $value | humanizePercentage }} of every step while its loader threads are not busy "
        "and the node stalls on IO (PSI io above ${io_pressure_ratio:pct} or a disk busy above "
        "${disk_busy_ratio:pct}).",
        advice="Use faster storage (local NVMe instead of network or spinning disks), pack small files into "
        "large shards (WebDataset, TFRecord, HDF5), cache the dataset in RAM, read in parallel.",
        meaning="The input pipeline is blocked, not busy: loaders sleep in reads while the disk or the "
        "network filesystem is saturated. More workers help only up to what the storage delivers.",
        evidence="`bottleneck_pressure_seconds_total{resource=\"io\"}`, "
        "`bottleneck_disk_io_time_seconds_total` per device, `bottleneck_disk_read_bytes_total`, the "
        "loaders' CPU in `bottleneck_training_busiest_thread_cpu_ratio`.",
        compares=('data_wait',), threshold="data_wait_ratio",
        scope=RANK, unit="percentunit", group="training",
    ),
    Heuristic(
        name="PageableCopies",
        verdict="pageable host-to-device copies",
        expr="<<pageable_batches>> > ${pageable_batches_ratio}",
        for_="10m",
        summary="Rank {{ $labels.rank }} of job {{ $labels.training_job }} copies its batches to the GPU from "
        "pageable memory.",
        description="{{ $value | humanizePercentage }} of the batches the hook checked on rank {{ $labels.rank }} "
        "of job {{ $labels.training_job }} on {{ $labels.instance }} were in pageable host memory: each copy "
        "to the GPU is staged by the driver and blocks the training thread, non_blocking or not.",
        advice="Set pin_memory=True on the DataLoader (or pin the tensors a custom loader returns, "
        "tensor.pin_memory()) and copy with .to(device, non_blocking=True), so the copy overlaps the "
        "previous step's compute.",
        meaning="CUDA copies from pageable host memory through a pinned staging buffer, synchronously with "
        "the host: the training thread waits for every batch's copy instead of queueing it, and the GPU idles "
        "meanwhile. The usual cause is the DataLoader's default pin_memory=False on a CUDA rank, the setting the "
        "TensorBoard profiler plugin's setup advice named; judged by the batches, not the setting, a custom "
        "loader that pins its own tensors is not flagged. Nsight Systems' "
        "cuda_memcpy_async rule flags the same from a trace; the hook sees it live by sampling whether the "
        "loader's batches are pinned (Tensor.is_pinned(), no device call).",
        evidence="`bottleneck_train_host_batches_total` by memory (pinned, pageable), "
        "`bottleneck_train_dataloader_pin_memory`, the forward and data-wait phases in "
        "`bottleneck_train_phase_seconds_total`; under Lightning, the share of the data wait spent copying the "
        "batches to the device, `job_rank:bottleneck_train_host_to_device:ratio_of_data_wait_rate${rate_window}` "
        "(the callback times the strategy's batch_to_device; a plain loop's own `.to(device)` falls between "
        "phases and Hugging Face's inside the data wait, untimed: docs/hook.md, \"Host-to-device copies\").",
        compares=("pageable_batches",), threshold="pageable_batches_ratio",
        scope=RANK, unit="percentunit", group="training", tiers=(Tier("info"),),
    ),
    Heuristic(
        name="LaunchBound",
        verdict="small kernels / launch-bound",
        # Only ranks that train on a GPU: a CPU job next to idle GPUs is not launch-bound.
        expr="0 * (<<data_wait>> < ${launch_bound_data_wait})\n+ on (instance) group_left ()\n"
        "(max by (instance) (<<gpu_util>>) < ${launch_bound_gpu_util})\n"
        "unless on (instance) <<cpu_busy>> > ${cpu_busy_ratio}\n"
        'and on (instance, training_job, rank) bottleneck_train_info{device=~"cuda.*"}',
        for_="15m",
        summary="Job {{ $labels.training_job }} underuses its GPU although data arrives in time.",
        description="No GPU on {{ $labels.instance }} is more than {{ $value | humanizePercentage }} busy while "
        "rank {{ $labels.rank }} of job {{ $labels.training_job }} waits for data less than "
        "${launch_bound_data_wait:pct} of its steps and the CPUs are not saturated.",
        advice="Give the GPU bigger pieces of work: larger batch, CUDA graphs, torch.compile, fused "
        "optimizers; avoid per-step host synchronisation (.item(), .cpu()).",
        meaning="The GPU runs many tiny kernels and spends the gaps waiting for the CPU to launch the next "
        "one: neither input nor CPU is the limit, the launch path is.",
        evidence="`bottleneck_gpu_utilization_ratio`, `bottleneck_gpu_sm_activity_ratio` (Hopper+), the "
        "hook's `bottleneck_train_gpu_busy_seconds_total` and phase times.",
        scope=RANK, unit="percentunit", group="training", tiers=(Tier("info"),),
    ),
    Heuristic(
        name="GpuImbalance",
        verdict="GPU imbalance in a job",
        expr="max by (training_job) (<<gpu_busy>>) - min by (training_job) (<<gpu_busy>>)\n> ${gpu_imbalance_spread}",
        for_="10m",
        summary="The GPUs of job {{ $labels.training_job }} are unevenly loaded.",
        description="The busiest and the idlest rank of job {{ $labels.training_job }} differ by "
        "{{ $value | humanizePercentage }} in GPU busy time (threshold ${gpu_imbalance_spread:pct}).",
        advice="Balance the work: parallel strategy (pipeline stages, tensor-parallel split), uneven "
        "sharding or sequence lengths, a slow input pipeline on some ranks.",
        meaning="Some ranks' GPUs compute while others wait; the job runs at the pace of the busiest. Each "
        "rank's GPU busy share comes from its own CUDA events, so no rank-to-GPU mapping is needed and "
        "ranks on different nodes compare directly.",
        evidence="`bottleneck_train_gpu_busy_seconds_total` / `..._idle_seconds_total` per rank, "
        "`bottleneck_train_info` (device per rank).",
        scope=("training_job",), unit="percentunit", group="training",
    ),
    Heuristic(
        name="StragglerRank",
        verdict="straggler rank",
        # The joins add two labels: phase (where the rank's extra time goes) and cause (what its node shows).
        expr="(\n<<step_vs_median>> > ${straggler_factor}\nor\n<<own_vs_median>> > ${straggler_factor}\n)\n"
        "+ on (instance, training_job, rank) group_left (phase) (0 * <<slow_phase>>)\n"
        "+ on (instance) group_left (cause) (0 * <<node_cause>>)",
        for_="10m",
        summary="Rank {{ $labels.rank }} of job {{ $labels.training_job }} is a straggler.",
        description="Rank {{ $labels.rank }} of job {{ $labels.training_job }} on {{ $labels.instance }} is "
        "{{ $value | humanize }} times the job's median in step time or, where the collectives even step "
        "times out, in own work per step (the step minus its wait in collectives; threshold "
        "${straggler_factor}). Its extra time goes to {{ $labels.phase }} (between_phases: its own code "
        "outside forward, backward and optimizer, such as logging, evaluation or checkpoints). Likely cause: "
        "{{ $labels.cause }}. The job's other ranks wait for it in their collectives: they are not "
        "communication-bound, and BottleneckCommunicationBound is held back for the job meanwhile.",
        advice="Look at the cause the alert names: its node's GPU (throttling, PCIe link, XID errors), its "
        "loaders' CPU, the node's CPU or memory pressure; with none, the work only this rank does (rank-0 "
        "logging, evaluation, checkpoints: move it off the critical path or spread it over the ranks). If "
        "the slow rank rotates, the input pipeline is the cause.",
        meaning="One rank is slower than its peers and synchronous training waits for it at every "
        "collective. That wait evens out whole-step times, so the rule also compares each rank's own work "
        "per step: its step time minus the time it waits in collectives. The rank the others wait for is "
        "the one that waits least. The wait is the hook's `collective` phase where the rank reports it, "
        "else backward (DDP's all-reduce wait sits inside backward; backward is then no place of its own "
        "work). The label phase names where the rank's time goes beyond its peers' (the place with the "
        "largest excess over the job's median per step, between_phases included); the label cause is the "
        "first of these its node shows: XID errors, a throttled GPU, a degraded PCIe link under load, "
        "loaders using all the CPU they can get, PSI cpu, PSI memory, else nothing.",
        evidence="`bottleneck_train_phase_seconds_total` per rank and phase (collective, backward, step), "
        "the recorded `job_rank_phase:bottleneck_train_phase_seconds:excess_over_job_median_rate${rate_window}`, "
        "`instance:bottleneck_node_slowdown_cause:info`, the node alerts of the straggler's instance.",
        compares=('step_vs_median', 'own_vs_median'), threshold="straggler_factor",
        scope=RANK, unit="suffix:\u00d7", group="training",
    ),
    Heuristic(
        name="CommunicationBound",
        verdict="communication-bound (distributed)",
        # Judged on the wait compute did not hide where the hook measures it, else (NCCL, FSDP) on the time
        # in flight; never for a job with a straggler, whose peers wait for it, not for the network.
        expr="(\n  <<exposed_collective>> > ${exposed_collective_ratio}\n  or\n"
        "  (<<collective>> > ${collective_ratio} unless <<exposed_collective>>)\n)\n"
        "unless on (training_job) (\n  <<step_vs_median>> > ${straggler_factor}\n"
        "  or\n  <<own_vs_median>> > ${straggler_factor}\n)",
        for_="10m",
        summary="Rank {{ $labels.rank }} of job {{ $labels.training_job }} waits for its collectives.",
        description="Rank {{ $labels.rank }} of job {{ $labels.training_job }} on {{ $labels.instance }} waits "
        "{{ $value | humanizePercentage }} of every step for collectives (DDP's all-reduce, FSDP's all-gather "
        "or reduce-scatter) that its compute did not hide (threshold ${exposed_collective_ratio:pct}; where "
        "the hook cannot tell the wait apart, NCCL and FSDP, the share with a collective in flight, threshold "
        "${collective_ratio:pct}). No rank of the job is a straggler its peers wait for.",
        advice="Communicate less or hide it: larger DDP buckets (bucket_cap_mb=100 or more) so fewer, bigger "
        "all-reduces overlap backward; gradient accumulation (no_sync() on the micro-batches) or a larger "
        "batch per rank; gradient compression (fp16/bf16 comm hooks); with FSDP, fewer and larger fully_shard "
        "units, reshard_after_forward=False where memory allows (no all-gather again in backward), HSDP "
        "(shard within a node, replicate across nodes); a faster network (InfiniBand/RoCE, more "
        "NICs). Check that NCCL uses the right interface and transport: NCCL_SOCKET_IFNAME, NCCL_IB_HCA, "
        "NCCL_IB_DISABLE=0, NCCL_DEBUG=INFO shows what it picked.",
        meaning="The rank waits for its collectives longer than the forward and backward passes can hide: "
        "the model's parameters and gradients are large for the network (a big model, a small batch per "
        "rank), the buckets too small to overlap, or the interconnect slow. Judged as the anchors judge it: "
        "on the exposed time, the part of the step the training thread waits for collectives after its "
        "compute is done (DDP on gloo: from backward's last bucket launch to its last completion), not on "
        "the collectives' own time, most of which overlaps backward in a healthy job. The TensorBoard "
        "profiler plugin advised at 10 % of the step (its communication category counts only what no kernel "
        "overlaps); nsys-ai flags NCCL above 20 % of an iteration. This is an alert that holds for 10 "
        "minutes, on a host clock that also counts the hand-over of gloo's completion to the training "
        "thread, so it takes 20 %: what the advice can win back is then worth a change. A rank that waits "
        "because a peer is slow is not communication-bound (bigger buckets would not help): while "
        "BottleneckStragglerRank's condition holds for the job, none of its ranks gets this verdict.",
        evidence="`bottleneck_train_collective_exposed_seconds_total` and "
        "`bottleneck_train_phase_seconds_total{phase=\"collective\"}` against `phase=\"step\"` per rank; "
        "the overlap (HTA's: compute while communicating / communicating) in "
        "`job_rank:bottleneck_train_collective_overlap:ratio_rate${rate_window}`; the NICs' "
        "`bottleneck_network_transmit_bytes_total` against `bottleneck_network_speed_bytes`; the other "
        "ranks of the job.",
        compares=("exposed_collective", "collective"), threshold="exposed_collective_ratio",
        scope=RANK, unit="percentunit", group="training",
    ),
    Heuristic(
        name="GcPauses",
        verdict="garbage-collection pauses",
        expr="<<gc>> > ${gc_ratio}",
        for_="10m",
        summary="Rank {{ $labels.rank }} of job {{ $labels.training_job }} spends much of its step in Python's "
        "garbage collector.",
        description="Rank {{ $labels.rank }} of job {{ $labels.training_job }} on {{ $labels.instance }} spends "
        "{{ $value | humanizePercentage }} of its step time in Python's garbage collector (threshold "
        "${gc_ratio:pct}); while it collects, every Python thread of the process stops.",
        advice="Collect less, not per step: drop gc.collect() from the loop (or call it every few hundred steps); "
        "call gc.freeze() after building the model and the dataset, so the collector stops traversing the "
        "objects that live all run long; raise the thresholds (gc.set_threshold(50_000, 50, 100)) or, for a "
        "loop that creates no reference cycles, gc.disable() during training; keep the dataset's metadata in "
        "arrays (numpy, Arrow) rather than millions of Python objects.",
        meaning="A collection traverses every tracked container object of its generation and the younger ones: "
        "a full (generation 2) collection over millions of live objects (a dataset index kept as Python lists "
        "and dicts, caches) takes tens to hundreds of milliseconds, and stops every Python thread meanwhile, "
        "the training thread too. The common case is a loop that calls gc.collect() every step (to free GPU "
        "memory sooner); the other is a loop whose allocations trigger full collections over a large heap.",
        evidence="`bottleneck_train_gc_seconds_total` by `generation` against "
        "`bottleneck_train_phase_seconds_total{phase=\"step\"}`; `bottleneck_train_gc_collections_total` "
        "(generation 2 collections every step: a gc.collect() in the loop).",
        compares=("gc",), threshold="gc_ratio",
        scope=RANK, unit="percentunit", group="training",
    ),
    Heuristic(
        name="BlockingCheckpoints",
        verdict="checkpoints block training",
        expr="<<checkpoint>> > ${checkpoint_ratio}",
        for_="10m",
        summary="Rank {{ $labels.rank }} of job {{ $labels.training_job }} loses much of its time writing "
        "checkpoints on the training thread.",
        description="Rank {{ $labels.rank }} of job {{ $labels.training_job }} on {{ $labels.instance }} spends "
        "{{ $value | humanizePercentage }} of its stepping time in checkpoint saves on the training thread "
        "(threshold ${checkpoint_ratio:pct}): the steps that hold a save are long, the others are not. This is "
        "not a stall and not input-bound.",
        advice="Take the write off the training thread: torch.distributed.checkpoint.async_save (or "
        "Lightning's AsyncCheckpointIO, or a thread of your own that writes a copy staged to CPU memory); save "
        "less often; save on one rank (rank 0, or each rank its shard with torch.distributed.checkpoint) "
        "rather than every rank writing everything; write to local NVMe and copy to remote storage "
        "afterwards.",
        meaning="The loop writes a checkpoint (torch.save, torch.distributed.checkpoint.save, or a framework's "
        "checkpointing that calls them) every few dozen steps and waits for it: serialising a large state "
        "dict and writing it to (often remote) storage takes seconds during which no step runs, and in a "
        "synchronous job every other rank waits for it in the next collective. The hook times each save on "
        "the training thread as a phase of its own; async_save's background writes are not counted.",
        evidence="`bottleneck_train_checkpoint_seconds_total` and `bottleneck_train_checkpoint_saves_total` "
        "(seconds per save, saves per step), `bottleneck_train_long_steps_total` (the steps that held them), "
        "the node's disk and network write throughput.",
        compares=("checkpoint",), threshold="checkpoint_ratio",
        scope=RANK, unit="percentunit", group="training",
    ),
    Heuristic(
        name="LongSteps",
        verdict="long steps that come back",
        # Where the hook names the cause (a save, collections), that verdict says it instead.
        expr="<<long_steps>> > ${long_step_lost_ratio}\nunless on (instance, training_job, rank) (\n"
        "  <<checkpoint>> > ${checkpoint_ratio}\n  or\n  <<gc>> > ${gc_ratio}\n  or\n"
        "  <<recompiles>> > ${recompiles_per_minute}\n)\n"
        # A node whose CPUs are contended preempts the training thread at random: its long steps are the node's
        # (BottleneckCpuSaturated or BottleneckCpuOverloaded names it), not something the loop does every N steps.
        "unless on (instance) <<cpu_pressure>> > ${cpu_pressure_ratio}",
        for_="10m",
        summary="Rank {{ $labels.rank }} of job {{ $labels.training_job }} loses much of its time to steps far "
        "longer than its median step.",
        description="Rank {{ $labels.rank }} of job {{ $labels.training_job }} on {{ $labels.instance }} loses "
        "{{ $value | humanizePercentage }} of its stepping time to long steps, their time above its median "
        "step (threshold ${long_step_lost_ratio:pct}); the steps between them are regular.",
        advice="Find what runs every N steps on the training thread: evaluation, logging that syncs with the GPU "
        "(.item(), printing tensors), a checkpoint written by other means than torch.save, a learning-rate or "
        "data-shard switch, a DataLoader re-created every epoch (persistent_workers=True). Move it off the "
        "critical path (asynchronously, less often, on one rank), or make it cheaper.",
        meaning="Most steps take about the median, but some come back far longer (longer than the median plus "
        "three standard deviations, SageMaker's StepOutlier bound, the deviation estimated from the "
        "interquartile range of the last 128 steps so that the long steps do not widen it, and longer than "
        "three times the median, so that a busy machine's scheduling jitter does not count), and come back "
        "alone or a few together: more than four with fewer than four regular steps between them are the "
        "loop's steps all slowing down for a while (another process took the cores), which the median takes "
        "seconds to follow, and of those only the steps three times longer than their own median count. The "
        "time they take above the median is lost to training. Where the hook sees the cause, the verdict that names it "
        "fires instead: BottleneckBlockingCheckpoints for saves, BottleneckGcPauses for collections, "
        "BottleneckKeepsRecompiling for torch.compile's recompilations. On a node whose CPUs are "
        "contended (PSI cpu above ${cpu_pressure_ratio:pct}) the training thread is preempted at random and "
        "the node's verdicts say so: LongSteps is left out there.",
        evidence="`bottleneck_train_long_step_excess_seconds_total` and `bottleneck_train_long_steps_total` "
        "against `bottleneck_train_step_median_seconds` (the tail: excess per long step over the median), "
        "`bottleneck_train_step_duration_seconds` (the histogram), "
        "`job_rank_phase:bottleneck_train_phase_seconds:per_step_rate${rate_window}` (the phase that grows).",
        compares=("long_steps",), threshold="long_step_lost_ratio",
        scope=RANK, unit="percentunit", group="training",
    ),
    Heuristic(
        name="SlowStart",
        verdict="slow start",
        expr="bottleneck_train_startup_seconds > ${startup_max_seconds}",
        for_="5m",
        summary="Job {{ $labels.training_job }} took long from its start to its first step.",
        description="Rank {{ $labels.rank }} of job {{ $labels.training_job }} on {{ $labels.instance }} took "
        "{{ $value | humanizeDuration }} from its process's start to the end of its first step (threshold "
        "${startup_max_seconds} s), while holding its GPUs.",
        advice="Find where the start-up goes (py-spy record --pid PID during it, or python -X importtime): "
        "index the dataset once and cache the index (or use a format that needs none: WebDataset shards, "
        "Arrow); cache torch.compile's artifacts (TORCHINDUCTOR_CACHE_DIR on persistent storage, "
        "torch.compiler.save_cache_artifacts) or compile less (mode, regional compilation); load checkpoints "
        "from local storage, with mmap=True; avoid downloading models and data at start.",
        meaning="Everything before the first step finishes holds the job's accelerators for nothing: imports, "
        "building the dataset (listing and indexing millions of files), loading a checkpoint, the first "
        "step's compilation and warm-up. The hook measures it from the process's start (/proc/self/stat) to "
        "the end of the first step. The series exists from the first step on: a start-up still under way "
        "shows nothing yet (the exporter's process list shows the process).",
        evidence="`bottleneck_train_startup_seconds`, `bottleneck_training_process_info` (the process, up before "
        "its first step).",
        compares=(), threshold="startup_max_seconds",
        scope=RANK, unit="s", group="training", tiers=(Tier("info"),),
    ),
    Heuristic(
        name="KeepsRecompiling",
        verdict="torch.compile keeps recompiling",
        expr="<<recompiles>> > ${recompiles_per_minute}",
        # Longer than a warm-up's recompilations keep the 5-minute rate up: those end within the first minutes.
        for_="15m",
        summary="Rank {{ $labels.rank }} of job {{ $labels.training_job }} keeps recompiling its torch.compile "
        "graphs.",
        description="Rank {{ $labels.rank }} of job {{ $labels.training_job }} on {{ $labels.instance }} recompiled "
        "{{ $value | humanize }} times a minute over the last ${rate_window}, long after its warm-up (threshold "
        "${recompiles_per_minute} a minute); each recompilation stops the training thread.",
        advice="Find the guard that fails (TORCH_LOGS=recompiles prints each one and why) and make the input stop "
        "changing it: compile with dynamic=True, or torch._dynamo.mark_dynamic(tensor, dim) on the dimension "
        "that varies (sequence length, batch size); pad or bucket sequences to a few lengths; drop_last=True "
        "so the last partial batch brings no new shape; pass changing Python numbers (a step count, a "
        "learning rate) as tensors. Raising torch._dynamo.config.recompile_limit only hides the cost.",
        meaning="torch.compile guards each compiled graph on what it was traced with (shapes, dtypes, Python "
        "values); an input that fails every guard is compiled again, and a frame that reaches the recompile "
        "limit (8 by default) runs uncompiled from then on. A warm-up compiles a few times (the first shapes, "
        "automatic dynamic shapes on the second, an evaluation pass, an epoch's last batch) and then stops; a "
        "job that still recompiles after it feeds shapes or values that keep changing, and pays seconds of "
        "compilation for each.",
        evidence="`bottleneck_train_recompiles_total` and `bottleneck_train_compiles_total` (dynamo's compile "
        "callbacks, counted by the hook), `bottleneck_train_compile_seconds_total` (the training thread's "
        "time in them) against `bottleneck_train_phase_seconds_total{phase=\"step\"}`.",
        compares=("recompiles",), threshold="recompiles_per_minute",
        scope=RANK, unit="count:recompiles/min", group="training",
    ),
    Heuristic(
        name="MemoryGrowing",
        verdict="memory grows (leak)",
        expr="(\n  <<rss_growth>>\n  > on (instance) group_left ()\n  <<memory_growth_limit>>\n)\n"
        "+ on (instance, process, local_rank) group_left (training_job) (0 * bottleneck_training_process_info)",
        for_="15m",
        summary="The memory of training process {{ $labels.process }} on {{ $labels.instance }} keeps growing.",
        description="The resident memory of {{ $labels.process }} (local rank {{ $labels.local_rank }}, job "
        "{{ $labels.training_job }}) on {{ $labels.instance }} grows {{ $value | humanize1024 }}B per second, "
        "more than ${memory_growth_ratio_per_hour:pct} of the node's memory an hour: at this pace the node's "
        "available memory runs out in the time `instance_process:bottleneck_training_memory_exhausted_in_"
        "seconds:deriv${rate_window}` shows.",
        advice="Look for tensors kept across steps with their autograd graph: `losses.append(loss)` or "
        "`total += loss` keep every step's graph alive; keep `loss.item()` (or `loss.detach()`) instead. "
        "Also: metrics or predictions collected in a list for the whole epoch, a cache without a bound, "
        "DataLoader workers that copy a Python list dataset page by page (copy-on-read: use numpy arrays).",
        meaning="A process whose memory rises step after step, steadily, is leaking: by far the most common "
        "cause in PyTorch is the oldest entry of its FAQ, tensors that still hold their autograd graph kept "
        "in a list or a running sum, so each step's activations are never freed. The rate is the least-squares "
        "slope of the process's resident memory over the window (a warm-up jump that levels off does not "
        "hold for the alert's 15 minutes); SageMaker's GPUMemoryIncrease fires on a rise of 5 points, TraceML "
        "calls it memory creep. The threshold is a share of the node's memory per hour, so a leak that would "
        "fill the node within a day (5 % an hour: 20 hours) is named while the job still runs. diagnose and "
        "run, which do not wait for the 15 minutes, judge it over at least 4 minutes of samples: over less, a "
        "start-up's growth (the first epoch's allocations) or one step's noise reads as a leak.",
        evidence="`bottleneck_training_resident_memory_bytes` (the trainer and its DataLoader workers, from "
        "/proc), `bottleneck_memory_available_bytes`, "
        "`instance_process:bottleneck_training_memory_exhausted_in_seconds:deriv${rate_window}`; on CUDA, "
        "`bottleneck_train_cuda_memory_allocated_bytes` per rank.",
        # No threshold line on the dashboards: the limit is a record of each node's memory, not one number.
        scope=("instance", "process", "local_rank"), unit="Bps", group="training", sampled_over="4m",
    ),
    Heuristic(
        name="GpuMemoryGrowing",
        verdict="GPU memory grows (leak)",
        expr="<<cuda_growth>>\n> ${gpu_memory_growth_ratio_per_hour} * bottleneck_train_cuda_memory_total_bytes / 3600",
        # A warm-up's growth (the optimizer's state created at the first step, the caching allocator filling,
        # cuDNN's and torch.compile's workspaces) ends within minutes: the 5-minute slope is back at zero one
        # window after it ends, so a warm-up shorter than for: less the window (10 minutes) never holds it.
        for_="15m",
        summary="The CUDA memory of rank {{ $labels.rank }} of job {{ $labels.training_job }} keeps growing.",
        description="The memory the tensors of rank {{ $labels.rank }} of job {{ $labels.training_job }} on "
        "{{ $labels.instance }} hold on its GPU grows {{ $value | humanize1024 }}B per second, more than "
        "${gpu_memory_growth_ratio_per_hour:pct} of the device's memory an hour: at this pace it runs out of GPU "
        "memory (CUDA out of memory) in the time `job_rank:bottleneck_train_cuda_memory_exhausted_in_seconds:"
        "deriv${rate_window}` shows.",
        advice="Look for tensors on the GPU kept across steps: `losses.append(loss)` or `total += loss` keep every "
        "step's autograd graph and its activations alive; keep `loss.item()` or `loss.detach()` (at logging "
        "time, not every step: `.item()` waits for the GPU). Also: outputs, hidden states or predictions "
        "collected in a list for the whole epoch (detach them and move them off the GPU, or keep a running "
        "metric), a cache of activations or embeddings that only grows, a `retain_graph=True` backward. "
        "`torch.cuda.empty_cache()` is no fix: it returns the allocator's unused cached blocks, not memory "
        "tensors still hold.",
        meaning="A rank whose tensors hold more GPU memory at every step end is leaking on the device: the same "
        "classic leak as the host's (PyTorch FAQ: tensors kept with their autograd graph), or results kept on the "
        "GPU. The job ends in a CUDA out-of-memory error, after hours of training lost since its last "
        "checkpoint, often with allocator retries first (BottleneckCudaAllocatorRetrying). The rate is the "
        "least-squares slope of `torch.cuda.memory_allocated()` as the hook reads it at step ends, over the "
        "window; the memory the caching allocator reserves is not judged (it fills in the first minutes and "
        "stays). The threshold is a share of the rank's own device (a MIG instance's own memory) per hour; a "
        "growth only in the first minutes (optimizer state, the allocator's warm-up) does not hold for the "
        "alert's 15 minutes (diagnose and run, which do not wait for it, judge it over at least 4 minutes of "
        "samples). SageMaker's GPUMemoryIncrease fires on a rise of 5 points; TraceML calls it memory creep.",
        evidence="`bottleneck_train_cuda_memory_allocated_bytes` and `bottleneck_train_cuda_memory_total_bytes` per "
        "rank, `job_rank:bottleneck_train_cuda_memory_exhausted_in_seconds:deriv${rate_window}`, "
        "`bottleneck_train_cuda_memory_reserved_bytes`, `bottleneck_train_cuda_allocator_retries_total`; the "
        "node's `bottleneck_gpu_memory_used_bytes` for other processes on the GPU.",
        # No threshold line on the dashboards: the limit is a share of each rank's device, not one number.
        scope=RANK, unit="Bps", group="training", sampled_over="4m",
    ),
    Heuristic(
        name="CudaAllocatorRetrying",
        verdict="CUDA allocator retrying (fragmentation)",
        expr="<<cuda_alloc_retries>> * 60 > ${cuda_alloc_retries_per_minute}",
        for_="10m",
        summary="Rank {{ $labels.rank }} of job {{ $labels.training_job }} keeps hitting the CUDA memory limit.",
        description="The CUDA caching allocator of rank {{ $labels.rank }} of job {{ $labels.training_job }} on "
        "{{ $labels.instance }} retries {{ $value | humanize }} allocations a minute after freeing its cache "
        "(threshold ${cuda_alloc_retries_per_minute}).",
        advice="Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (fragmentation), lower the batch size or "
        "use activation checkpointing or AMP; avoid shapes that change every step (pad to a few sizes); do "
        "not call torch.cuda.empty_cache() every step.",
        meaning="A cudaMalloc failed, so the caching allocator released every cached block it could "
        "(cudaFree synchronises the device) and tried again: the job runs at the edge of the GPU's memory, "
        "often because the memory it holds is fragmented (reserved far above allocated). Each retry stalls "
        "the GPU; one more step of growth is an out-of-memory error.",
        evidence="`bottleneck_train_cuda_allocator_retries_total` (torch.cuda.memory_stats()'s "
        "num_alloc_retries), `bottleneck_train_cuda_allocator_ooms_total`, "
        "`job_rank:bottleneck_train_cuda_memory_unused_reserved:bytes` (reserved minus allocated).",
        compares=("cuda_alloc_retries",), threshold="cuda_alloc_retries_per_minute",
        scope=RANK, unit="count:retries/min", group="training",
    ),
    # -- setup mistakes (the TensorBoard profiler plugin's setup advice) ------------------------------------
    Heuristic(
        name="DataParallelInUse",
        verdict="DataParallel over several GPUs",
        expr="bottleneck_train_data_parallel_devices > 1",
        for_="10m",
        summary="Job {{ $labels.training_job }} trains with torch.nn.DataParallel over {{ $value | humanize }} GPUs.",
        description="Rank {{ $labels.rank }} of job {{ $labels.training_job }} on {{ $labels.instance }} wraps its "
        "model in torch.nn.DataParallel over {{ $value | humanize }} GPUs: one Python thread scatters every batch, "
        "replicates the model and gathers the outputs on the first GPU each step.",
        advice="Use DistributedDataParallel, one process per GPU (torchrun --nproc-per-node=N train.py, "
        "torch.distributed.init_process_group(\"nccl\"), DDP(model, device_ids=[local_rank]) and a "
        "DistributedSampler); PyTorch's own documentation recommends it over DataParallel even on one node.",
        meaning="DataParallel runs every GPU from one process: each step it copies the model's parameters to "
        "every GPU, splits the batch, runs the replicas in threads that share one GIL, and gathers the outputs "
        "and the gradients on the first GPU, which also holds more memory than the others. It scales poorly "
        "past two GPUs; DDP's one process per GPU with overlapped all-reduces does not have these costs. The "
        "PyTorch profiler's TensorBoard plugin recommended DDP whenever DataParallel ran on more than one "
        "GPU. A DataParallel on the CPU (no device_ids) calls the model as it is and does not count.",
        evidence="`bottleneck_train_data_parallel_devices` (len(device_ids) of the wrapper, read by the hook at "
        "the first training forward), the GPUs' utilization (`bottleneck_gpu_utilization_ratio`: the first "
        "busier than the others) and `bottleneck_train_step_duration_seconds`.",
        scope=RANK, unit="short", group="training",
    ),
    Heuristic(
        name="SlowCollectiveBackend",
        verdict="process group not on NCCL while on CUDA",
        # The share of the step with the rank's collectives in flight (the hook times DDP's and FSDP's), named
        # with the backend that carries them.
        expr="<<collective>>\n* on (instance, training_job, rank) group_left (process_group_backend)\n"
        "max without (parameters_dtype) (\n"
        '  bottleneck_train_setup_info{process_group_backend!="", process_group_backend!~".*nccl.*"}\n)\n'
        'and on (instance, training_job, rank) bottleneck_train_info{device=~"cuda.*", world_size!="1"}',
        for_="10m",
        summary="Job {{ $labels.training_job }} trains on CUDA with a {{ $labels.process_group_backend }} process "
        "group.",
        description="Rank {{ $labels.rank }} of job {{ $labels.training_job }} on {{ $labels.instance }} keeps its "
        "model on a CUDA device while the process group its DistributedDataParallel all-reduces over (the "
        "default group without DDP) runs on {{ $labels.process_group_backend }}, not NCCL: its collectives, in flight "
        "{{ $value | humanizePercentage }} of every step, copy their tensors to the host and back.",
        advice="Initialise the process group with NCCL for CUDA tensors: "
        "torch.distributed.init_process_group(\"nccl\") (or \"cpu:gloo,cuda:nccl\" where CPU tensors need "
        "collectives too); with torchrun set no backend and PyTorch picks NCCL for CUDA. Where DDP is given a "
        "group of its own (DistributedDataParallel(process_group=...)), make that group with backend=\"nccl\".",
        meaning="Gloo (and MPI without CUDA awareness) all-reduce CUDA tensors by staging them through host "
        "memory over TCP, far slower than NCCL's GPU-direct rings over NVLink, PCIe or InfiniBand, and they "
        "hold the training thread while they do. The PyTorch profiler's TensorBoard plugin recommended NCCL for "
        "any DDP job on CUDA that was not on it. The hook reads torch.distributed.get_backend() of the group "
        "the model's DistributedDataParallel all-reduces over (its process_group=, which need not be the "
        "default group; the default group without DDP) when the model first runs and at each DataLoader "
        "iterator; a backend string that names nccl for CUDA "
        "(\"cpu:gloo,cuda:nccl\") is fine, and a job of one rank has no collectives to slow. The value is the "
        "share of the step with the rank's collectives in flight, where the hook times them (DDP, FSDP): a "
        "process group that carries none of the training's collectives does not count.",
        evidence="`bottleneck_train_setup_info` (label process_group_backend), `bottleneck_train_info` (device, "
        "world_size), `bottleneck_train_phase_seconds_total{phase=\"collective\"}` where the hook times the "
        "collectives.",
        scope=RANK, unit="percentunit", group="training",
    ),
    Heuristic(
        name="NoMixedPrecision",
        verdict="no mixed precision on a GPU with Tensor Cores",
        # Named with torch's float32 matmul precision: TF32 ("high") puts float32 matmuls on the Tensor Cores,
        # yet bfloat16 autocast still doubles their throughput and halves the activations' memory traffic.
        expr="(\n  bottleneck_train_cuda_compute_capability >= ${tensor_core_capability}\n"
        "  and on (instance, training_job, rank) <<autocast_share>> == 0\n)\n"
        "+ on (instance, training_job, rank) group_left (float32_matmul_precision)\n"
        '(0 * bottleneck_train_setup_info{parameters_dtype="float32"})\n'
        # Where GPM measures Tensor-Core activity on the node and the job's float32 matmuls are exact, busy
        # Tensor Cores say it uses them in lower precision the hook cannot see (an autocast inside a compiled
        # model); with TF32 on, they are the TF32 matmuls.
        "unless on (instance, training_job, rank) (\n"
        '  bottleneck_train_setup_info{float32_matmul_precision!~"high|medium"}\n'
        "  and on (instance) <<tensor_core_use>> > ${tensor_activity_ratio}\n)",
        for_="30m",
        summary="Job {{ $labels.training_job }} trains in float32 on a GPU with Tensor Cores.",
        description="No training forward of rank {{ $labels.rank }} of job {{ $labels.training_job }} on "
        "{{ $labels.instance }} ran under torch.autocast over the last ${rate_window}, with float32 parameters, "
        "on a GPU of compute capability {{ $value | humanize }} (Tensor Cores from ${tensor_core_capability}); "
        "torch's float32 matmul precision: {{ $labels.float32_matmul_precision }} (\"high\" or \"medium\": TF32 "
        "or bfloat16 matmuls on the Tensor Cores already, which autocast to bfloat16 would still speed up, "
        "with half the activations' memory traffic).",
        advice="Run the forward and the loss under torch.autocast(\"cuda\", dtype=torch.bfloat16) (Ampere and "
        "later; float16 with a torch.amp.GradScaler on Volta and Turing); Lightning: precision=\"bf16-mixed\", "
        "Hugging Face: bf16=True. Where the verdict's float32_matmul_precision is \"highest\" and autocast "
        "cannot be used yet, at least allow TF32 matmuls (torch.set_float32_matmul_precision(\"high\")); where "
        "it is \"high\" or \"medium\", TF32 is on already and autocast is the step left.",
        meaning="Tensor Cores run float16 and bfloat16 matrix multiplications (and TF32 on Ampere and later) "
        "several times faster than float32 on the CUDA cores, and halve the activations' memory; a job that "
        "trains in plain float32 leaves most of the GPU's throughput unused. The PyTorch profiler's TensorBoard "
        "plugin recommended AMP when Tensor-Core-eligible kernels ran without Tensor Cores. The hook looks at "
        "the first training forward after each datagram (torch.is_autocast_enabled, outside the model and "
        "inside its first layer, so an autocast the model's own forward enters counts, except in a "
        "torch.compile'd model, where a hook would cost a recompilation); models kept in "
        "bfloat16 or float16 need no autocast and do not count. TF32 (torch.get_float32_matmul_precision() "
        "\"high\", or torch.backends.cuda.matmul.allow_tf32) does not silence it: it runs float32 matmuls on "
        "the Tensor Cores at about half bfloat16's rate and leaves every activation in float32, twice the "
        "memory and memory traffic, so the verdict names the precision the hook read. Where the GPU collector "
        "reads NVML GPM (Hopper and later) and the job's float32 matmuls are exact (\"highest\"), Tensor-Core "
        "activity above ${tensor_activity_ratio:pct} on the node says it computes in lower precision where "
        "the hook cannot see it, and keeps the verdict silent.",
        evidence="`bottleneck_train_autocast_forwards_total` against `bottleneck_train_sampled_forwards_total`, "
        "`bottleneck_train_cuda_compute_capability`, `bottleneck_train_setup_info` (labels parameters_dtype and "
        "float32_matmul_precision), "
        "`bottleneck_gpu_tensor_activity_ratio` where GPM is measured.",
        scope=RANK, unit="short", group="training", tiers=(Tier("info"),),
    ),
    Heuristic(
        name="LoaderWorkersRestarted",
        verdict="DataLoader workers re-forked every epoch",
        expr="<<worker_starts>> > ${loader_worker_starts_per_hour}",
        for_="15m",
        summary="Rank {{ $labels.rank }} of job {{ $labels.training_job }} starts new DataLoader workers every "
        "epoch.",
        description="Rank {{ $labels.rank }} of job {{ $labels.training_job }} on {{ $labels.instance }} started "
        "{{ $value | humanize }} sets of DataLoader workers an hour over the last ${rate_window} (threshold "
        "${loader_worker_starts_per_hour}): each start forks the workers again and waits for their first "
        "batches.",
        advice="Build the DataLoader once, outside the epoch loop, with persistent_workers=True: its workers and "
        "their prefetched batches then carry over from one epoch to the next. Where a new loader per epoch is "
        "needed (a new shard list), keep the workers' start cheap: a light dataset object (open files in "
        "the worker, worker_init_fn), and prefetch_factor to refill fast.",
        meaning="Without persistent_workers (the default) every iter(loader), once per epoch, forks num_workers "
        "new processes, pickles the dataset to them under spawn or forkserver, and waits until they have "
        "prefetched their first batches; a loader built anew every epoch does the same even with "
        "persistent_workers=True. With short epochs that start-up comes back every few minutes and shows as "
        "data wait at each epoch's start (and as long steps). The hook counts the iterators whose worker PIDs "
        "it had not seen; a training loader and an evaluation loader iterated in turn keep theirs.",
        evidence="`bottleneck_train_dataloader_worker_starts_total` against "
        "`bottleneck_train_dataloader_iterators_total`, `bottleneck_train_dataloader_persistent_workers` and "
        "`..._num_workers`, `bottleneck_train_long_steps_total` (the first steps of each epoch).",
        compares=("worker_starts",), threshold="loader_worker_starts_per_hour",
        scope=RANK, unit="count:starts/h", group="training", tiers=(Tier("info"),),
    ),
    Heuristic(
        name="TrainingStalled",
        verdict="training stalled",
        # The last step's age read once: past the floor first, then past the factor of the mean step.
        expr="(time() - bottleneck_train_last_step_timestamp_seconds > ${stall_min_seconds})\n"
        "> ${stall_factor}\n"
        "  * (bottleneck_train_step_duration_seconds_sum / bottleneck_train_step_duration_seconds_count)\n"
        "and on (instance, training_job) count by (instance, training_job) (bottleneck_training_process_info)",
        for_="2m",
        summary="Rank {{ $labels.rank }} of job {{ $labels.training_job }} has stopped making progress.",
        description="Rank {{ $labels.rank }} of job {{ $labels.training_job }} on {{ $labels.instance }} finished "
        "no step for {{ $value | humanizeDuration }}, more than ${stall_factor} times its mean step time, while its "
        "process is alive (critical after ${stall_factor_critical} times and ${stall_min_seconds_critical} s).",
        advice="Probably a hang: dump the Python stacks (py-spy dump --pid PID), check NCCL (NCCL_DEBUG=INFO, "
        "TORCH_NCCL_ASYNC_ERROR_HANDLING), look for a dead peer rank or a full disk.",
        meaning="The process is alive but no optimizer step finishes: a deadlock in a collective, a dead "
        "peer, a stuck DataLoader worker or a filesystem that stopped answering. A hung rank sends nothing; "
        "the push receiver keeps its series while its process runs (Unix socket), so the alert holds until "
        "the process exits. Critical once the hang has lasted long enough to rule out a slow checkpoint.",
        evidence="`bottleneck_train_last_step_timestamp_seconds`, `bottleneck_train_step_duration_seconds`, "
        "`bottleneck_training_process_info`, the other ranks of the job.",
        scope=RANK, unit="s", group="training",
        tiers=(Tier("warning"), Tier("critical", {"stall_factor": "stall_factor_critical",
                                                  "stall_min_seconds": "stall_min_seconds_critical"})),
    ),
)

AREA = Area("training", RECORDS, heuristics=HEURISTICS)
