"""Automatic instrumentation: measures a training loop nobody instrumented, through PyTorch's global hooks.

``bottleneck-exporter run`` loads this into every Python process of the command it runs, before the user's code
(the ``sitecustomize`` that ``bottleneck_exporter.run.autoload`` writes calls ``start()``). At import it needs only
the standard library, and ``start()`` only puts a finder on ``sys.meta_path`` that waits for ``import torch``. The
user's own import of torch (or Lightning's, or transformers') then attaches, once:

* ``DataLoader.__iter__`` is wrapped: an iterator taken while gradients are on (training; evaluation loops run
  under ``no_grad``) is timed by ``hook.loader``'s iterator, as ``instrument()`` times it: time inside its
  ``__next__`` is data wait, and the loader's settings and worker PIDs are read at each ``iter()``.
* The optimizer step pre- and post-hooks common to all optimizers
  (``torch.optim.optimizer.register_optimizer_step_pre_hook`` / ``_post_hook``) mark the optimizer phase and end
  the step; with several optimizers a step ends at the next fetch, as with ``instrument(optimizer=[...])``. A
  step given a closure (Lightning runs ``training_step`` and ``backward`` inside ``optimizer.step(closure)``)
  marks the optimizer phase when the closure returns; an optimizer whose ``step`` calls ``super().step()`` runs
  the hooks twice, one call inside the other, and only the outer one ends the step. Until the first optimizer
  step a fetch ends no step (``session.FETCH_UNDECIDED``): frameworks fetch ahead, and accumulate gradients.
* The model: a module forward pre-hook common to all modules, only while it is looked for: from the first
  training ``iter()`` until the first module called with gradients on that has parameters to train (the
  outermost model, or the DDP wrapper around it). The global hook is then removed, since it sends every module
  call through nn.Module's slow path (``hook.forward`` says why), and that module's ``forward`` gets
  ``hook.forward``'s instance wrapper, as ``instrument(model=...)`` gives it. Given up for good after
  ``SEARCH_STEPS`` steps without one.

One ``Session`` per process, started at its first training ``iter()`` or optimizer step, sends what it measures
to ``BOTTLENECK_PUSH_ADDRESS`` as ``instrument()``'s does::

    bottleneck_train_phase_seconds_total{training_job="train",rank="0",phase="data_wait"} 10.2

Stays out: in a DataLoader worker (forked or spawned), with ``BOTTLENECK_HOOK_DISABLE=1``, and once the script
measures itself (a session of ``instrument()`` or of a framework callback is active): then its hooks are removed
and its session closed without a datagram, so that a rank is never reported twice. Every hook body is guarded:
an internal error is counted by the session, which switches itself off after ``session.MAX_ERRORS``.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from time import perf_counter

# Every Python process of the command imports this module at its start (torch or not): nothing here that the
# interpreter's own start-up has not loaded already; logging, typing and weakref come when they are needed.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import logging
    from collections.abc import Callable
    from types import FrameType
    from typing import Any


def _log() -> logging.Logger:
    import logging

    return logging.getLogger("bottleneck_exporter.hook")

# Steps the model is looked for (the global module hook in place) before it is given up for good.
SEARCH_STEPS = 3

_attached: Auto | None = None


def _after_fork_in_child() -> None:
    if _attached is not None:
        _attached.forked()


os.register_at_fork(after_in_child=_after_fork_in_child)


def start() -> None:
    """Attach at torch's import, or now if torch is already imported. Never raises."""
    try:
        if os.environ.get("BOTTLENECK_HOOK_DISABLE", "").strip().lower() in ("1", "true", "yes", "on"):
            return
        if "torch" in sys.modules:
            attach()
        elif not any(isinstance(finder, _TorchImport) for finder in sys.meta_path):
            sys.meta_path.insert(0, _TorchImport())
    except Exception:
        _log().debug("bottleneck hook: automatic instrumentation not started", exc_info=True)


def attach() -> Auto | None:
    """The hooks of this process, put in place once torch is imported; None when they could not be."""
    global _attached
    if _attached is None:
        try:
            import torch

            auto = Auto(torch)
            try:
                auto.attach()
            except Exception:
                auto.stand_aside()  # nothing half in place
                raise
            _attached = auto
        except Exception:
            _log().warning("bottleneck hook: the automatic instrumentation could not attach; training runs without it",
                        exc_info=True)
    return _attached


