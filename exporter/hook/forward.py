"""Timing a model's forward: an instance-level wrapper of ``model.forward``, not a module hook.

Why not ``register_forward_pre_hook``: any module hook sends every call of the model through the slow path
of ``nn.Module._call_impl`` (closure, hook-dict walks, try/except), several times the cost of the wrapper
inside a real training step (benchmarks/hook_overhead.py --without model). An instance attribute ``forward`` keeps
``_call_impl`` on its fast path and costs one extra call. It feeds::

    bottleneck_train_phase_seconds_total{training_job="train",rank="0",phase="forward"} 0.9

The wrapper stays out of the way of what users do with models: ``inspect.signature(model.forward)`` sees
the original (``__wrapped__``), ``copy.deepcopy(model)`` (EMA models) gets an unwrapped copy, pickling the
whole model stores the plain forward, and ``remove()`` puts the original back.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from time import perf_counter
from typing import Any, Protocol

from bottleneck_exporter.hook.setup import SetupFacts
from bottleneck_exporter.hook.timing import BACKWARD, FORWARD, LOG_LIMIT, GpuTimer, StepClock

_MISSING = object()


class ForwardSession(Protocol):
    """What the wrapper reads and calls on the session (``bottleneck_exporter.hook.session.Session``), named here so
    that this module does not import the session, which imports it."""

    active: bool
    in_forward: bool
    device_checked: bool
    grad_enabled: Callable[[], bool]
    clock: StepClock
    gpu: GpuTimer | None
    setup: SetupFacts
    seq: int

    def check_device(self, model: Any) -> None: ...
    def add_batch(self, batch: Any) -> None: ...
    def failed(self, where: str) -> None: ...


class TimedForward:
    def __init__(self, session: ForwardSession, module: Any, count_samples: bool, method: str = "forward") -> None:
        """``method``: the module's method that runs the step's forward; ``forward``, or a LightningModule's
        ``training_step`` (which the automatic instrumentation times when the model is called inside it)."""
        self.session = session
        self.module = module
        self.count_samples = count_samples
        self.method = method
        # What was there before: usually nothing in the instance (the class's forward), sometimes a user's
        # own instance-level forward, which remove() restores.
        self.previous = module.__dict__.get(method, _MISSING)
        self.original = getattr(module, method)
        self.__wrapped__ = self.original
        self.sampled_seq = -1  # the datagram after which a forward was last looked at (hook.setup)
        module.__dict__[method] = self

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        session = self.session
        # Only the outermost forward of a training step (grad enabled): evaluation under no_grad and
        # recursive calls are not phases.
        if not session.active or session.in_forward or not session.grad_enabled():
            return self.original(*args, **kwargs)
        timed = False
        try:
            if not session.device_checked:
                session.check_device(self.module)
            # StepClock.switch(FORWARD), inline: this runs inside the training step, where every extra call
            # is paid with cold caches.
            log = session.clock.log
            log.append(FORWARD)
            log.append(perf_counter())
            if session.gpu is not None:
                session.gpu.mark(FORWARD)
            timed = True
            if self.count_samples:
                session.add_batch(args if args else kwargs)
        except Exception:
            session.failed("forward")
        if not timed:
            return self.original(*args, **kwargs)
        probe = None
        seq = session.seq
        if seq != self.sampled_seq:  # the first training forward, then the first after each datagram
            self.sampled_seq = seq
            try:
                probe = session.setup.sample(self.module)
            except Exception:
                session.failed("looking at the forward's setup")
        session.in_forward = True
        try:
            return self.original(*args, **kwargs)
        finally:
            session.in_forward = False
            if probe is not None:
                try:
                    probe.remove()
                except Exception:
                    session.failed("looking at the forward's setup")
            if session.active:
                try:
                    # Until the next mark the time is the loss and backward(): it counts as "backward".
                    log = session.clock.log
                    log.append(BACKWARD)
                    log.append(perf_counter())
                    if len(log) > LOG_LIMIT:
                        session.clock.fold(wait=False)
                    if session.gpu is not None:
                        session.gpu.mark(BACKWARD)
                except Exception:
                    session.failed("forward")

    def remove(self) -> None:
        if self.module.__dict__.get(self.method) is self:
            if self.previous is _MISSING:
                del self.module.__dict__[self.method]
            else:
                self.module.__dict__[self.method] = self.previous

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        # A copy of the model (an EMA twin, say) is not the model being trained: it gets the plain forward,
        # bound to the copy.
        return copy.deepcopy(self.original, memo)

    def __reduce__(self) -> tuple[Any, ...]:
        # torch.save(model) pickles the module's __dict__: store "the module's forward" instead of this
        # wrapper (which holds sockets), resolved against the rebuilt module when loading.
        if self.previous is _MISSING:
            return getattr, (self.module, self.method)
        return _same, (self.previous,)


def _same(value: Any) -> Any:
    return value
