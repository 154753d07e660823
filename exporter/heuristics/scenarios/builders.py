"""Our collectors' series as the scenario table writes them: a node (host collectors), a GPU (the gpu
collector), a training rank (the hook's telemetry, through the push receiver) and its setup, a training process (the
training collector), XID and ECC counters, collector success and the scrape's ``up``.

One builder per source of series, with the values a healthy node shows unless a scenario says otherwise::

    node(t, disk_busy=0.95) + rank(t, data_wait=0.4) + process(t, worker=0.2)
    rank(t, world_size=4) + setup(t, backend="gloo")
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from bottleneck_exporter.heuristics.scenarios.series import (
    EXPORTER_JOB,
    INSTANCE,
    TRAIN_JOB,
    Series,
    Timeline,
    Track,
    counter,
    gauge,
    pattern_value,
    series,
)


def node(tl: Timeline, instance: str = INSTANCE, before: Mapping[str, float] | None = None,
         **values: float) -> list[Series]:
    """A node as the exporter's cpu, memory, pressure, disk and network collectors expose it."""
    v = {"cpus": 8, "busy": 0.3, "iowait": 0.02, "load": 2.0, "ctx_per_cpu": 2000, "mem_available": 0.5,
         "swap": 0.0, "io_pressure": 0.05, "cpu_pressure": 0.1, "memory_pressure": 0.0, "disk_busy": 0.2,
         "nic": 0.1, "nic_speed": 1.25e9, **values}
    b = {**v, **(before or {})}
    target = {"instance": instance, "job": EXPORTER_JOB}
    out: list[Series] = []
    cpus = [str(cpu) for cpu in range(int(v["cpus"]))]  # one series per CPU, as node_exporter counts them
    # Seconds per second of one CPU in each mode, and the initial counter value; the cpu line of /proc/stat
    # (bottleneck_cpu_all_seconds_total) is the sum of the cpuN lines.
    modes = {"user": (v["busy"] * 0.8, b["busy"] * 0.8, 1000), "system": (v["busy"] * 0.2, b["busy"] * 0.2, 1000),
             "iowait": (v["iowait"], b["iowait"], 10),
             "idle": (1 - v["busy"] - v["iowait"], 1 - b["busy"] - b["iowait"], 5000)}
    for mode, (now, then, initial) in modes.items():
        for cpu in cpus:
            out.append(series("bottleneck_cpu_seconds_total", {**target, "cpu": cpu, "mode": mode},
                              counter(tl, now, then, initial=initial)))
        out.append(series("bottleneck_cpu_all_seconds_total", {**target, "mode": mode},
                          counter(tl, now * len(cpus), then * len(cpus), initial=initial * len(cpus))))
    total = 64 * 2**30
    out += [
        series("bottleneck_cpus", target, gauge(tl, v["cpus"], b["cpus"])),
        series("bottleneck_load1", target, gauge(tl, v["load"], b["load"])),
        series("bottleneck_context_switches_total", target,
               counter(tl, v["ctx_per_cpu"] * v["cpus"], b["ctx_per_cpu"] * b["cpus"], initial=10**6)),
        series("bottleneck_memory_total_bytes", target, gauge(tl, total)),
        series("bottleneck_memory_available_bytes", target,
               gauge(tl, round(total * v["mem_available"]), round(total * b["mem_available"]))),
        series("bottleneck_memory_swapped_in_pages_total", target, counter(tl, v["swap"] / 2, b["swap"] / 2)),
        series("bottleneck_memory_swapped_out_pages_total", target, counter(tl, v["swap"] / 2, b["swap"] / 2)),
        series("bottleneck_pressure_seconds_total", {**target, "resource": "io", "kind": "some"},
               counter(tl, v["io_pressure"], b["io_pressure"], initial=100)),
        series("bottleneck_pressure_seconds_total", {**target, "resource": "cpu", "kind": "some"},
               counter(tl, v["cpu_pressure"], b["cpu_pressure"], initial=100)),
        series("bottleneck_pressure_seconds_total", {**target, "resource": "memory", "kind": "some"},
               counter(tl, v["memory_pressure"], b["memory_pressure"], initial=100)),
        series("bottleneck_disk_io_time_seconds_total", {**target, "device": "nvme0n1"},
               counter(tl, v["disk_busy"], b["disk_busy"], initial=500)),
        series("bottleneck_disk_io_time_seconds_total", {**target, "device": "sda"},
               counter(tl, 0.01, 0.01, initial=500)),
        series("bottleneck_network_receive_bytes_total", {**target, "device": "eth0"},
               counter(tl, v["nic"] * v["nic_speed"], b["nic"] * b["nic_speed"], initial=10**9)),
        series("bottleneck_network_transmit_bytes_total", {**target, "device": "eth0"},
               counter(tl, 0.05 * v["nic_speed"], 0.05 * b["nic_speed"], initial=10**9)),
        series("bottleneck_network_speed_bytes", {**target, "device": "eth0"}, gauge(tl, v["nic_speed"])),
        series("up", target, gauge(tl, 1)),
    ]
    if "runqueue" in values:  # seconds waited per second per CPU; /proc/schedstat is missing in some containers
        out += [series("bottleneck_cpu_runqueue_wait_seconds_total", {**target, "cpu": cpu},
                       counter(tl, v["runqueue"], b["runqueue"], initial=50))
                for cpu in cpus]
        out.append(series("bottleneck_cpu_all_runqueue_wait_seconds_total", target,
                          counter(tl, v["runqueue"] * len(cpus), b["runqueue"] * len(cpus), initial=50 * len(cpus))))
    return out