def detach() -> None:
    """Remove every hook and close the session (the last datagram included): tests, and a process that wants
    the automatic instrumentation gone."""
    global _attached
    if _attached is not None:
        _attached.detach()
        _attached = None


class _TorchImport:
    """A meta path finder that finds nothing itself: asked for ``torch``, it takes itself off ``sys.meta_path``,
    lets the other finders find torch, and has torch's loader call ``attach()`` once torch's module has run."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "torch":
            return None
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                _after_exec(spec.loader)
                return spec
        return None


def _after_exec(loader: Any) -> None:
    """Have ``loader.exec_module`` (an instance attribute shadowing the method, removed at its call) run the
    module, then ``attach()``."""
    original = getattr(loader, "exec_module", None)
    if original is None:
        return

    def exec_module(module: Any) -> None:
        with contextlib.suppress(AttributeError):
            del loader.exec_module
        original(module)
        try:
            attach()
        except Exception:  # attach() guards itself; this is the user's import statement
            _log().debug("bottleneck hook: attaching at torch's import failed", exc_info=True)

    try:
        loader.exec_module = exec_module
    except (AttributeError, TypeError):  # a loader with slots: torch is imported without the hook
        _log().debug("bottleneck hook: cannot wait for torch's import with %r", loader)


class Auto:
    """The global hooks of one process and the session they drive."""

    def __init__(self, torch: Any) -> None:
        from bottleneck_exporter.hook.timing import OPTIMIZER

        self.torch = torch
        self._optimizer_phase = OPTIMIZER
        self.session: Any = None  # bottleneck_exporter.hook.session.Session, started at the first training activity
        self.off = False
        self._handles: list[Any] = []  # the optimizer hooks
        self._search: Any = None  # the global forward pre-hook's handle while the model is looked for
        self._search_from = 0  # the session's step count when the search began
        self._searched = False  # found, or given up
        import weakref

        self._optimizers: weakref.WeakSet[Any] = weakref.WeakSet()
        self._last_optimizer = 0  # id() of the optimizer that stepped last: a new one is counted
        self._several = False
        self._depth = 0  # optimizer steps under way, one inside the other (see _inside_another_step)
        self._iter: Callable[..., Any] | None = None  # DataLoader.__iter__ as it was

    # -- in place, out of place ----------------------------------------------------------------------------
    def attach(self) -> None:
        torch = self.torch
        loader_class = torch.utils.data.DataLoader
        original = loader_class.__iter__
        auto = self

        def __iter__(loader: Any) -> Any:
            iterator = original(loader)
            if auto.off:
                return iterator
            try:
                return auto.iterate(loader, iterator)
            except Exception:
                auto.failed("taking a DataLoader iterator")
                return iterator

        __iter__.__wrapped__ = original  # type: ignore[attr-defined]
        __iter__.__doc__ = original.__doc__
        self._iter = original
        loader_class.__iter__ = __iter__
        optim = importlib.import_module("torch.optim.optimizer")  # torch.optim does not keep the name
        self._handles = [optim.register_optimizer_step_pre_hook(self.optimizer_pre),
                         optim.register_optimizer_step_post_hook(self.optimizer_post)]

    def detach(self) -> None:
        self.stand_aside()
        session, self.session = self.session, None
        if session is not None:
            session.close()

    def stand_aside(self) -> None:
        """Remove every hook. Only from outside the hooks' own calls: torch iterates the optimizer hooks while it
        calls them, and a removal there would raise into training."""
        self.off = True
        self.stop_search()
        for handle in self._handles:
            with contextlib.suppress(Exception):
                handle.remove()
        self._handles.clear()
        loader_class = self.torch.utils.data.DataLoader
        if self._iter is not None and getattr(loader_class.__iter__, "__wrapped__", None) is self._iter:
            loader_class.__iter__ = self._iter

    def failed(self, where: str) -> None:
        if self.session is not None:
            self.session.failed(where)
        else:
            _log().debug("bottleneck hook: automatic instrumentation failed %s", where, exc_info=True)

    def forked(self) -> None:
        """In a forked child: it measures itself (a rank started by fork), never with the parent's session (which
        ``Session.forked`` switched off); a DataLoader worker never starts one (``start_session``)."""
        self.stop_search()  # the child's copy of the global module hook: a worker's transforms may be modules
        import weakref

        self.session = None
        self._optimizers = weakref.WeakSet()
        self._last_optimizer = 0
        self._several = False
        self._depth = 0
        self._search = None
        self._searched = False

    # -- the session ---------------------------------------------------------------------------------------
    def start_session(self) -> Any:
        """The session, started now; None in a DataLoader worker, when the script measures itself, or when it
        cannot start. Then this steps out of the way: its hooks stay, inert, until the next ``iter()`` removes
        them (this may run inside an optimizer hook, where removing one would raise into training)."""
        if self.off:
            return None
        try:
            if self.torch.utils.data.get_worker_info() is not None:
                return None
            if self.measured_by_the_script():
                self.off = True
                return None
            from bottleneck_exporter.hook.session import FETCH_UNDECIDED, Session

            session = Session()
            session.end_at_fetch = FETCH_UNDECIDED  # until an optimizer steps, or shows it never will
        except Exception:
            self.off = True
            _log().warning("bottleneck hook: the automatic instrumentation could not start; training runs without it",
                        exc_info=True)
            return None
        self.session = session
        return session

    def measured_by_the_script(self) -> bool:
        from bottleneck_exporter.hook.session import _sessions

        return any(s is not self.session and s.active for s in list(_sessions))

    # -- DataLoader ----------------------------------------------------------------------------------------
    def iterate(self, loader: Any, iterator: Any) -> Any:
        """The iterator ``DataLoader.__iter__`` returned, timed when it is a training loop's."""
        if not self.torch.is_grad_enabled():
            return iterator
        if self.measured_by_the_script():
            self.detach_session_quietly()
            self.stand_aside()
            return iterator
        session = self.session or self.start_session()
        if session is None or not session.active:
            return iterator
        from bottleneck_exporter.hook.loader import timed

        if self._search is not None and session.optimizer_steps - self._search_from >= SEARCH_STEPS:
            self.give_up_search()  # a loop without an optimizer: its steps end at fetches, counted here
        if not self._searched and self._search is None:
            self.start_search(session)
        return timed(loader, iterator, session)

    def detach_session_quietly(self) -> None:
        """Close the session without its last datagram: the script's own session reports this rank now."""
        session, self.session = self.session, None
        if session is not None:
            session.active = False
            session.close()

    # -- the model -----------------------------------------------------------------------------------------
    def start_search(self, session: Any) -> None:
        self._search_from = session.optimizer_steps
        modules = importlib.import_module("torch.nn.modules.module")
        self._search = modules.register_module_forward_pre_hook(self.module_called)

    def give_up_search(self) -> None:
        self._searched = True
        self.stop_search()

    def stop_search(self) -> None:
        handle, self._search = self._search, None
        if handle is not None:
            with contextlib.suppress(Exception):
                handle.remove()  # torch copies the hooks before calling them: safe from inside one

    def module_called(self, module: Any, args: Any) -> None:
        """The global forward pre-hook: the first module called with gradients on that has parameters to train
        is the model."""
        try:
            if not self.torch.is_grad_enabled() or not any(p.requires_grad for p in module.parameters()):
                return
            self.give_up_search()
            session = self.session
            if session is not None and session.active:
                model, method = _step_around(module)
                session.attach_model(model, method=method)  # from its next call on: this one is under way
        except Exception:
            self.give_up_search()
            self.failed("finding the model")

    # -- optimizers (torch's global step hooks: signature fixed by torch) ---------------------------------
    def optimizer_pre(self, optimizer: Any, args: Any, kwargs: Any) -> Any:
        session = self.session
        if session is None:
            session = self.start_session()  # guarded: None when it cannot start
            if session is None:
                return None
        if not session.active:
            return None
        try:
            if self._depth and not _inside_another_step():
                self._depth = 0  # what a step that raised left: its post-hooks never ran
            self._depth += 1
            if id(optimizer) != self._last_optimizer:
                self._new_optimizer(optimizer, session)
            if self._search is not None and session.optimizer_steps - self._search_from >= SEARCH_STEPS:
                self.give_up_search()
            closure = kwargs.get("closure") if kwargs else None
            if closure is None and len(args) > 1 and callable(args[1]):
                closure = args[1]
            if closure is not None:
                timed = _TimedClosure(closure, session, optimizer)
                if kwargs and kwargs.get("closure") is not None:
                    return args, {**kwargs, "closure": timed}
                return (args[0], timed, *args[2:]), kwargs
            # The optimizer phase begins: StepClock.switch(OPTIMIZER), inline, as the session's own hook does
            # (this runs inside the training step, where every extra call is paid with cold caches).
            log = session.clock.log
            log.append(self._optimizer_phase)
            log.append(perf_counter())
            if session.gpu is not None:
                session.gpu.mark(self._optimizer_phase)
        except Exception:
            session.failed("optimizer pre-hook")
        return None

    def _new_optimizer(self, optimizer: Any, session: Any) -> None:
        from bottleneck_exporter.hook.session import FETCH_ENDS_NOTHING, FETCH_ENDS_STEPPED

        self._last_optimizer = id(optimizer)
        self._optimizers.add(optimizer)
        self._several = len(self._optimizers) > 1
        session.end_at_fetch = FETCH_ENDS_STEPPED if self._several else FETCH_ENDS_NOTHING

    def optimizer_post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        session = self.session
        if session is None or not session.active:
            return
        depth = self._depth - 1
        if depth > 0:
            self._depth = depth
            return  # the post-hook of a step inside another: the outer one ends the step
        self._depth = 0
        if self._several:
            session._optimizer_post(optimizer, args, kwargs)  # guarded, as end_step is
        else:
            session.end_step()


