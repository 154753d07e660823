"""One training process's telemetry: the marks the adapters call, the totals, and the periodic datagram.

The plain-PyTorch wrapper (``exporter.hook.loader``), the Lightning and the Hugging Face callbacks all drive a
``Session``: ``mark(phase)`` at each phase boundary, ``end_step()`` after each optimizer step. Every
``interval`` seconds (checked at step ends, no thread) it sends one datagram of cumulative totals, which the
exporter turns into::

    bottleneck_train_phase_seconds_total{training_job="resnet",rank="0",phase="data_wait"} 10.2
    bottleneck_train_steps_total{training_job="resnet",rank="0"} 120.0
    bottleneck_train_dataloader_num_workers{training_job="resnet",rank="0"} 0.0

Every entry point is guarded: an internal error is counted, never raised into training; after
``MAX_ERRORS`` the session switches itself off and logs one warning. Torch is imported lazily, only once a
model is attached (so importing this module never needs torch).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import time
from collections.abc import Callable, Mapping
from time import perf_counter
from typing import Any

from exporter.hook.identity import identify
from exporter.hook.timing import (
    GPU_PHASE_NAMES,
    OPTIMIZER,
    PHASE_NAMES,
    STEP_END,
    CudaEventLike,
    GpuTimer,
    StepClock,
)
from exporter.hook.transport import Transport
from exporter.procfs import WORKER_COMM, ProcParseError, read_children, read_comm
from exporter.push.schema import MAX_WORKER_PIDS, VERSION, encode

log = logging.getLogger("exporter.hook")

MAX_ERRORS = 10
DEFAULT_INTERVAL = 1.0

Samples = int | float | Callable[[Any], Any] | None


def _interval(given: float | None) -> float:
    value: Any = given
    if value is None:
        value = os.environ.get("BOTTLENECK_PUSH_INTERVAL", DEFAULT_INTERVAL)
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = DEFAULT_INTERVAL
    return min(max(seconds, 0.05), 60.0) if seconds == seconds else DEFAULT_INTERVAL


def _always() -> bool:
    return True


def first_dimension(batch: Any, depth: int = 0) -> int | None:
    """The batch size of a batch: the first dimension of its first tensor (shape metadata, no device sync)."""
    shape = getattr(batch, "shape", None)
    if shape is not None:
        return int(shape[0]) if len(shape) > 0 else None
    if depth >= 3:
        return None
    if isinstance(batch, (list, tuple)) and batch:
        return first_dimension(batch[0], depth + 1)
    if isinstance(batch, Mapping) and batch:
        return first_dimension(next(iter(batch.values())), depth + 1)
    return None


def loader_settings(loader: Any) -> dict[str, Any] | None:
    """DataLoader settings as the datagram's ``loader`` object; None for something that is not a DataLoader."""
    workers = getattr(loader, "num_workers", None)
    if not isinstance(workers, int):
        return None

    def optional_int(name: str) -> int | None:
        value = getattr(loader, name, None)
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None

    batch_size = optional_int("batch_size")
    if batch_size is None:
        # A loader built from a batch sampler (accelerate's DataLoaderShard, for one) keeps it there.
        inner = getattr(loader, "batch_sampler", None)
        size = getattr(inner, "batch_size", None)
        batch_size = size if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else None
    return {
        "num_workers": max(workers, 0),
        "pin_memory": bool(getattr(loader, "pin_memory", False)),
        "batch_size": batch_size,
        # DataLoader keeps prefetch_factor even when num_workers=0, where it means nothing.
        "prefetch_factor": optional_int("prefetch_factor") if workers > 0 else None,
        "persistent_workers": bool(getattr(loader, "persistent_workers", False)),
        "worker_pids": [],
    }


def data_worker_children(procfs: str = "/proc") -> list[int]:
    """PIDs of this process's children named ``pt_data_worker`` (torch names its DataLoader workers so)."""
    try:
        return [child for child in read_children(procfs, os.getpid()) if read_comm(procfs, child) == WORKER_COMM]
    except ProcParseError:
        return []


