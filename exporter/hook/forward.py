"""Timing a model's forward: an instance-level wrapper of ``model.forward``, not a module hook.

Why not ``register_forward_pre_hook``: any module hook sends every call of the model through the slow path
of ``nn.Module._call_impl`` (closure, hook-dict walks, try/except), several times the cost of the wrapper
inside a real training step (benchmarks/hook_overhead.py --without model). An instance attribute ``forward`` keeps
``_call_impl`` on its fast path and costs one extra call. It feeds::

    bottleneck_train_phase_seconds_total{training_job="train",rank="0",phase="forward"} 0.9

The wrapper stays out of the way of what users do with models: ``inspect.signature(model.forward)`` sees
the original (``__wrapped__``), ``copy.deepcopy(model)`` (EMA models) gets an unwrapped copy, pickling the
whole model stores the plain forward, and ``remove()`` puts the original back.

And of ``torch.compile``, whatever the order (docs/hook.md, "Under torch.compile"): dynamo runs the wrapper's
frame as it is and compiles the model's forward under it, the same frame, graphs and guards as unhooked
(``hide_from_dynamo``); the timing sits around the compiled forward. Traced inside a frame dynamo compiles (a
compiled function calling the model), the wrapper is only a call of the forward. And of ``DataParallel``'s
replicas, which copy it with the module's ``__dict__`` (``Replicas``).
"""

from __future__ import annotations

import copy
import functools
import sys
from collections.abc import Callable
from time import perf_counter
from typing import Any, Protocol

from bottleneck_exporter.hook.collective import outermost_running
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
    def attach_model(self, model: Any, count_samples_in_forward: bool = False, method: str = "forward") -> None: ...


class InPlaceOf:
    """Stands in a module's ``__dict__`` for one of its methods, out of the way of what users do with the
    module: ``copy.deepcopy`` gives the copy the plain method, pickling stores the plain method, and
    ``remove()`` puts back what was there."""

    def __init__(self, module: Any, method: str) -> None:
        self.module = module
        self.method = method
        # What was there before: usually nothing in the instance (the class's method), sometimes a user's
        # own instance-level one, which remove() restores.
        self.previous = module.__dict__.get(method, _MISSING)
        self.original = getattr(module, method)

    def install(self) -> None:
        self.module.__dict__[self.method] = self

    def remove(self) -> None:
        self.remove_from(self.module.__dict__)

    def remove_from(self, state: dict[str, Any]) -> None:
        """Out of ``state``, the module's ``__dict__`` or a copy of it, if it is there."""
        if state.get(self.method) is self:
            if self.previous is _MISSING:
                del state[self.method]
            else:
                state[self.method] = self.previous

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        # A copy of the model (an EMA twin, say) is not the model being trained: it gets the plain method,
        # bound to the copy.
        return copy.deepcopy(self.original, memo)

    def __reduce__(self) -> tuple[Any, ...]:
        # torch.save(model) pickles the module's __dict__: store "the module's method" instead of this
        # object (whose session holds sockets), resolved against the rebuilt module when loading.
        if self.previous is _MISSING:
            return getattr, (self.module, self.method)
        return _same, (self.previous,)


class TimedForward(InPlaceOf):
    def __init__(self, session: ForwardSession, module: Any, count_samples: bool, method: str = "forward") -> None:
        """``method``: the module's method that runs the step's forward; ``forward``, or a LightningModule's
        ``training_step`` (which the automatic instrumentation times when the model is called inside it)."""
        super().__init__(module, method)
        self.session = session
        self.count_samples = count_samples
        self.__wrapped__ = self.original
        # How the wrapper calls the original. A torch.nn module's own forward (nn.Sequential, DDP) is in
        # dynamo's skip files: called from the wrapper's frame, which dynamo does not compile either, nothing
        # would be compiled. It is called from a frame of ours that dynamo compiles, inlining the forward, as
        # torch.compile(module) does for such a module (external_utils.wrap_inline).
        self.call: Callable[..., Any] = self.original
        if getattr(self.original, "__module__", "").startswith("torch."):
            self.call = functools.partial(_inlined, self.original)
        self.sampled_seq = -1  # the datagram after which a forward was last looked at (hook.setup)
        # Only a torch module is replicated; a model-like object of another kind is timed all the same.
        self.replicas = Replicas(self) if hasattr(module, "_replicate_for_data_parallel") else None
        self.install()
        if self.replicas is not None:
            self.replicas.install()
        hide_from_dynamo()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # Traced by dynamo (the model called from inside a compiled function or module): the hook's bookkeeping
        # would break the graph and its counters would become guards; there is no phase to time inside a graph.
        if _compiling():
            return self.original(*args, **kwargs)
        session = self.session
        # Only the outermost forward of a training step (grad enabled): evaluation under no_grad and
        # recursive calls are not phases.
        if not session.active or session.in_forward or not session.grad_enabled():
            return self.call(*args, **kwargs)
        timed = False
        try:
            if not session.device_checked:
                untraced(session.check_device, self.module)
            # StepClock.switch(FORWARD), inline: this runs inside the training step, where every extra call
            # is paid with cold caches.
            log = session.clock.log
            log.append(FORWARD)
            log.append(perf_counter())
            if session.gpu is not None:
                session.gpu.mark(FORWARD)
            timed = True
            if self.count_samples:
                untraced(session.add_batch, args if args else kwargs)
        except Exception:
            session.failed("forward")
        if not timed:
            return self.call(*args, **kwargs)
        probe = None
        seq = session.seq
        if seq != self.sampled_seq:  # the first training forward, then the first after each datagram
            self.sampled_seq = seq
            try:
                probe = untraced(session.setup.sample, self.module, not _frame_callback())
            except Exception:
                session.failed("looking at the forward's setup")
        session.in_forward = True
        try:
            return self.call(*args, **kwargs)
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
        super().remove()
        if self.replicas is not None:
            self.replicas.remove()


