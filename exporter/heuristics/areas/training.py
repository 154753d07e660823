"""The training area: what one job's ranks say about where their steps go.

Reads the push receiver's per-rank series (``bottleneck_train_*``: phases, steps, GPU busy time, the last
step's time), and for the input-bound and IO-bound verdicts the node's storage and loader records. Exposes
``AREA``: the ``job_rank`` recording rules and the verdicts of the alert group ``bottleneck-training``
(input-bound, IO-bound, launch-bound, GPU imbalance, straggler, communication-bound, stalled)::

    job_rank:bottleneck_train_data_wait:ratio_rate5m{instance="gpu-node-1:9847",rank="0",training_job="resnet50"} 0.8
    ALERTS{alertname="BottleneckInputBound",alertstate="firing",rank="0",severity="warning",training_job="resnet50"} 1

Its scenarios are in ``bottleneck_exporter.heuristics.scenarios.training``.
"""

from __future__ import annotations

from bottleneck_exporter.heuristics.model import RANK, Area, Heuristic, Record, Tier
from bottleneck_exporter.heuristics.parameters import W
from bottleneck_exporter.heuristics.sources import NODE_EXPORTER

RECORDS: tuple[Record, ...] = (
    Record("data_wait", f"job_rank:bottleneck_train_data_wait:ratio_rate{W}",
           f'sum without (phase) (rate(bottleneck_train_phase_seconds_total{{phase="data_wait"}}[{W}]))\n'
           f'/\nsum without (phase) (rate(bottleneck_train_phase_seconds_total{{phase="step"}}[{W}]))',
           "training"),
    Record("step_mean", f"job_rank:bottleneck_train_step_seconds:mean{W}",
           f"rate(bottleneck_train_step_duration_seconds_sum[{W}])\n"
           f"/\nrate(bottleneck_train_step_duration_seconds_count[{W}])", "training"),
    # Host seconds per step this rank waits in its collectives: the hook's collective phase where the rank
    # reports it, else backward (DDP's all-reduce wait sits inside backward, so backward is the proxy).
    Record("collective_wait", f"job_rank:bottleneck_train_collective_wait_seconds:mean{W}",
           f'(\n  sum without (phase) (rate(bottleneck_train_phase_seconds_total{{phase="collective"}}[{W}]))\n'
           f'  or\n  sum without (phase) (rate(bottleneck_train_phase_seconds_total{{phase="backward"}}[{W}]))\n)'
           f"\n/\nrate(bottleneck_train_steps_total[{W}])", "training"),
    Record("gpu_busy", f"job_rank:bottleneck_train_gpu_busy:ratio_rate{W}",
           f"rate(bottleneck_train_gpu_busy_seconds_total[{W}])\n/\n"
           f"(rate(bottleneck_train_gpu_busy_seconds_total[{W}]) + rate(bottleneck_train_gpu_idle_seconds_total[{W}]))",
           "training"),
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
           f'rate(bottleneck_train_phase_seconds_total{{phase=~"data_wait|forward|optimizer"}}[{W}])\n'
           f"/ ignoring (phase) group_left ()\nrate(bottleneck_train_steps_total[{W}])\nor\nlabel_replace(\n"
           f'  (\n    rate(bottleneck_train_phase_seconds_total{{phase="backward"}}[{W}])\n'
           f'    - ignoring (phase)\n    rate(bottleneck_train_phase_seconds_total{{phase="collective"}}[{W}])\n  )\n'
           f'  / rate(bottleneck_train_steps_total[{W}]),\n  "phase", "backward", "phase", ".*"\n)\nor\n'
           f'rate(bottleneck_train_phase_seconds_total{{phase="backward"}}[{W}])\n'
           f"/ ignoring (phase) group_left ()\nrate(bottleneck_train_steps_total[{W}])\nor\nlabel_replace(\n"
           f'  (\n    sum without (phase) (rate(bottleneck_train_phase_seconds_total{{phase="step"}}[{W}]))\n'
           f'    - sum without (phase) (rate(bottleneck_train_phase_seconds_total{{phase=~"data_wait|forward|'
           f'backward|optimizer"}}[{W}]))\n  )\n  / rate(bottleneck_train_steps_total[{W}]),\n'
           '  "phase", "between_phases", "phase", ".*"\n)', "training"),
    # Each place's seconds per step above the job's median for it, plus a nanosecond-scale priority per
    # place, so that equal excesses (all zero on a rank like its peers) still have exactly one largest.
    Record("phase_excess", f"job_rank_phase:bottleneck_train_phase_seconds:excess_over_job_median_rate{W}",
           "<<phase_per_step>>\n- on (training_job, phase) group_left ()\n"
           "quantile by (training_job, phase) (0.5, <<phase_per_step>>)"
           "\n+ on (phase) group_left ()\n(\n" + "\n  or ".join(
               f'  label_replace(vector({priority}e-09), "phase", "{place}", "phase", ".*")'.lstrip(" ") if i else
               f'  label_replace(vector({priority}e-09), "phase", "{place}", "phase", ".*")'
               for i, (priority, place) in enumerate(((5, "between_phases"), (4, "data_wait"), (3, "forward"),
                                                      (2, "backward"), (1, "optimizer")))) + "\n)", "training"),
    # Where each rank's time goes beyond its peers': the place with the largest excess (label phase).
    Record("slow_phase", f"job_rank:bottleneck_train_slow_phase:excess_seconds_rate{W}",
           "<<phase_excess>>\n== on (instance, training_job, rank) group_left ()\n"
           "max by (instance, training_job, rank) (<<phase_excess>>)", "training"),
    Record("collective", f"job_rank:bottleneck_train_collective:ratio_rate{W}",
           f'sum without (phase) (rate(bottleneck_train_phase_seconds_total{{phase="collective"}}[{W}]))\n'
           f'/\nsum without (phase) (rate(bottleneck_train_phase_seconds_total{{phase="step"}}[{W}]))',
           "training"),
    # The share of the step the training thread waits for collectives that compute did not hide (the part
    # of the collective phase after backward's last launch), where the hook measures it (gloo DDP).
    Record("exposed_collective", f"job_rank:bottleneck_train_collective_exposed:ratio_rate{W}",
           f"rate(bottleneck_train_collective_exposed_seconds_total[{W}])\n"
           f'/\nsum without (phase) (rate(bottleneck_train_phase_seconds_total{{phase="step"}}[{W}]))',
           "training"),
    # HTA's communication-computation overlap: the share of the collectives' time during which the rank
    # computed (in flight, not waited for). The hook's exposed time is part of the time in flight.
    Record("collective_overlap", f"job_rank:bottleneck_train_collective_overlap:ratio_rate{W}",
           f"1 - rate(bottleneck_train_collective_exposed_seconds_total[{W}])\n"
           f'/ sum without (phase) (rate(bottleneck_train_phase_seconds_total{{phase="collective"}}[{W}]))',
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
    # CUDA allocator retries per second: each a cudaMalloc that failed, after which the caching allocator
    # freed its cached blocks (synchronising the device) and tried again.
    Record("cuda_alloc_retries", f"job_rank:bottleneck_train_cuda_allocator_retries:rate{W}",
           f"rate(bottleneck_train_cuda_allocator_retries_total[{W}])", "training"),
    # Memory the caching allocator holds that no tensor uses: its fragmentation.
    Record("cuda_unused_reserved", "job_rank:bottleneck_train_cuda_memory_unused_reserved:bytes",
           "bottleneck_train_cuda_memory_reserved_bytes - bottleneck_train_cuda_memory_allocated_bytes",
           "training"),
)


