"""Metric families built, fresh on every scrape, from the job store and the receiver's counters.

Reads ``store.RankState`` snapshots (cumulative totals pushed by the hook); exposes, per training job (label
``wire.schema.JOB_LABEL``, never Prometheus' own ``job``) and rank::

    bottleneck_train_phase_seconds_total{training_job="resnet",rank="0",phase="data_wait"} 10.2
    bottleneck_train_phase_seconds_total{training_job="resnet",rank="0",phase="collective"} 4.2
    bottleneck_train_collective_exposed_seconds_total{training_job="resnet",rank="0"} 1.3
    bottleneck_train_step_duration_seconds_bucket{training_job="resnet",rank="0",le="0.25"} 103.0
    bottleneck_train_dataloader_num_workers{training_job="resnet",rank="0"} 0.0
    bottleneck_train_gc_seconds_total{training_job="resnet",rank="0",generation="2"} 41.5
    bottleneck_train_setup_info{training_job="bert",rank="0",process_group_backend="nccl",parameters_dtype="float32",
                                float32_matmul_precision="high"} 1

plus the receiver's own ``bottleneck_push_*`` series. Names follow docs/metrics.md ("push receiver").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from bottleneck_exporter.push.kubernetes import kubernetes_info
from bottleneck_exporter.push.store import RankState
from bottleneck_exporter.wire.schema import (
    COLLECTIVE,
    GC_GENERATIONS,
    GPU_MEMORY,
    GPU_PHASES,
    HOST_PHASES,
    JOB_LABEL,
    REASONS,
    STEP,
    STEP_BUCKETS,
    GpuTotals,
    LoaderSettings,
    SetupFacts,
    Snapshot,
)

_JR = [JOB_LABEL, "rank"]
_MEMORY_NAMES = {
    "memory_allocated_bytes": ("allocated", "memory held by tensors (torch.cuda.memory_allocated)"),
    "memory_reserved_bytes": ("reserved", "memory held by the caching allocator (memory_reserved)"),
    "memory_peak_bytes": ("peak", "peak memory held by tensors (torch.cuda.max_memory_allocated)"),
    "memory_total_bytes": ("total", "memory of the rank's device, a MIG instance's own "
                                    "(torch.cuda.get_device_properties().total_memory)"),
}


def _counter(name: str, help_text: str, labels: list[str] | None = None) -> CounterMetricFamily:
    return CounterMetricFamily(name.removesuffix("_total"), help_text, labels=labels or _JR)


def _gauge(name: str, help_text: str, labels: list[str] | None = None) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, help_text, labels=labels or _JR)


class _RankFamilies:
    """The per-rank families of one scrape, filled rank by rank (``add``), one method per datagram part."""

    def __init__(self) -> None:
        self.phase = _counter("bottleneck_train_phase_seconds_total",
                              "Host time per training-step phase, as measured by the in-process hook "
                              "(phase collective overlaps backward and is no part of step).", [*_JR, "phase"])
        self.exposed = _counter("bottleneck_train_collective_exposed_seconds_total",
                                "Host time the training thread waited for its collectives, the part of "
                                "phase collective that compute did not hide (gloo DDP).")
        self.steps = _counter("bottleneck_train_steps_total",
                              "Training steps completed (optimizer steps, including those AMP skipped).")
        self.skipped = _counter("bottleneck_train_skipped_steps_total",
                                "Steps whose optimizer step AMP's GradScaler skipped (inf/NaN gradients).")
        self.samples = _counter("bottleneck_train_samples_total", "Samples processed.")
        self.duration = HistogramMetricFamily("bottleneck_train_step_duration_seconds",
                                              "Whole optimizer-step time on the host clock.", labels=_JR)
        self.gpu_phase = _counter("bottleneck_train_gpu_phase_seconds_total",
                                  "GPU time per phase from CUDA events.", [*_JR, "phase"])
        self.gpu_busy = _counter("bottleneck_train_gpu_busy_seconds_total",
                                 "GPU time from the first to the last event of each step (CUDA events).")
        self.gpu_idle = _counter("bottleneck_train_gpu_idle_seconds_total",
                                 "GPU time between the last event of a step and the first of the next "
                                 "(CUDA events).")
        self.gpu_dropped = _counter("bottleneck_train_gpu_timings_dropped_total",
                                    "Steps whose GPU timings the hook gave up before their CUDA events completed.")
        self.collective_dropped = _counter(
            "bottleneck_train_collective_timings_dropped_total",
            "NCCL collectives whose GPU timings the hook gave up before their CUDA events completed.")
        self.allocator = {
            "allocator_retries": _counter("bottleneck_train_cuda_allocator_retries_total",
                                          "CUDA allocations the caching allocator retried after freeing its cache "
                                          "(torch.cuda.memory_stats num_alloc_retries)."),
            "allocator_ooms": _counter("bottleneck_train_cuda_allocator_ooms_total",
                                       "CUDA allocations that failed after the retry (memory_stats num_ooms)."),
        }
        self.memory = {key: _gauge(f"bottleneck_train_cuda_memory_{short}_bytes", f"CUDA {text}.")
                       for key, (short, text) in _MEMORY_NAMES.items()}
        self.loader = {
            "num_workers": _gauge("bottleneck_train_dataloader_num_workers", "DataLoader num_workers."),
            "batch_size": _gauge("bottleneck_train_dataloader_batch_size", "DataLoader batch_size."),
            "prefetch_factor": _gauge("bottleneck_train_dataloader_prefetch_factor",
                                      "DataLoader prefetch_factor (absent with num_workers=0)."),
            "pin_memory": _gauge("bottleneck_train_dataloader_pin_memory", "DataLoader pin_memory (1 or 0)."),
            "persistent_workers": _gauge("bottleneck_train_dataloader_persistent_workers",
                                         "DataLoader persistent_workers (1 or 0)."),
        }
        self.host_batches = _counter("bottleneck_train_host_batches_total",
                                     "Batches the hook sampled on CUDA ranks, by where the loader "
                                     "left their host tensors: pinned (page-locked) or pageable.",
                                     [*_JR, "memory"])
        self.info = _gauge("bottleneck_train_info",
                           "Identity of a training rank pushing to this exporter; value 1.",
                           [*_JR, "local_rank", "world_size", "device"])
        self.last_step = _gauge("bottleneck_train_last_step_timestamp_seconds",
                                "Unix time at which the rank's last reported step ended.")
        self.dropped = _counter("bottleneck_train_hook_dropped_datagrams_total",
                                "Datagrams the hook could not send (exporter absent, slow or restarting).")
        self.startup = _gauge("bottleneck_train_startup_seconds",
                              "Seconds from the training process's start to the end of its first step.")
        self.long_steps = _counter("bottleneck_train_long_steps_total",
                                   "Steps far above the rank's median step (median + 3 sigma from the IQR, and "
                                   "three times the median; of five or more close together, the loop slowing as "
                                   "a whole, those three times the cluster's median).")
        self.long_excess = _counter("bottleneck_train_long_step_excess_seconds_total",
                                    "Time of the long steps above the median step: wall time lost to them.")
        self.median = _gauge("bottleneck_train_step_median_seconds", "Median of the rank's last 128 step times.")
        self.checkpoint = _counter("bottleneck_train_checkpoint_seconds_total",
                                   "Host time in checkpoint saves on the training thread (torch.save, "
                                   "torch.distributed.checkpoint.save); no part of any phase.")
        self.saves = _counter("bottleneck_train_checkpoint_saves_total",
                              "Checkpoint saves on the training thread.")
        self.copy_seconds = _counter("bottleneck_train_host_to_device_seconds_total",
                                     "Host time moving training batches to the device, where the hook times it "
                                     "(Lightning's batch_to_device); part of the data_wait phase.")
        self.copies = _counter("bottleneck_train_host_to_device_copies_total",
                               "Training batches moved to the device where the hook times it.")
        self.gc = _counter("bottleneck_train_gc_seconds_total",
                           "Time in Python's garbage collector, by generation (gc.callbacks); overlaps the "
                           "phases.", [*_JR, "generation"])
        self.gc_collections = _counter("bottleneck_train_gc_collections_total",
                                       "Collections of Python's garbage collector, by generation.",
                                       [*_JR, "generation"])
        self.compiles = _counter("bottleneck_train_compiles_total",
                                 "torch.compile's compilations of a frame, recompilations included (dynamo's "
                                 "compile callbacks; from the hook's attach on).")
        self.recompiles = _counter("bottleneck_train_recompiles_total",
                                   "torch.compile's compilations of a frame it had compiled before: a guard "
                                   "failed (a new shape, dtype or Python value).")
        self.compile_seconds = _counter("bottleneck_train_compile_seconds_total",
                                        "Seconds the training thread spent in torch.compile's compilations.")
        self.setup_info = _gauge("bottleneck_train_setup_info",
                                 "How the rank is set up: the backend of the process group its DDP all-reduces over, "
                                 "else the default group's (\"\" without one), the model parameters' dtype and "
                                 "torch.get_float32_matmul_precision() (\"high\": TF32); value 1.",
                                 [*_JR, "process_group_backend", "parameters_dtype", "float32_matmul_precision"])
        self.data_parallel = _gauge("bottleneck_train_data_parallel_devices",
                                    "GPUs a torch.nn.DataParallel wrapper splits the model's batches over "
                                    "(len(device_ids)); 0 without one.")
        self.capability = _gauge("bottleneck_train_cuda_compute_capability",
                                 "Compute capability of the rank's CUDA device (8.0 for an A100); Tensor Cores "
                                 "from 7.0.")
        self.sampled_forwards = _counter("bottleneck_train_sampled_forwards_total",
                                         "Training forwards the hook looked at (the first after each datagram).")
        self.autocast_forwards = _counter("bottleneck_train_autocast_forwards_total",
                                          "Of the sampled forwards, those that ran under torch.autocast.")
        self.iterators = _counter("bottleneck_train_dataloader_iterators_total",
                                  "DataLoader iterators started (iter(loader), one per epoch).")
        self.worker_starts = _counter("bottleneck_train_dataloader_worker_starts_total",
                                      "DataLoader iterators that started new worker processes (every epoch "
                                      "with persistent_workers=False or a loader built anew).")

    def add(self, snap: Snapshot) -> None:
        jr = [snap.job, str(snap.rank)]
        self._steps(snap, jr)
        self.info.add_metric([*jr, str(snap.local_rank), str(snap.world_size), snap.device], 1.0)
        self.dropped.add_metric(jr, snap.dropped)
        if snap.loader is not None:
            self._loader(snap.loader, jr)
        if snap.gpu is not None:
            self._gpu(snap.gpu, jr)
        if snap.host_batches is not None:
            for memory, count in snap.host_batches.items():
                self.host_batches.add_metric([*jr, memory], count)
        self._trainer(snap, jr)
        if snap.setup is not None:
            self._setup(snap.setup, jr)

    def _setup(self, setup: SetupFacts, jr: list[str]) -> None:
        self.setup_info.add_metric([*jr, setup.process_group_backend or "", setup.parameters_dtype or "",
                                    setup.float32_matmul_precision or ""], 1.0)
        self.data_parallel.add_metric(jr, setup.data_parallel_devices)
        if setup.compute_capability is not None:
            self.capability.add_metric(jr, setup.compute_capability)
        self.sampled_forwards.add_metric(jr, setup.sampled_forwards)
        self.autocast_forwards.add_metric(jr, setup.autocast_forwards)
        self.iterators.add_metric(jr, setup.loader_iterators)
        self.worker_starts.add_metric(jr, setup.loader_worker_starts)

    def _trainer(self, snap: Snapshot, jr: list[str]) -> None:
        if snap.startup_seconds is not None:
            self.startup.add_metric(jr, snap.startup_seconds)
        if snap.long_steps is not None:
            self.long_steps.add_metric(jr, snap.long_steps.count)
            self.long_excess.add_metric(jr, snap.long_steps.excess_seconds)
            if snap.long_steps.median_seconds is not None:
                self.median.add_metric(jr, snap.long_steps.median_seconds)
        if snap.checkpoint is not None:
            self.checkpoint.add_metric(jr, snap.checkpoint.seconds)
            self.saves.add_metric(jr, snap.checkpoint.saves)
        if snap.host_to_device is not None:
            self.copy_seconds.add_metric(jr, snap.host_to_device.seconds)
            self.copies.add_metric(jr, snap.host_to_device.copies)
        if snap.gc is not None:
            for generation in range(GC_GENERATIONS):
                self.gc.add_metric([*jr, str(generation)], snap.gc.seconds[generation])
                self.gc_collections.add_metric([*jr, str(generation)], snap.gc.collections[generation])
        if snap.compile is not None:
            self.compiles.add_metric(jr, snap.compile.compiles)
            self.recompiles.add_metric(jr, snap.compile.recompiles)
            self.compile_seconds.add_metric(jr, snap.compile.seconds)

    def _steps(self, snap: Snapshot, jr: list[str]) -> None:
        for name in HOST_PHASES:
            self.phase.add_metric([*jr, name], snap.phase_seconds[name])
        if snap.collective_seconds is not None:
            self.phase.add_metric([*jr, COLLECTIVE], snap.collective_seconds)
        if snap.collective_exposed_seconds is not None:
            self.exposed.add_metric(jr, snap.collective_exposed_seconds)
        self.steps.add_metric(jr, snap.steps)
        if snap.skipped_steps is not None:
            self.skipped.add_metric(jr, snap.skipped_steps)
        if snap.collective_dropped_timings is not None:
            self.collective_dropped.add_metric(jr, snap.collective_dropped_timings)
        self.samples.add_metric(jr, snap.samples)
        cumulative, buckets = 0, []
        for bound, count in zip((*STEP_BUCKETS, float("inf")), snap.step_buckets, strict=True):
            cumulative += count
            buckets.append((_le(bound), float(cumulative)))
        self.duration.add_metric(jr, buckets, sum_value=snap.phase_seconds[STEP])
        if snap.steps:
            self.last_step.add_metric(jr, snap.time)

    def _loader(self, settings: LoaderSettings, jr: list[str]) -> None:
        self.loader["num_workers"].add_metric(jr, settings.num_workers)
        self.loader["pin_memory"].add_metric(jr, float(settings.pin_memory))
        self.loader["persistent_workers"].add_metric(jr, float(settings.persistent_workers))
        if settings.batch_size is not None:
            self.loader["batch_size"].add_metric(jr, settings.batch_size)
        if settings.prefetch_factor is not None:
            self.loader["prefetch_factor"].add_metric(jr, settings.prefetch_factor)

    def _gpu(self, gpu: GpuTotals, jr: list[str]) -> None:
        for name in GPU_PHASES:
            self.gpu_phase.add_metric([*jr, name], gpu.phase_seconds[name])
        self.gpu_busy.add_metric(jr, gpu.busy_seconds)
        self.gpu_idle.add_metric(jr, gpu.idle_seconds)
        if gpu.dropped_timings is not None:
            self.gpu_dropped.add_metric(jr, gpu.dropped_timings)
        for key in GPU_MEMORY:
            if key in gpu.memory:
                self.memory[key].add_metric(jr, gpu.memory[key])
        for key, count in gpu.allocator.items():
            self.allocator[key].add_metric(jr, count)

    def all(self) -> tuple[Metric, ...]:
        return (self.phase, self.exposed, self.steps, self.skipped, self.samples, self.duration, self.gpu_phase,
                self.gpu_busy, self.gpu_idle, self.gpu_dropped, self.collective_dropped, *self.memory.values(),
                *self.allocator.values(), *self.loader.values(), self.host_batches, self.info, self.last_step,
                self.dropped, self.startup, self.long_steps, self.long_excess, self.median, self.checkpoint,
                self.saves, self.copy_seconds, self.copies, self.gc, self.gc_collections, self.compiles,
                self.recompiles, self.compile_seconds, self.setup_info, self.data_parallel, self.capability,
                self.sampled_forwards, self.autocast_forwards, self.iterators, self.worker_starts)


def families(ranks: list[RankState], datagrams: float, rejected: Mapping[str, float],
             jobs: int) -> Iterable[Metric]:
    per_rank = _RankFamilies()
    for state in sorted(ranks, key=lambda s: (s.snapshot.job, s.snapshot.rank)):
        per_rank.add(state.snapshot)
    yield from per_rank.all()
    yield kubernetes_info(ranks)
    yield from _receiver_families(len(ranks), datagrams, rejected, jobs)


def _receiver_families(ranks: int, datagrams: float, rejected: Mapping[str, float], jobs: int) -> Iterable[Metric]:
    yield CounterMetricFamily("bottleneck_push_datagrams_total", "Datagrams received by the push receiver.",
                              value=datagrams)
    rejected_family = _counter("bottleneck_push_rejected_total",
                               "Datagrams dropped by the push receiver, by reason.", ["reason"])
    for reason in REASONS:
        rejected_family.add_metric([reason], rejected.get(reason, 0.0))
    yield rejected_family
    yield GaugeMetricFamily("bottleneck_push_jobs", "Training jobs tracked by the push receiver.", value=jobs)
    yield GaugeMetricFamily("bottleneck_push_ranks", "Job/rank pairs tracked by the push receiver.", value=ranks)


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)