def gpu(tl: Timeline, index: str = "0", instance: str = INSTANCE, before: Mapping[str, float] | None = None,
        **values: float) -> list[Series]:
    """One GPU as the gpu collector exposes it (NVML)."""
    v = {"util": 0.9, "mem": 0.6, "idle_samples": 0.02, "busy_samples": 0.85, "thermal": 0.0,
         "temp": 65, "slowdown": 90, "gen": 4, "width": 16, "up": 1, **values}
    b = {**v, **(before or {})}
    labels = {"instance": instance, "job": EXPORTER_JOB, "gpu": index, "uuid": f"GPU-5e1f7c3a-000{index}"}
    total = 80 * 2**30
    per_minute = 360  # NVML keeps about six GPU-Util samples a second

    def samples_at_or_below(share_of: Callable[[Mapping[str, float]], float]) -> Track:
        return counter(tl, share_of(v) * per_minute / 60, share_of(b) * per_minute / 60)

    out = [
        series("bottleneck_gpu_up", labels, gauge(tl, v["up"], b["up"])),
        series("bottleneck_gpu_utilization_ratio", labels, gauge(tl, v["util"], b["util"])),
        series("bottleneck_gpu_memory_total_bytes", labels, gauge(tl, total)),
        series("bottleneck_gpu_memory_used_bytes", labels,
               gauge(tl, round(total * v["mem"]), round(total * b["mem"]))),
        series("bottleneck_gpu_utilization_samples_bucket", {**labels, "le": "0.05"},
               samples_at_or_below(lambda s: s["idle_samples"])),
        series("bottleneck_gpu_utilization_samples_bucket", {**labels, "le": "0.8"},
               samples_at_or_below(lambda s: 1 - s["busy_samples"])),
        series("bottleneck_gpu_utilization_samples_bucket", {**labels, "le": "+Inf"},
               samples_at_or_below(lambda s: 1.0)),
        series("bottleneck_gpu_utilization_samples_count", labels, samples_at_or_below(lambda s: 1.0)),
        series("bottleneck_gpu_temperature_celsius", labels, gauge(tl, v["temp"], b["temp"])),
        series("bottleneck_gpu_slowdown_temperature_celsius", labels, gauge(tl, v["slowdown"])),
        series("bottleneck_gpu_pcie_link_generation", labels, gauge(tl, v["gen"], b["gen"])),
        series("bottleneck_gpu_pcie_link_max_generation", labels, gauge(tl, 4)),
        series("bottleneck_gpu_pcie_link_width", labels, gauge(tl, v["width"], b["width"])),
        series("bottleneck_gpu_pcie_link_max_width", labels, gauge(tl, 16)),
        # Benign reasons are active on every busy GPU; the rules must ignore them.
        series("bottleneck_gpu_clock_event_active", {**labels, "reason": "sw_power_cap"}, gauge(tl, 1)),
        series("bottleneck_gpu_clock_event_active", {**labels, "reason": "gpu_idle"}, gauge(tl, 0)),
        series("bottleneck_gpu_clock_event_active", {**labels, "reason": "hw_thermal_slowdown"},
               [pattern_value(b["thermal"] if tl.before(m) else v["thermal"], m) for m in range(tl.length + 1)]),
        series("bottleneck_gpu_ecc_errors_total", {**labels, "type": "corrected"}, counter(tl, 0.05, 0.05)),
    ]
    if "tensor" in values:  # NVML GPM: Hopper and later only
        out.append(series("bottleneck_gpu_tensor_activity_ratio", labels, gauge(tl, v["tensor"], b["tensor"])))
    return out


