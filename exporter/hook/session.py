"""One training process's telemetry: the marks the adapters call, the totals, and the periodic datagram.

The plain-PyTorch wrapper (``bottleneck_exporter.hook.loader``), the Lightning and the Hugging Face callbacks all drive
a ``Session``: ``mark(phase)`` at each phase boundary, ``end_step()`` after each optimizer step. The first step end
after each ``interval`` seconds sends one datagram of cumulative totals (so a rank that stops stepping falls silent),
which the exporter turns into::

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
import json
import logging
import math
import os
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from time import perf_counter
from typing import Any

from bottleneck_exporter.hook import checkpoint
from bottleneck_exporter.hook.allocator import allocator_readings
from bottleneck_exporter.hook.checkpoint import CheckpointClock
from bottleneck_exporter.hook.collective import attach as attach_collectives
from bottleneck_exporter.hook.collective import enclosing_wrapper
from bottleneck_exporter.hook.collective.clock import CollectiveClock
from bottleneck_exporter.hook.compiles import CompileClock
from bottleneck_exporter.hook.forward import TimedForward
from bottleneck_exporter.hook.gcpauses import GcClock
from bottleneck_exporter.hook.identity import identify
from bottleneck_exporter.hook.pinning import PinCheck
from bottleneck_exporter.hook.setup import SetupFacts, first_parameter
from bottleneck_exporter.hook.startup import process_start
from bottleneck_exporter.hook.timing import (
    OPTIMIZER,
    OTHER,
    SKIPPED_STEP_END,
    STEP_END,
    CudaEventLike,
    GpuTimer,
    StepClock,
    Totals,
)
from bottleneck_exporter.hook.transfer import CopyClock
from bottleneck_exporter.hook.transport import Transport
from bottleneck_exporter.procfs import WORKER_COMM, ProcParseError, read_children, read_comm
from bottleneck_exporter.wire import encode
from bottleneck_exporter.wire.schema import GPU_MEMORY, LOADER_SETTINGS, MAX_WORKER_PIDS

log = logging.getLogger("bottleneck_exporter.hook")

MAX_ERRORS = 10
DEFAULT_INTERVAL = 1.0
# Log entries (two per mark) past which a step end folds the log, tens of steps of a plain loop: folding
# rarely keeps the per-step cost down (each fold runs with cold caches inside a real step, and frequent small
# folds add up to more than a few large ones; benchmarks/hook_overhead.py prints the folds' cost per step).
# See "Why the datagram is sent inline" in Session._tick.
FOLD_ENTRIES = 1024
# Log entries past which a step end that owes a datagram only folds, and leaves the datagram to the next step
# end: a datagram folds at most this many entries itself (a few steps' marks), not up to FOLD_ENTRIES, whose
# fold alone is most of a datagram's budget (benchmarks/hook_overhead.py --parts). Steps slower than the
# datagram interval log far fewer entries than this between datagrams, so their datagrams are never put off.
DATAGRAM_FOLD_ENTRIES = 64

Samples = int | float | Callable[[Any], Any] | None

# How a fetch of the next batch relates to steps (Session.end_at_fetch): with one optimizer its step hook
# ends the step, so a fetch ends nothing; without an optimizer every batch is a step; with several (a GAN's
# generator and discriminator) a step is every optimizer step between two fetches, ended at the next fetch.
# Undecided (the automatic instrumentation, which cannot know whether the loop has an optimizer before one
# steps): a fetch ends nothing, and after UNDECIDED_FETCHES fetches with no optimizer step every batch is a
# step from then on. Frameworks fetch ahead and gradient accumulation fetches several batches per step, so
# fetches before the first optimizer step are no steps.
FETCH_ENDS_NOTHING, FETCH_ENDS_STEP, FETCH_ENDS_STEPPED, FETCH_UNDECIDED = range(4)
UNDECIDED_FETCHES = 64

_sessions: weakref.WeakSet[Session] = weakref.WeakSet()
# The session already measuring a model or optimizer: instrument() called again with a re-created loader
# (each epoch, say) must go on with it, not start a second one that hooks the same optimizer twice.
# Weak both ways: the session holds its model and optimizer, so a strong value would keep its own key alive.
_by_object: weakref.WeakKeyDictionary[Any, weakref.ref[Session]] = weakref.WeakKeyDictionary()


def _after_fork_in_child() -> None:
    for session in list(_sessions):
        session.forked()


def _close_all() -> None:
    """At exit: the final datagram of every session still alive. One handler for all of them, holding none:
    an atexit entry per session (its bound ``close``) would keep each session, and so its model and
    optimizer (GPU memory included), alive until the process ends: a leak for every trial of a sweep."""
    for session in list(_sessions):
        try:
            session.close()
        except Exception:  # one session's trouble must not keep the others from their last datagram
            log.debug("bottleneck hook: closing a session at exit failed", exc_info=True)


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_close_all)


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
    """DataLoader settings as the datagram's ``loader`` object (its LOADER_SETTINGS, without the worker PIDs);
    None for something that is not a DataLoader."""
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
    values = (
        max(workers, 0),
        bool(getattr(loader, "pin_memory", False)),
        batch_size,
        # DataLoader keeps prefetch_factor even when num_workers=0, where it means nothing.
        optional_int("prefetch_factor") if workers > 0 else None,
        bool(getattr(loader, "persistent_workers", False)),
    )
    return dict(zip(LOADER_SETTINGS, values, strict=True))


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
        self.pin_check = PinCheck()
        self.setup = SetupFacts()
        self.gpu: GpuTimer | None = None
        self.collectives: CollectiveClock | None = None
        # What the training thread loses besides its phases: start-up, collections, checkpoint saves.
        self.started = process_start()
        self.gc = GcClock()
        self.gc.attach()
        self.checkpoints = CheckpointClock()
        # Set by an adapter whose framework moves batches in one place it can time (hook.transfer).
        self.copies: CopyClock | None = None
        checkpoint.watch()
        self._lost_key: tuple[Any, ...] = ()
        self._lost_json = ""
        self.compiles = CompileClock()
        self.compiles.attach()
        # What the Lightning and Hugging Face callbacks call at each phase boundary: without a GPU just the
        # clock's switch. The plain-PyTorch hooks log their marks inline instead (see StepClock).
        self.mark: Callable[[int], float] = self.clock.switch
        if gpu_event_factory is not None:
            self.enable_gpu(GpuTimer(gpu_event_factory))
        self.loader: dict[str, Any] | None = None
        self.worker_pids: list[int] = []
        self._identity_json = ""  # the datagram's formatted parts that seldom change ("" until formatted)
        self._loader_json = ""
        self.seq = 0
        self._cuda_index: int | None = None
        self._cuda_total_bytes = 0.0  # the rank's device's memory, read once with its index
        # Read by bottleneck_exporter.hook.forward.TimedForward on every forward.
        self.device_checked = False
        self.in_forward = False
        self.grad_enabled: Callable[[], bool] = _always
        # Steps and optimizers: see FETCH_ENDS_*. optimizer_steps counts optimizer steps that ran (a
        # GradScaler wrapper compares it to tell a skipped step); stepped says one ran since the last step end.
        self.end_at_fetch = FETCH_ENDS_STEP
        self.undecided_fetches = 0
        self.optimizer_steps = 0
        self.stepped = False
        self.skips_counted = False
        self._optimizers: dict[int, list[Any]] = {}  # id -> [optimizer, pre-hook handle, post-hook handle]
        self._models: set[int] = set()
        self._handles: list[Any] = []
        self._sending = threading.Lock()  # one datagram at a time (flush() may come from another thread)
        # perf_counter() time from which the next step end sends a datagram (never, with no address).
        self.due = perf_counter() + self.interval if self.transport.enabled else float("inf")
        _sessions.add(self)

    @classmethod
    def of(cls, *objects: Any) -> Session | None:
        """The active session already measuring one of ``objects`` (models, optimizers), if any."""
        for obj in objects:
            with contextlib.suppress(TypeError):
                known = _by_object.get(obj)
                session = known() if known is not None else None
                if session is not None and session.active:
                    return session
        return None

    # -- guard -----------------------------------------------------------------------------------------
    def failed(self, where: str) -> None:
        """Count an internal error; switch the session off after MAX_ERRORS. Called from except blocks."""
        self.errors += 1
        if self.errors >= MAX_ERRORS and self.active:
            self.active = False
            log.warning("bottleneck hook: %d internal errors (last in %s), switching the hook off; training "
                        "continues unaffected", self.errors, where, exc_info=True)
            # The hooks stay, inert (each returns at once), until close(): the error may come from inside
            # one of torch's optimizer hooks (a datagram is sent from the step's post-hook), and removing
            # a hook there changes the dict torch is iterating, which would raise into training.

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
        """Close the running step (before the first mark: just start the clock).

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
            self.optimizer_steps += 1
            if self.gpu is not None:
                self.gpu.end_step()
            if len(log) >= FOLD_ENTRIES or now >= self.due:
                self._tick(now)
        except Exception:
            self.failed("end of step")

    def end_skipped_step(self) -> None:
        """A step whose optimizer step AMP's GradScaler skipped: a step of the loop, counted apart."""
        if not self.active:
            return
        if self.end_at_fetch == FETCH_ENDS_STEPPED:
            self.mark(OTHER)
            self.stepped = True
            return
        now = self.clock.switch(SKIPPED_STEP_END)
        self.clock.samples_at_step_end = self.clock.fetched_samples
        if self.gpu is not None:
            self.gpu.end_step()
        if len(self.clock.log) >= FOLD_ENTRIES or now >= self.due:
            self._tick(now)

    def end_step_at_fetch(self) -> None:
        """Called by the loader before each fetch when a fetch may end a step (see FETCH_ENDS_*)."""
        if self.end_at_fetch == FETCH_UNDECIDED:
            self.undecided_fetches += 1
            if self.undecided_fetches >= UNDECIDED_FETCHES:
                self.end_at_fetch = FETCH_ENDS_STEP
            return
        if self.end_at_fetch == FETCH_ENDS_STEP or self.stepped:
            self.stepped = False
            self.end_step()

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
        if count is not None:
            count = float(count)
            if 0 <= count < math.inf:  # never NaN or infinity into the datagram
                self.clock.fetched_samples += count

    def check_pinned(self, batch: Any) -> None:
        """Called by the loader for one batch in CHECK_EVERY: count it pinned or pageable on a CUDA rank
        (on the CPU nothing is copied, so nothing is counted)."""
        if self.device != "cpu":
            self.pin_check.check(batch)

    # -- model, optimizer, loader -----------------------------------------------------------------------
    def attach_model(self, model: Any, count_samples_in_forward: bool = False, method: str = "forward") -> None:
        """Time the model's outermost forward (see bottleneck_exporter.hook.forward for why not a module hook);
        ``method``: the model's method that runs it, when not ``forward``."""
        if id(model) in self._models:
            return
        import torch

        self.grad_enabled = torch.is_grad_enabled
        self._handles.append(TimedForward(self, model, count_samples_in_forward, method))
        self._models.add(id(model))
        # Now, before any training: a DDP hook the user registers from here on is timed, not refused.
        self.time_collectives(model)
        with contextlib.suppress(TypeError):
            _by_object[model] = weakref.ref(self)

    def attach_optimizer(self, optimizer: Any) -> bool:
        """Hook ``optimizer.step``; with several optimizers, a step ends at the next fetch (FETCH_ENDS_*)."""
        if id(optimizer) in self._optimizers:
            return True
        if not hasattr(optimizer, "register_step_pre_hook") or not hasattr(optimizer, "register_step_post_hook"):
            return False
        self._optimizers[id(optimizer)] = [optimizer, optimizer.register_step_pre_hook(self._optimizer_pre), None]
        several = len(self._optimizers) > 1
        for entry in self._optimizers.values():  # the post-hooks of all of them change with the second
            if entry[2] is not None:
                entry[2].remove()
            entry[2] = entry[0].register_step_post_hook(self._optimizer_post if several else self.end_step)
        self.end_at_fetch = FETCH_ENDS_STEPPED if several else FETCH_ENDS_NOTHING
        with contextlib.suppress(TypeError):
            _by_object[optimizer] = weakref.ref(self)
        return True

    def attach_scaler(self, scaler: Any) -> None:
        """Count the steps AMP's ``GradScaler`` skips (wraps ``scaler.step`` on this instance). A scaler
        another session wrapped (a scaler reused for the next model of a sweep) is wrapped anew for this one."""
        current = scaler.__dict__.get("step")
        if isinstance(current, TimedScalerStep) and current.session() is self:
            return
        self._handles.append(TimedScalerStep(self, scaler))
        self.skips_counted = True

    def set_loader(self, loader: Any, worker_pids: list[int] | None = None) -> None:
        settings = loader_settings(loader)
        if settings is not None:
            self.loader = settings
        if worker_pids is not None:
            self.worker_pids = worker_pids[:MAX_WORKER_PIDS]
        self._loader_json = ""

    def _remove_hooks(self) -> None:
        for handle in [*self._handles, *(h for entry in self._optimizers.values() for h in entry[1:])]:
            with contextlib.suppress(Exception):
                handle.remove()
        self._handles.clear()
        self._optimizers.clear()

    def time_collectives(self, model: Any, find_wrapper: bool = False, alone: bool = False) -> None:
        """Time the collectives of a DDP or FSDP model (bottleneck_exporter.hook.collective); again at the first
        forward, for a model whose FSDP modules were wrapped after instrument(). From inside the model's
        forward, ``find_wrapper`` looks on the stack for a DDP or FSDP1 wrapper the hook was not handed. When
        nothing wraps the model (none found there, or ``alone``: the caller knows), the FSDP1 modules inside it
        that no other contains are roots of their own, and theirs are timed."""
        clock = self.collectives or CollectiveClock()
        try:
            wrapper = None
            if find_wrapper and not alone:
                wrapper = enclosing_wrapper(model)
                alone = wrapper is None
            attached = attach_collectives(clock, model, roots=alone)
            if not attached and wrapper is not None and wrapper is not model:
                attached = attach_collectives(clock, wrapper)
            if attached:
                self.collectives = clock
        except Exception:
            self.failed("attaching to the model's collectives")

    def check_device(self, model: Any, find_wrapper: bool = True, alone: bool = False) -> None:
        """At the first training forward: turn on CUDA-event timing once the model's parameters are found on
        a CUDA device, and time the collectives of a DDP or FSDP model (bottleneck_exporter.hook.collective); with
        ``find_wrapper`` (when called from inside the model's forward) also those of the wrapper running it,
        or of its own FSDP1 roots when nothing does (``alone``: the caller knows nothing does)."""
        self.device_checked = True
        self.time_collectives(model, find_wrapper=find_wrapper, alone=alone)
        try:
            self.setup.inspect(model, find_wrapper=find_wrapper)
        except Exception:
            self.failed("reading the model's setup")
        device = getattr(first_parameter(model), "device", None)
        if device is None or device.type != "cuda":
            return
        import torch

        index = device.index if device.index is not None else torch.cuda.current_device()
        # Properties torch read when it initialised the device: no device call. The device the rank itself
        # sees (a MIG instance's own memory, CUDA_VISIBLE_DEVICES applied), which the exporter's rules need not
        # join to an NVML GPU for. Read before the index is kept: a failed read sends no size, not a zero one.
        self._cuda_total_bytes = float(torch.cuda.get_device_properties(index).total_memory)
        self._cuda_index = index
        self.device = f"cuda:{self._cuda_index}"
        self._identity_json = ""
        if self.gpu is None:
            self.enable_gpu(GpuTimer(lambda: torch.cuda.Event(enable_timing=True)))

    # -- optimizer hooks (signature fixed by torch; with one optimizer the post-hook is end_step) -----------
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

    def _optimizer_post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """Post-hook with several optimizers: the step goes on until the next fetch."""
        if not self.active:
            return
        try:
            self.mark(OTHER)
            self.optimizer_steps += 1
            self.stepped = True
        except Exception:
            self.failed("optimizer post-hook")

    # -- the datagram ---------------------------------------------------------------------------------
    # Formatted from parts (bottleneck_exporter.wire.encode says why): the identity and the DataLoader settings
    # when they change (the device at the first forward, the loader at each iter()), the totals every time.

    def payload(self) -> dict[str, Any]:
        """The datagram's content as a dict (what the exporter's ``wire.schema.validate`` checks)."""
        body: dict[str, Any] = json.loads(self._datagram())
        return body

    def _datagram(self) -> bytes:
        totals = self.clock.totals()
        now = perf_counter()
        last = totals.last_step_end
        wall = time.time() - (now - last if last is not None else 0.0)
        collectives = self.collectives
        # The clock's phase totals run one longer than STEP_PHASES: OTHER is in the step, never sent apart.
        numbers = encode.totals(
            self.seq, wall, self.transport.dropped, totals.steps, totals.samples, totals.phase_seconds,
            totals.step_seconds, collectives.seconds() if collectives is not None else None, totals.buckets,
            totals.skipped_steps if self.skips_counted else None,
            collectives.gpu.abandoned if collectives is not None and collectives.gpu is not None else None,
            collectives.exposed.seconds() if collectives is not None and collectives.exposed is not None else None)
        numbers += self._lost_time(totals)
        checkpoint.watch()  # torch.distributed.checkpoint may have been loaded since
        compiles = self.compiles
        if compiles.attach():  # once torch.compile has loaded dynamo
            numbers += encode.compiles(compiles.compiles, compiles.recompiles, compiles.seconds)
        gpu = self.gpu
        if gpu is not None:
            numbers += encode.gpu(gpu.phase_totals, gpu.busy_seconds, gpu.idle_seconds, gpu.abandoned_steps,
                                  self._cuda_memory())
        pins = self.pin_check
        if pins.checked:
            numbers += encode.host_batches(pins.pinned, pins.pageable)
        copies = self.copies
        if copies is not None:
            numbers += encode.host_to_device(copies.seconds, copies.copies)
        identity = self._identity_json or self._format_identity()
        settings = self.loader
        loader = (self._loader_json or self._format_loader(settings)) if settings is not None else ""
        return encode.datagram(identity, numbers, loader + self.setup.encoded())

    def _lost_time(self, totals: Totals) -> str:
        """``encode.trainer``'s part, formatted again only when a count in it changed: each of its seconds grows
        only with its count (a collection, a save, a long step), the start-up is known once, the median moves
        only when the long-step bound is computed again. Most datagrams reuse the last text."""
        saves = self.checkpoints
        gc_seconds, gc_collections = self.gc.totals()
        key = (totals.first_step_end, totals.long_steps, totals.median_step_seconds, saves.saves, *gc_collections)
        if key != self._lost_key:
            first, started = totals.first_step_end, self.started
            self._lost_json = encode.trainer(
                first - started if first is not None and started is not None else None, totals.long_steps,
                totals.long_step_excess_seconds, totals.median_step_seconds, saves.seconds, saves.saves,
                gc_seconds, gc_collections)
            self._lost_key = key
        return self._lost_json

    def _format_identity(self) -> str:
        """The datagram's opening (``wire.encode.identity``); kept until the device changes."""
        ident = self.identity
        self._identity_json = encode.identity(ident.job, ident.rank, ident.local_rank, ident.world_size,
                                              self.device, os.getpid(), ident.kubernetes)
        return self._identity_json

    def _format_loader(self, settings: dict[str, Any]) -> str:
        """``,"loader":{..}``; kept until the loader changes, unless its worker PIDs must be looked up (the
        iterator did not give them): workers come and go with each epoch."""
        pids = self.worker_pids
        looked_up = not pids and settings["num_workers"] > 0
        if looked_up:
            pids = data_worker_children()[:MAX_WORKER_PIDS]
        text = encode.loader(settings, pids)
        if not looked_up:
            self._loader_json = text
        return text

    def _cuda_memory(self) -> dict[str, float]:
        if self._cuda_index is None:
            return {}
        import torch

        # Host-side counters of the caching allocator: no device synchronisation.
        index = self._cuda_index
        readings = (torch.cuda.memory_allocated(index), torch.cuda.memory_reserved(index),
                    torch.cuda.max_memory_allocated(index), self._cuda_total_bytes)
        memory: dict[str, float] = dict(zip(GPU_MEMORY, map(float, readings), strict=True))
        # The allocator's counts are a nicety: a torch whose memory_stats() fails (an allocator backend that
        # keeps none) must not cost the datagram, whose failures switch the hook off.
        with contextlib.suppress(Exception):
            memory.update(allocator_readings(torch.cuda.memory_stats(index)))
        return memory

    def _tick(self, now: float) -> None:
        """At a step end: fold the logs (the marks', the collections', the collectives'); once ``interval`` has
        passed, send a datagram, here and now. With more than DATAGRAM_FOLD_ENTRIES in any of the logs, this step
        end folds them and the next one sends: no single step pays for both a long fold and the datagram.

        Why the datagram is sent inline, on the training thread, and not by a thread of its own: a sender
        thread does the same work (a fold, formatting, sending) but must take the GIL from the
        training thread and give it back, and a hand-over can cost the training thread up to the
        interpreter's switch interval (5 ms): it cost the training thread more per datagram than sending inline
        (benchmarks/hook_overhead.py; docs/hook.md, "What it costs").
        """
        due = now >= self.due
        gc, collectives = self.gc, self.collectives
        long = (len(self.clock.log) > DATAGRAM_FOLD_ENTRIES or gc.logged() > DATAGRAM_FOLD_ENTRIES
                or (collectives is not None and collectives.logged() > DATAGRAM_FOLD_ENTRIES))
        self.clock.fold(wait=False)
        gc.fold(wait=False)
        if due and not long:
            self.due = now + self.interval
            self._send()
        elif collectives is not None:
            collectives.fold()

    def flush(self) -> None:
        """Send the totals now, on the calling thread (the end of training, tests)."""
        if self.active:
            self._send()

    def _send(self) -> None:
        try:
            with self._sending:
                data = self._datagram()
                self.seq += 1
                self.transport.send(data)
        except Exception:
            self.failed("sending a datagram")

    def close(self) -> None:
        """Final datagram and cleanup; safe to call twice, called at exit (_close_all)."""
        was_active = self.active
        self.active = False
        if was_active and self.clock.steps:
            if self.gpu is not None:
                # Read what has completed; what has not by now is given up, and counted as dropped.
                self.gpu.harvest(self.gpu.pending_steps())
                self.gpu.abandon_pending()
            self._send()
        if self.collectives is not None:
            self.collectives.stopped = True
        self.gc.detach()
        self.checkpoints.stop()
        self.compiles.detach()
        self._remove_hooks()
        self.transport.close()

    def forked(self) -> None:
        """In a forked child (a DataLoader worker): the session is the parent's; here it measures nothing,
        and no lock a vanished thread might hold is ever taken."""
        self.active = False
        self.clock.forked()
        self.gc.detach()
        self.gc.forked()
        self.checkpoints.stop()
        self._sending = threading.Lock()
        if self.collectives is not None:
            self.collectives.forked()