class Session:
    def __init__(self, job: str | None = None, samples: Samples = None, address: str | None = None,
                 interval: float | None = None,
                 gpu_event_factory: Callable[[], CudaEventLike] | None = None) -> None:
        self.active = True
        self.errors = 0
        self.identity = identify(job)
        self.transport = Transport(address)
        self.clock = StepClock()
        self.interval = _interval(interval)
        self.samples = samples
        self.device = "cpu"
        self.gpu: GpuTimer | None = None
        # What the Lightning and Hugging Face callbacks call at each phase boundary: without a GPU just the
        # clock's switch. The plain-PyTorch hooks log their marks inline instead (see StepClock).
        self.mark: Callable[[int], float] = self.clock.switch
        if gpu_event_factory is not None:
            self.enable_gpu(GpuTimer(gpu_event_factory))
        self.loader: dict[str, Any] | None = None
        self.worker_pids: list[int] = []
        self.seq = 0
        self._cuda_index: int | None = None
        # Read by exporter.hook.forward.TimedForward on every forward.
        self.device_checked = False
        self.in_forward = False
        self.grad_enabled: Callable[[], bool] = _always
        self._handles: list[Any] = []
        self._next_flush = perf_counter() + self.interval
        atexit.register(self.close)

    # -- guard -----------------------------------------------------------------------------------------
    def failed(self, where: str) -> None:
        """Count an internal error; switch the session off after MAX_ERRORS. Called from except blocks."""
        self.errors += 1
        if self.errors >= MAX_ERRORS and self.active:
            self.active = False
            log.warning("bottleneck hook: %d internal errors (last in %s), switching the hook off; training "
                        "continues unaffected", self.errors, where, exc_info=True)
            self._remove_hooks()

    # -- marks (called by the adapters) ------------------------------------------------------------------
    # ``mark(phase)`` (an attribute set in __init__ / enable_gpu) closes the running phase and opens another.

    def enable_gpu(self, timer: GpuTimer) -> None:
        self.gpu = timer
        self.mark = self._mark_with_gpu

    def _mark_with_gpu(self, phase: int) -> float:
        now = self.clock.switch(phase)
        if self.gpu is not None:
            self.gpu.mark(phase)
        return now

    def end_step(self, optimizer: Any = None, args: Any = None, kwargs: Any = None) -> None:
        """Close the running step (before the first mark: just start the clock); flush when it is time.

        Also registered as the optimizer's step post-hook as it is (torch passes the optimizer and the step's
        arguments, unused here), so that a step end costs one call: inside a training step every call counts.
        """
        if not self.active:
            return
        try:
            clock = self.clock
            now = perf_counter()
            log = clock.log
            log.append(STEP_END)
            log.append(now)
            clock.samples_at_step_end = clock.fetched_samples
            if self.gpu is not None:
                self.gpu.end_step()
            if now >= self._next_flush:
                self.flush(now)
        except Exception:
            self.failed("end of step")

    def add_batch(self, batch: Any) -> None:
        """Count the samples of one (micro-)batch."""
        given = self.samples
        count: Any
        if given is None:
            count = first_dimension(batch)
        elif callable(given):
            count = given(batch)
        else:
            count = given
        if count is not None and count >= 0:
            self.clock.fetched_samples += float(count)

    # -- model, optimizer, loader -----------------------------------------------------------------------
    def attach_model(self, model: Any, count_samples_in_forward: bool = False) -> None:
        """Time the model's outermost forward (see exporter.hook.forward for why not a module hook)."""
        import torch

        from exporter.hook.forward import TimedForward

        self.grad_enabled = torch.is_grad_enabled
        self._handles.append(TimedForward(self, model, count_samples_in_forward))

    def attach_optimizer(self, optimizer: Any) -> bool:
        pre = getattr(optimizer, "register_step_pre_hook", None)
        post = getattr(optimizer, "register_step_post_hook", None)
        if pre is None or post is None:
            return False
        self._handles.append(pre(self._optimizer_pre))
        self._handles.append(post(self.end_step))
        return True

    def set_loader(self, loader: Any, worker_pids: list[int] | None = None) -> None:
        settings = loader_settings(loader)
        if settings is not None:
            self.loader = settings
        if worker_pids is not None:
            self.worker_pids = worker_pids[:MAX_WORKER_PIDS]

    def _remove_hooks(self) -> None:
        for handle in self._handles:
            with contextlib.suppress(Exception):
                handle.remove()
        self._handles.clear()

    def check_device(self, model: Any) -> None:
        """Turn on CUDA-event timing once the model's parameters are found on a CUDA device."""
        self.device_checked = True
        first = next(iter(model.parameters()), None)
        device = getattr(first, "device", None)
        if device is None or device.type != "cuda":
            return
        import torch

        self._cuda_index = device.index if device.index is not None else torch.cuda.current_device()
        self.device = f"cuda:{self._cuda_index}"
        if self.gpu is None:
            self.enable_gpu(GpuTimer(lambda: torch.cuda.Event(enable_timing=True)))

    # -- optimizer pre-hook (signature fixed by torch; the post-hook is end_step) --------------------------
    def _optimizer_pre(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if not self.active:
            return
        try:
            # StepClock.switch(OPTIMIZER), inline.
            log = self.clock.log
            log.append(OPTIMIZER)
            log.append(perf_counter())
            if self.gpu is not None:
                self.gpu.mark(OPTIMIZER)
        except Exception:
            self.failed("optimizer pre-hook")

    # -- the datagram ---------------------------------------------------------------------------------
    def payload(self, now: float | None = None) -> dict[str, Any]:
        clock = self.clock
        now = perf_counter() if now is None else now
        last = clock.last_step_end
        wall = time.time() - (now - last if last is not None else 0.0)
        phases = {name: clock.phase_totals[index] for index, name in enumerate(PHASE_NAMES)}
        phases["step"] = clock.step_seconds
        ident = self.identity
        body: dict[str, Any] = {
            "v": VERSION, "job": ident.job, "rank": ident.rank, "local_rank": ident.local_rank,
            "world_size": ident.world_size, "device": self.device, "pid": os.getpid(), "seq": self.seq,
            "time": wall, "dropped": self.transport.dropped, "steps": clock.steps, "samples": clock.samples,
            "phase_seconds": phases, "step_buckets": list(clock.buckets),
        }
        if ident.kubernetes:
            body["kubernetes"] = ident.kubernetes
        if self.loader is not None:
            loader = dict(self.loader)
            pids = self.worker_pids
            if not pids and loader["num_workers"] > 0:
                pids = data_worker_children()[:MAX_WORKER_PIDS]
            loader["worker_pids"] = pids
            body["loader"] = loader
        if self.gpu is not None:
            gpu = self.gpu
            body["gpu"] = {
                # PHASE_NAMES[i] is the name of phase index i.
                "phase_seconds": {name: gpu.phase_totals[PHASE_NAMES.index(name)] for name in GPU_PHASE_NAMES},
                "busy_seconds": gpu.busy_seconds,
                "idle_seconds": gpu.idle_seconds,
                **self._cuda_memory(),
            }
        return body

    def _cuda_memory(self) -> dict[str, float]:
        if self._cuda_index is None:
            return {}
        import torch

        # Host-side counters of the caching allocator: no device synchronisation.
        index = self._cuda_index
        return {
            "memory_allocated_bytes": float(torch.cuda.memory_allocated(index)),
            "memory_reserved_bytes": float(torch.cuda.memory_reserved(index)),
            "memory_peak_bytes": float(torch.cuda.max_memory_allocated(index)),
        }

    def flush(self, now: float | None = None) -> None:
        """Send the totals now (also called at the end of each pass over the data and at exit)."""
        if not self.active:
            return
        try:
            now = perf_counter() if now is None else now
            self._next_flush = now + self.interval
            data = encode(self.payload(now))
            self.seq += 1
            self.transport.send(data)
        except Exception:
            self.failed("flush")

    def close(self) -> None:
        """Final datagram and cleanup; safe to call twice, registered with atexit."""
        if self.active and self.clock.steps:
            self.flush()
        self.active = False
        self._remove_hooks()
        self.transport.close()
        atexit.unregister(self.close)