def ecc_uncorrected(tl: Timeline, errors_at: Sequence[int], index: str = "0",
                    instance: str = INSTANCE) -> list[Series]:
    labels = {"instance": instance, "job": EXPORTER_JOB, "gpu": index, "uuid": f"GPU-5e1f7c3a-000{index}",
              "type": "uncorrected"}
    track: Track = []
    total = 0.0
    for m in range(tl.length + 1):
        total += 2 * errors_at.count(m)
        track.append(total)
    return [series("bottleneck_gpu_ecc_errors_total", labels, track)]


def rank(tl: Timeline, rank_: str = "0", instance: str = INSTANCE, training_job: str = TRAIN_JOB, step: float = 0.5,
         data_wait: float = 0.05, forward: float = 0.15, optimizer: float = 0.05, gpu_busy: float = 0.8,
         num_workers: int = 4, stall: tuple[int, int] | None = None, device: str = "cuda:0", between: float = 0.0,
         collective: float | None = None, namespace: str = "", pod: tuple[str, str] | None = None,
         gc: float | None = None, checkpoint: float | None = None, long_excess: float | None = None,
         startup: float | None = None, recompiles: float | None = None, warmup_recompiles: int = 0,
         exposed: float | None = None, cuda_retries: float | None = None, cuda_growth: float | None = None,
         cuda_growth_until: int | None = None, world_size: int = 1) -> list[Series]:
    """One training rank as the push receiver exposes the hook's telemetry; absent before the start.

    Times are seconds per step; backward is the rest of the step after ``between`` (the rank's own code
    outside the phases). Only where given, as only hooks that measure them report them: ``collective``
    (seconds per step in collectives, inside backward), ``exposed`` (the part of it the rank waited, not hidden
    by compute), ``cuda_retries`` (CUDA allocator retries per minute), ``cuda_growth`` (bytes per second its
    tensors' CUDA memory grows from the start until the minute ``cuda_growth_until``: 20 GiB at the start, on an
    80 GiB device, 4 GiB more reserved), ``gc`` (in full collections, generation
    2), ``checkpoint`` (in saves, between steps: part of ``between``), ``long_excess`` (long steps' time above
    the median step), ``startup`` (seconds to the first step) and torch.compile's ``recompiles`` (a minute, from
    the start on) after ``warmup_recompiles`` in the job's first minute. ``stall`` = (first minute without
    steps, minute steps resume). ``namespace``: the scrape target's (a ServiceMonitor's, the exporter's
    namespace); ``pod``: (namespace, pod) as the hook reports it from inside a pod
    (bottleneck_train_kubernetes_info)."""
    labels = {"instance": instance, "job": EXPORTER_JOB, "training_job": training_job, "rank": rank_,
              **({"namespace": namespace} if namespace else {})}

    def stalled(m: int) -> bool:
        return stall is not None and stall[0] <= m < stall[1]

    def progressing(per_second: float) -> Track:
        track: Track = []
        total = 0.0
        for m in range(tl.length + 1):
            if tl.before(m):
                track.append(None)
                continue
            if m > tl.start and not stalled(m):
                total = round(total + per_second * 60, 6)
            track.append(total)
        return track

    last_step: Track = []
    last = 0.0
    for m in range(tl.length + 1):
        if not tl.before(m) and not stalled(m):
            last = m * 60.0
        last_step.append(None if tl.before(m) else last)
    backward = round(step - data_wait - forward - optimizer - between, 9)
    phases = [("data_wait", data_wait), ("forward", forward), ("backward", backward), ("optimizer", optimizer),
              ("step", step)]
    out = [
        series("bottleneck_train_phase_seconds_total", {**labels, "phase": phase}, progressing(seconds / step))
        for phase, seconds in phases
    ]
    if collective is not None:  # seconds per step with an all-reduce in flight (overlaps backward)
        out.append(series("bottleneck_train_phase_seconds_total", {**labels, "phase": "collective"},
                          progressing(collective / step)))
    if gc is not None:  # all of it in full collections: what a gc.collect() per step gives
        out += [series("bottleneck_train_gc_seconds_total", {**labels, "generation": generation},
                       progressing(gc / step if generation == "2" else 0.0)) for generation in ("0", "1", "2")]
    if checkpoint is not None:
        out.append(series("bottleneck_train_checkpoint_seconds_total", labels, progressing(checkpoint / step)))
    if long_excess is not None:
        out.append(series("bottleneck_train_long_step_excess_seconds_total", labels,
                          progressing(long_excess / step)))
    if recompiles is not None:
        per_second = recompiles / 60
        out.append(series("bottleneck_train_recompiles_total", labels,
                          [None if value is None else value + (warmup_recompiles if m > tl.start else 0)
                           for m, value in enumerate(progressing(per_second))]))
    if startup is not None:
        out.append(series("bottleneck_train_startup_seconds", labels,
                          [None if tl.before(m) else startup for m in range(tl.length + 1)]))
    if exposed is not None:  # seconds per step waited for collectives after backward's compute
        out.append(series("bottleneck_train_collective_exposed_seconds_total", labels, progressing(exposed / step)))
    if cuda_retries is not None:
        out.append(series("bottleneck_train_cuda_allocator_retries_total", labels, progressing(cuda_retries / 60)))
    if cuda_growth is not None:
        until = cuda_growth_until if cuda_growth_until is not None else tl.length
        allocated = [None if tl.before(m) else 20 * 2**30 + cuda_growth * 60 * (min(m, until) - tl.start)
                     for m in range(tl.length + 1)]
        out += [
            series("bottleneck_train_cuda_memory_allocated_bytes", labels, allocated),
            series("bottleneck_train_cuda_memory_reserved_bytes", labels,
                   [None if value is None else value + 4 * 2**30 for value in allocated]),
            series("bottleneck_train_cuda_memory_total_bytes", labels,
                   [None if tl.before(m) else float(80 * 2**30) for m in range(tl.length + 1)]),
        ]
    out += [
        series("bottleneck_train_steps_total", labels, progressing(1 / step)),
        series("bottleneck_train_step_duration_seconds_sum", labels, progressing(1.0)),
        series("bottleneck_train_step_duration_seconds_count", labels, progressing(1 / step)),
        series("bottleneck_train_gpu_busy_seconds_total", labels, progressing(gpu_busy)),
        series("bottleneck_train_gpu_idle_seconds_total", labels, progressing(1 - gpu_busy)),
        series("bottleneck_train_last_step_timestamp_seconds", labels, last_step),
        series("bottleneck_train_dataloader_num_workers", labels,
               [None if tl.before(m) else float(num_workers) for m in range(tl.length + 1)]),
        series("bottleneck_train_info",
               {**labels, "local_rank": rank_, "world_size": str(world_size), "device": device},
               [None if tl.before(m) else 1.0 for m in range(tl.length + 1)]),
    ]
    if pod is not None:  # the hook's labels win over the target's (the ServiceMonitor's honorLabels)
        out.append(series("bottleneck_train_kubernetes_info",
                          {**labels, "namespace": pod[0], "pod": pod[1], "container": "trainer"},
                          [None if tl.before(m) else 1.0 for m in range(tl.length + 1)]))
    return out


