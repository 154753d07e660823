"""DDP's gradient collectives, timed through the one communication hook DDP takes.

When the hook first sees a ``DistributedDataParallel`` model (``instrument(model=...)``, or its first
training forward) it registers a dispatching hook that times whichever hook is in force:

- DDP's default all-reduce (``allreduce_hook``: divide by the world size, sum; the same arithmetic), until
- the user registers one (PowerSGD, fp16 compression, their own) through ``model.register_comm_hook``,
  before or after training started: the model's method is wrapped, so the user's hook is validated as DDP
  would and then becomes the one called (and timed) in our place, instead of DDP refusing a second hook.

On gloo it also measures the part of that time the training thread waits, which backward did not hide
(``clock.ExposedWait``: from the backward's last bucket launch to its last completion).

Not timed: a hook registered before the hook saw the model (DDP's reducer holds it and offers no way to
wrap it; logged once); a model on the compiled-autograd Python reducer.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from time import perf_counter
from typing import Any

from bottleneck_exporter.hook.collective.clock import ExposedWait, HostStopwatch, Stopwatches, timing_failed

log = logging.getLogger("bottleneck_exporter.hook")

_ATTACHED = "_bottleneck_comm_hook"


# A DispatchingHook's stopwatch before its first launch has looked it up.
_UNKNOWN: Any = object()


class DispatchingHook:
    """The registered hook's state: the hook in force and its state, and the stopwatch of DDP's group."""

    def __init__(self, watches: Stopwatches, group: Any, hook: Any, state: Any) -> None:
        self._watches = watches
        self.group = group
        self.hook, self.state = hook, state
        self.user_registered = False
        # Looked up at the first launch and kept (DDP's group is the model's for good): the lookup goes through
        # a weak-keyed dict, a weak reference made anew each time, at every bucket.
        self.watch: Any = _UNKNOWN
        self.world_size = 0  # the group's, read at the first launch of DDP's own all-reduce

    @property
    def watches(self) -> Stopwatches:
        return self._watches

    @watches.setter
    def watches(self, watches: Stopwatches) -> None:
        """A new session's stopwatches (re-instrumented, a second fit): the stopwatch is looked up again."""
        self._watches = watches
        self.watch = _UNKNOWN

    def find_watch(self) -> Any:
        self.watch = self._watches.for_group(self.group)
        return self.watch

    def exposed(self) -> ExposedWait:
        """Where the training thread's wait is measured: on the host timeline only (gloo), where a future
        completes when its collective has; NCCL's complete at launch."""
        clock = self._watches.clock
        if clock.exposed is None:
            clock.exposed = ExposedWait()
        return clock.exposed


def _registered(dispatch: DispatchingHook, all_reduce: Callable[..., Any]) -> Any:
    """The function DDP calls for each bucket (with ``dispatch`` as its state): the hook in force, timed.

    One Python frame per bucket, and for DDP's own all-reduce one future: the all-reduce is launched here, as
    ``default_hooks.allreduce_hook`` does (divide by the world size, then sum), and completed by one callback
    that stops the stopwatch and hands the gradients back, where calling ``allreduce_hook`` and chaining a
    callback to its future runs two callbacks, each taking the GIL from the thread that completes the work
    (benchmarks/hook_overhead.py --ddp). A user's hook is called and its future chained."""

    def bottleneck_timed_comm_hook(state: Any, bucket: Any) -> Any:
        watch = dispatch.watch
        if watch is _UNKNOWN:
            watch = dispatch.find_watch()
        if watch is None or watch.clock.stopped:
            return dispatch.hook(dispatch.state, bucket)
        exposed = None
        try:
            token = watch.start()
            # Timed by DDP's group's backend: a user's hook communicates on it too, or on a group of its own
            # (PowerSGD's state holds one) that is, in practice, of the same backend.
            if isinstance(watch, HostStopwatch):
                exposed = dispatch.exposed()
                exposed.launched(token, bucket.is_last())
        except Exception:
            timing_failed()
            return dispatch.hook(dispatch.state, bucket)
        clock = watch.clock

        def completed(future: Any) -> Any:
            try:
                if exposed is None:
                    watch.stop(token)
                else:  # one end for both: the wait is part of the time in flight, never more
                    end = perf_counter()
                    clock.record(token, end)
                    exposed.completed(end)
            except Exception:
                timing_failed()
            value = future.value()
            return value if own is None else value[0]

        own = None if dispatch.user_registered else bucket.buffer()
        if own is None:
            return dispatch.hook(dispatch.state, bucket).then(completed)
        group = dispatch.group
        size = dispatch.world_size or group.size()
        dispatch.world_size = size
        own.div_(size)  # first, as allreduce_hook does: no overflow in the sum (fp16)
        return all_reduce(own, group=group, async_op=True).get_future().then(completed)

    # DDP compares the hook's annotations with its own types (GradBucket, Future[Tensor]); these, strings
    # under postponed evaluation, would not match.
    bottleneck_timed_comm_hook.__annotations__ = {}
    return bottleneck_timed_comm_hook


def attach(watches: Stopwatches, model: Any) -> bool:
    """Register the dispatching hook on a DDP ``model`` that has no hook yet; True if its collectives are
    (or already were) timed."""
    parallel = sys.modules.get("torch.nn.parallel")
    if parallel is None or not isinstance(model, parallel.DistributedDataParallel):
        return False
    attached = vars(model).get(_ATTACHED)
    if attached is not None:
        attached.watches = watches  # a new session's clock (re-instrumented, a second fit)
        return True
    if getattr(model, "_comm_hooks", None):
        log.info("bottleneck hook: the DDP model's communication hook was registered before the hook saw the "
                 "model, so its collectives are not timed; pass the DDP model to instrument() and register "
                 "your hook after it")
        return False
    if getattr(model, "_use_python_reducer", False):
        log.info("bottleneck hook: DDP's Python reducer (compiled autograd): collectives not timed")
        return False
    group = model.process_group
    if watches.for_group(group) is None:
        return False
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    dispatch = DispatchingHook(watches, group, allreduce_hook, group)
    ddp_register = model.register_comm_hook
    ddp_register(dispatch, _registered(dispatch, dist.all_reduce))

    def register_comm_hook(state: object, hook: Any) -> None:
        """DDP's ``register_comm_hook``, made to swap the hook the bottleneck hook times."""
        if dispatch.user_registered:
            raise RuntimeError("register_comm_hook or register_builtin_comm_hook can only be called once.")
        model._check_comm_hook(hook)
        dispatch.hook, dispatch.state, dispatch.user_registered = hook, state, True
        if model.logger is not None:
            model.logger._set_comm_hook_name(hook.__qualname__)

    model.__dict__["register_comm_hook"] = register_comm_hook
    model.__dict__[_ATTACHED] = dispatch
    return True
