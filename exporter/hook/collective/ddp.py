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
from time import perf_counter
from typing import Any

from bottleneck_exporter.hook.collective.clock import ExposedWait, HostStopwatch, Stopwatches, timing_failed

log = logging.getLogger("bottleneck_exporter.hook")

_ATTACHED = "_bottleneck_comm_hook"


class DispatchingHook:
    """The registered hook's state: the hook in force and its state."""

    def __init__(self, watches: Stopwatches, group: Any, hook: Any, state: Any) -> None:
        self.watches, self.group = watches, group
        self.hook, self.state = hook, state
        self.user_registered = False

    def __call__(self, bucket: Any) -> Any:
        hook, state = self.hook, self.state
        # Timed by DDP's group's backend: a user's hook communicates on it too, or on a group of its own
        # (PowerSGD's state holds one) that is, in practice, of the same backend.
        watch = self.watches.for_group(self.group)
        if watch is None:
            return hook(state, bucket)
        try:
            token = watch.start()
            exposed = self._exposed(watch)
            if exposed is not None:
                exposed.launched(token, bucket.is_last())
        except Exception:
            timing_failed()
            return hook(state, bucket)

        def completed(future: Any) -> Any:
            try:
                if exposed is None:
                    watch.stop(token)
                else:  # one end for both: the wait is part of the time in flight, never more
                    end = perf_counter()
                    self.watches.clock.record(token, end)
                    exposed.completed(end)
            except Exception:
                timing_failed()
            return future.value()

        return hook(state, bucket).then(completed)


    def _exposed(self, watch: Any) -> ExposedWait | None:
        """Where the training thread's wait is measured: on the host timeline only (gloo), where a future
        completes when its collective has; NCCL's complete at launch."""
        if not isinstance(watch, HostStopwatch):
            return None
        clock = self.watches.clock
        if clock.exposed is None:
            clock.exposed = ExposedWait()
        return clock.exposed


def _registered(dispatch: DispatchingHook) -> Any:
    def bottleneck_timed_comm_hook(state: Any, bucket: Any) -> Any:
        return dispatch(bucket)

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
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    dispatch = DispatchingHook(watches, group, allreduce_hook, group)
    ddp_register = model.register_comm_hook
    ddp_register(group, _registered(dispatch))

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