def setup(tl: Timeline, rank_: str = "0", instance: str = INSTANCE, training_job: str = TRAIN_JOB,
          data_parallel: int = 0, backend: str = "", dtype: str = "float32", capability: float | None = 8.0,
          autocast: float = 0.0, worker_starts: float = 0.0, matmul_precision: str = "") -> list[Series]:
    """How one rank is set up, as the hook reports it (hook.setup); absent before the start. ``capability``:
    its CUDA device's (None on the CPU); ``autocast``: the share of the sampled forwards (one a second) under
    autocast; ``worker_starts``: DataLoader worker sets started an hour, after the first at the start;
    ``matmul_precision``: torch.get_float32_matmul_precision() ("high": TF32), "" where the hook sent none."""
    labels = {"instance": instance, "job": EXPORTER_JOB, "training_job": training_job, "rank": rank_}

    def present(value: float) -> Track:
        return [None if tl.before(m) else value for m in range(tl.length + 1)]

    def counted(per_second: float, initial: float = 0.0) -> Track:
        return [None if tl.before(m) else round(initial + per_second * 60 * (m - tl.start), 6)
                for m in range(tl.length + 1)]

    out = [
        # An empty label is no label (as Prometheus stores the exporter's process_group_backend="").
        series("bottleneck_train_setup_info", {**labels, "parameters_dtype": dtype,
                                               **({"process_group_backend": backend} if backend else {}),
                                               **({"float32_matmul_precision": matmul_precision}
                                                  if matmul_precision else {})},
               present(1.0)),
        series("bottleneck_train_data_parallel_devices", labels, present(float(data_parallel))),
        series("bottleneck_train_sampled_forwards_total", labels, counted(1.0, 1.0)),
        series("bottleneck_train_autocast_forwards_total", labels, counted(autocast, autocast)),
        series("bottleneck_train_dataloader_iterators_total", labels, counted(worker_starts / 3600, 1.0)),
        series("bottleneck_train_dataloader_worker_starts_total", labels, counted(worker_starts / 3600, 1.0)),
    ]
    if capability is not None:
        out.append(series("bottleneck_train_cuda_compute_capability", labels, present(capability)))
    return out