class TimedScalerStep:
    """Wraps one ``GradScaler``'s ``step`` (instance attribute): a step it skips ends a step all the same.

    The scaler calls ``optimizer.step()`` only when the gradients are finite; otherwise the step's time would
    join the next step and the step go uncounted. Its own time (unscaling, the inf check) is optimizer time.
    """

    def __init__(self, session: Session, scaler: Any) -> None:
        # Weak: a scaler the user keeps must not keep the session, and with it a model, alive.
        self.session = weakref.ref(session)
        self.scaler = scaler
        self.original: Callable[..., Any]
        current = scaler.__dict__.get("step")
        # Another session's wrapper is replaced, not wrapped: its remove() then leaves this one in place.
        self.original = current.original if isinstance(current, TimedScalerStep) else scaler.step
        scaler.__dict__["step"] = self

    def __call__(self, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        session = self.session()
        if session is None:
            return self.original(optimizer, *args, **kwargs)
        before = session.optimizer_steps
        if session.active:
            try:
                session.mark(OPTIMIZER)
            except Exception:
                session.failed("GradScaler step")
        result = self.original(optimizer, *args, **kwargs)
        if session.active and session.optimizer_steps == before:
            try:
                session.end_skipped_step()
            except Exception:
                session.failed("GradScaler step")
        return result

    def remove(self) -> None:
        if self.scaler.__dict__.get("step") is self:
            del self.scaler.__dict__["step"]