# Frames above the model's first call in which a module's training_step running it is looked for.
_STEP_FRAMES = 8


def _step_around(module: Any) -> tuple[Any, str]:
    """What to time as the forward, once ``module`` was found: ``(module, "forward")``, or, when it is called
    from a module's ``training_step`` (a LightningModule on one device: Lightning calls training_step itself,
    not through a forward), that module and ``training_step``, as the Lightning callback times it. Read from the
    stack once, at the model's first call."""
    frame: FrameType | None = sys._getframe(3)  # above this, the global pre-hook and torch's module call
    for _ in range(_STEP_FRAMES):
        if frame is None:
            break
        if frame.f_code.co_name == "training_step":
            owner = frame.f_locals.get("self")
            modules = getattr(owner, "modules", None)
            if callable(modules) and any(m is module for m in modules()):
                return owner, "training_step"
        frame = frame.f_back
    return module, "forward"


# Frames above an optimizer's step wrapper in which an enclosing step wrapper is looked for: the subclass's own
# step and a decorator or two between them.
_NESTING_FRAMES = 6


def _inside_another_step() -> bool:
    """Whether the optimizer step whose pre-hook runs now was called from inside another one: a subclass whose
    ``step`` calls ``super().step()`` runs torch's step wrapper (and so the hooks) twice, one inside the other,
    and only the outer one ends the step. The hooks count the steps under way; this, read from the stack, is
    asked only when the count says a step is under way already: it is, or a step raised (its post-hooks never
    ran) and left the count behind."""
    wrapper = sys._getframe(2)  # this function's caller is the pre-hook, whose caller is torch's wrapper
    frame = wrapper.f_back
    for _ in range(_NESTING_FRAMES):
        if frame is None:
            return False
        if frame.f_code is wrapper.f_code:
            return True
        frame = frame.f_back
    return False


class _TimedClosure:
    """A step's closure (forward and backward run inside ``optimizer.step``): the optimizer phase begins when it
    returns. An optimizer that calls it several times (L-BFGS) marks the phase after each."""

    __slots__ = ("closure", "optimizer", "session")

    def __init__(self, closure: Callable[..., Any], session: Any, optimizer: Any) -> None:
        self.closure, self.session, self.optimizer = closure, session, optimizer

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self.closure(*args, **kwargs)
        finally:
            self.session._optimizer_pre(self.optimizer, args, kwargs)