def process(tl: Timeline, instance: str = INSTANCE, training_job: str = TRAIN_JOB, local_rank: str = "0",
            main: float = 0.4, worker: float = 0.5, workers: int = 4, alive_until: int | None = None,
            workers_cpu: float | None = None, cpu_limit: float | None = None,
            limit_sharers: int = 1, throttled: float = 0.0, allowed_cpus: int | None = None,
            rss_growth: float | None = None, growth_until: int | None = None, name: str = "train.py") -> list[Series]:
    """A training process as the training collector sees it from /proc; absent before the start.

    ``worker`` is the busiest worker thread's share of a core; ``workers_cpu`` (cores, all workers
    together) adds the workers' CPU time counter. ``cpu_limit`` (cores) adds its cgroup's CFS bandwidth:
    100 ms periods, the share ``throttled`` of them throttled, the limit shared by ``limit_sharers`` trainers
    (the ranks of one container). ``allowed_cpus`` adds the number of CPUs it may run on. ``rss_growth`` (bytes
    per second, from the start until the minute ``growth_until``) adds its resident memory, 4 GiB at the
    start. ``name`` is its script's (the collector's ``process`` label)."""
    target = {"instance": instance, "job": EXPORTER_JOB}
    proc = {"process": name, "local_rank": local_rank}

    def present(value: float) -> Track:
        return [None if tl.before(m) or (alive_until is not None and m >= alive_until) else value
                for m in range(tl.length + 1)]

    out = [
        series("bottleneck_training_process_info", {**target, "training_job": training_job, **proc,
                                                    "discovered_by": "hook"}, present(1)),
        series("bottleneck_training_busiest_thread_cpu_ratio", {**target, **proc, "role": "main"}, present(main)),
        series("bottleneck_training_dataloader_workers_found", {**target, **proc}, present(workers)),
    ]
    if workers:
        out.append(series("bottleneck_training_busiest_thread_cpu_ratio", {**target, **proc, "role": "data_worker"},
                          present(worker)))
    if workers_cpu is not None:
        cpu = counter(tl, workers_cpu, None, initial=10)
        out.append(series("bottleneck_training_cpu_seconds_total",
                          {**target, **proc, "role": "data_worker", "mode": "user"},
                          [None if alive_until is not None and m >= alive_until else c for m, c in enumerate(cpu)]))
    if cpu_limit is not None:
        periods = 10.0  # per second: the default 100 ms period, with runnable tasks in every one
        out += [
            series("bottleneck_training_cpu_limit_cores", {**target, **proc}, present(cpu_limit)),
            series("bottleneck_training_cpu_limit_share_cores", {**target, **proc},
                   present(cpu_limit / limit_sharers)),
            series("bottleneck_training_cpu_periods_total", {**target, **proc}, counter(tl, periods)),
            series("bottleneck_training_cpu_throttled_periods_total", {**target, **proc},
                   counter(tl, throttled * periods)),
        ]
    if allowed_cpus is not None:
        out.append(series("bottleneck_training_allowed_cpus", {**target, **proc}, present(allowed_cpus)))
    if rss_growth is not None:
        grown = [rss_growth * 60 * (min(m, growth_until if growth_until is not None else m) - tl.start)
                 for m in range(tl.length + 1)]
        rss = [None if value is None else 4 * 2**30 + grown[m] for m, value in enumerate(present(1))]
        out.append(series("bottleneck_training_resident_memory_bytes", {**target, **proc}, rss))
    return out