# The node's storage holds the input back and the loaders are not what is busy.
IO_BLOCKED = (
    "(\n    <<io_pressure>> > ${io_pressure_ratio}\n"
    "    or on (instance) max by (instance) (<<disk_busy>>) > ${disk_busy_ratio}\n  )\n"
    "  unless on (instance) max by (instance) (<<loader_busiest>>) >= ${loader_busy_ratio}"
)


HEURISTICS: tuple[Heuristic, ...] = (
    Heuristic(
        name="InputBound",
        verdict="input-bound (data loading)",
        expr="<<data_wait>> > ${data_wait_ratio}\nunless on (instance) (\n  " + IO_BLOCKED + "\n)",
        for_="5m",
        summary="Training job {{ $labels.training_job }} is input-bound: the GPU waits for the DataLoader.",
        description="Rank {{ $labels.rank }} of job {{ $labels.training_job }} on {{ $labels.instance }} waits for the "
        "next batch {{ $value | humanizePercentage }} of every step (threshold ${data_wait_ratio:pct}).",
        advice="Raise DataLoader num_workers (4, 8, 16; not above the free cores), set pin_memory=True, "
        "persistent_workers=True and a prefetch_factor; make transforms cheaper or move augmentation to "
        "the GPU.",
        meaning="The training loop spends most of each step inside the DataLoader iterator: the model is "
        "fed slower than it computes. The classic cause is num_workers=0, where the trainer's main thread "
        "decodes and augments every batch itself while the GPU sits idle.",
        evidence="`bottleneck_train_phase_seconds_total{phase=\"data_wait\"}` against `phase=\"step\"` per "
        "rank; the DataLoader settings in `bottleneck_train_dataloader_num_workers` and "
        "`..._pin_memory`; the loader threads' CPU in `bottleneck_training_busiest_thread_cpu_ratio`. When "
        "the node's storage is the cause, BottleneckIoBound fires instead.",
        compares=('data_wait',), threshold="data_wait_ratio",
        scope=RANK, unit="percentunit", group="training",
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
        scope=RANK, unit="short", group="training",
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
        "fill the node within a day (5 % an hour: 20 hours) is named while the job still runs.",
        evidence="`bottleneck_training_resident_memory_bytes` (the trainer and its DataLoader workers, from "
        "/proc), `bottleneck_memory_available_bytes`, "
        "`instance_process:bottleneck_training_memory_exhausted_in_seconds:deriv${rate_window}`; on CUDA, "
        "`bottleneck_train_cuda_memory_allocated_bytes` per rank.",
        # No threshold line on the dashboards: the limit is a record of each node's memory, not one number.
        scope=("instance", "process", "local_rank"), unit="Bps", group="training",
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
        scope=RANK, unit="short", group="training",
    ),
    Heuristic(
        name="TrainingStalled",
        verdict="training stalled",
        expr="(time() - bottleneck_train_last_step_timestamp_seconds)\n"
        "> ${stall_factor}\n"
        "  * (bottleneck_train_step_duration_seconds_sum / bottleneck_train_step_duration_seconds_count)\n"
        "and (time() - bottleneck_train_last_step_timestamp_seconds) > ${stall_min_seconds}\n"
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