class Replicas(InPlaceOf):
    """``module._replicate_for_data_parallel``, on the module whose forward is timed: how
    ``torch.nn.parallel.replicate`` makes the copy of it that a ``torch.nn.DataParallel`` on several GPUs runs
    on each, in a thread of its own, at every forward.

    The copy is a copy of the module's ``__dict__``, the wrapper in it: without this each replica would run
    the *original* module's forward, with the parameters on the first GPU and its inputs on its own GPU (a
    device mismatch raised into training), and the replicas' threads would all mark the one timeline. Each
    replica gets its own forward back, untimed, and the DataParallel that runs them is timed instead, on the
    training thread, from its next forward (this one is under way)."""

    def __init__(self, timed: TimedForward) -> None:
        super().__init__(timed.module, "_replicate_for_data_parallel")
        self.timed = timed

    def __call__(self) -> Any:
        replica = self.original()
        timed = self.timed
        try:
            state = replica.__dict__
            timed.remove_from(state)
            self.remove_from(state)
            parallel = sys.modules["torch.nn.parallel"]
            wrapper = outermost_running(timed.module, [parallel.DataParallel])
            if wrapper is not None and timed.session.active:
                timed.session.attach_model(wrapper, timed.count_samples)
        except Exception:
            timed.session.failed("replicating the model for DataParallel")
        return replica


def _same(value: Any) -> Any:
    return value


def _never() -> bool:
    return False


def _no_callback() -> Any:
    return None


# Set by hide_from_dynamo() once torch is loaded: torch.compiler.is_compiling, and the C function that returns
# the frame callback dynamo evaluates new frames with (None when nothing compiles them).
_compiling: Callable[[], bool] = _never
_frame_callback: Callable[[], Any] = _no_callback
_disabled: Callable[..., Any] | None = None


def hide_from_dynamo() -> None:
    """Tell dynamo to run ``TimedForward.__call__`` as it is, and to compile the frames it calls as it would
    without it: the model's forward, then, is the frame dynamo compiles, as it is for the model unhooked.

    Without this, ``torch.compile`` of a model whose forward is the wrapper (instrumented, then compiled; or the
    inner module of a compiled one instrumented; or ``model.compile()``) compiles the wrapper's frame: its
    bookkeeping breaks the graph a dozen times and each new datagram number fails a guard (issue 22). Through
    torch's C module, which ``import torch`` loads: the hook never loads dynamo itself, and the first compiled
    call may come before any of the hook's code runs again. ``torch._dynamo.reset()`` keeps it (it clears only
    the code dynamo compiled)."""
    global _compiling, _frame_callback
    try:
        import torch
        from torch._C._dynamo import eval_frame

        _compiling = torch.compiler.is_compiling
        skip = eval_frame._FrameExecStrategy(eval_frame._FrameAction.SKIP, eval_frame._FrameAction.DEFAULT)
        for code in (TimedForward.__call__.__code__, untraced.__code__):
            eval_frame.set_code_exec_strategy(code, skip)
        _frame_callback = eval_frame.get_eval_frame_callback
    except (ImportError, AttributeError):  # another torch's internals: dynamo traces the wrapper, as before
        pass


def untraced(call: Callable[..., Any], *args: Any) -> Any:
    """``call(*args)``, a part of the hook's bookkeeping that looks at the model or the batch, where dynamo
    does not compile it: from the wrapper's frame, which dynamo runs as it is, the frames called are compiled
    when they hold a tensor or a module."""
    global _disabled
    if not _frame_callback():
        return call(*args)
    if _disabled is None:
        import torch

        _disabled = torch.compiler.disable(_call)  # dynamo is loaded: its callback is set
    return _disabled(call, *args)


def _call(call: Callable[..., Any], *args: Any) -> Any:
    return call(*args)


def _inlined(forward: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return forward(*args, **kwargs)