def host_batches(tl: Timeline, pageable: float, checked_per_second: float = 0.2, rank_: str = "0",
                 instance: str = INSTANCE, training_job: str = TRAIN_JOB,
                 before: float | None = None) -> list[Series]:
    """The hook's sampled batches of a CUDA rank, ``pageable`` of them in pageable memory (``before`` until
    the start); absent before the rank starts unless ``before`` is given."""
    labels = {"instance": instance, "job": EXPORTER_JOB, "training_job": training_job, "rank": rank_}
    b = pageable if before is None else before
    return [series("bottleneck_train_host_batches_total", {**labels, "memory": "pageable"},
                   counter(tl, checked_per_second * pageable, checked_per_second * b)),
            series("bottleneck_train_host_batches_total", {**labels, "memory": "pinned"},
                   counter(tl, checked_per_second * (1 - pageable), checked_per_second * (1 - b)))]


def gpu_idle(tl: Timeline, held: float = 0.0, free: float = 0.0, index: str = "0", instance: str = INSTANCE,
             before: Mapping[str, float] | None = None) -> list[Series]:
    """The gpu collector's idle-time counter of one GPU: ``held`` and ``free`` are the idle seconds per second
    while a process held memory on it and while none did (``before`` until the start)."""
    b = {"held": held, "free": free, **(before or {})}
    labels = {"instance": instance, "job": EXPORTER_JOB, "gpu": index, "uuid": f"GPU-5e1f7c3a-000{index}"}
    return [series("bottleneck_gpu_idle_seconds_total", {**labels, "held": "process"}, counter(tl, held, b["held"])),
            series("bottleneck_gpu_idle_seconds_total", {**labels, "held": "none"}, counter(tl, free, b["free"]))]


def gpu_pod(tl: Timeline, pod: str, namespace: str = "research", index: str = "0",
            instance: str = INSTANCE) -> list[Series]:
    """The kubernetes collector's allocation of one GPU to a pod's container."""
    labels = {"instance": instance, "job": EXPORTER_JOB, "uuid": f"GPU-5e1f7c3a-000{index}",
              "resource": "nvidia.com/gpu", "namespace": namespace, "pod": pod, "container": "main"}
    return [series("bottleneck_gpu_kubernetes_info", labels, gauge(tl, 1))]


def placement(tl: Timeline, cpus: float, memory: float = 0.5, index: str = "0", local_rank: str = "0",
              instance: str = INSTANCE, before: Mapping[str, float] | None = None) -> list[Series]:
    """The gpu collector's placement of a trainer (``train.py``) on its GPU: the share of its allowed CPUs and
    NUMA nodes near the GPU."""
    b = {"cpus": cpus, "memory": memory, **(before or {})}
    labels = {"instance": instance, "job": EXPORTER_JOB, "gpu": index, "uuid": f"GPU-5e1f7c3a-000{index}",
              "process": "train.py", "local_rank": local_rank}
    return [series("bottleneck_gpu_process_local_cpus_ratio", labels, gauge(tl, cpus, b["cpus"])),
            series("bottleneck_gpu_process_local_memory_ratio", labels, gauge(tl, memory, b["memory"]))]


def xid(tl: Timeline, code: str, errors_at: Sequence[int], index: str = "0", instance: str = INSTANCE) -> list[Series]:
    """The gpu collector's XID counter for one GPU and code: 0 until the first event, one more per event."""
    labels = {"instance": instance, "job": EXPORTER_JOB, "gpu": index, "uuid": f"GPU-5e1f7c3a-000{index}", "xid": code}
    return [series("bottleneck_gpu_xid_errors_total", labels,
                   [float(sum(1 for at in errors_at if at <= m)) for m in range(tl.length + 1)])]


def collectors(tl: Timeline, failing: Callable[[int], bool], instance: str = INSTANCE) -> list[Series]:
    target = {"instance": instance, "job": EXPORTER_JOB}
    return [
        series("bottleneck_scrape_collector_success", {**target, "collector": "cpu"}, gauge(tl, 1)),
        series("bottleneck_scrape_collector_success", {**target, "collector": "gpu"},
               [0.0 if failing(m) else 1.0 for m in range(tl.length + 1)]),
    ]


def scrape_up(tl: Timeline, down: Callable[[int], bool], job: str = EXPORTER_JOB,
              instance: str = INSTANCE) -> list[Series]:
    return [series("up", {"instance": instance, "job": job},
                   [0.0 if down(m) else 1.0 for m in range(tl.length + 1)])]
