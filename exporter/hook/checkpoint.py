"""Checkpoint saves on the training thread, timed as a phase of their own: ``torch.save`` and
``torch.distributed.checkpoint.save`` (which Lightning's and Hugging Face's checkpointing call in the end).

A save written on the training thread holds the step that follows it: the loop does nothing else meanwhile,
and in a synchronous job every other rank waits for it in the next collective. A loop that saves every few
dozen steps shows long steps that come back; the hook names them. The functions are wrapped where torch keeps
them, once per process, as soon as their module is loaded (``watch``, called when a session starts and at each
datagram: the hook loads nothing itself). A save counts only on the thread a ``CheckpointClock`` was made on
(the training thread): ``async_save``'s writes in the background cost the step nothing, and a save inside a
save (``torch.distributed.checkpoint`` writes with ``torch.save``) counts once. The exporter shows::

    bottleneck_train_checkpoint_seconds_total{training_job="resnet",rank="0"} 96.0
    bottleneck_train_checkpoint_saves_total{training_job="resnet",rank="0"} 12.0

A name bound before the wrapping (``from torch import save`` at the top of a script) calls torch's own
function, untimed.
"""

from __future__ import annotations

import functools
import sys
import threading
import weakref
from collections.abc import Callable
from time import perf_counter
from typing import Any

# (module, attribute) of each save function timed; a module is wrapped once it is in sys.modules.
SAVES = (("torch", "save"), ("torch.distributed.checkpoint", "save"),
         ("torch.distributed.checkpoint.state_dict_saver", "save"))

_clocks: weakref.WeakSet[CheckpointClock] = weakref.WeakSet()
_wrapped: set[tuple[str, str]] = set()
_wrappers: dict[int, _TimedSave] = {}  # id of a function wrapped -> its wrapper (kept, so the id stays its own)


class CheckpointClock:
    """Seconds in checkpoint saves and their count, on the thread that made it."""

    __slots__ = ("__weakref__", "depth", "saves", "seconds", "thread")

    def __init__(self) -> None:
        self.thread = threading.get_ident()
        self.seconds = 0.0
        self.saves = 0
        self.depth = 0
        _clocks.add(self)

    def stop(self) -> None:
        _clocks.discard(self)


class _TimedSave:
    """A save function that adds its time to the clocks of the calling thread."""

    def __init__(self, original: Callable[..., Any]) -> None:
        self.original = original
        functools.update_wrapper(self, original)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        thread = threading.get_ident()
        clocks = [clock for clock in _clocks if clock.thread == thread and not clock.depth]
        if not clocks:
            return self.original(*args, **kwargs)
        for clock in clocks:
            clock.depth += 1
        start = perf_counter()
        try:
            return self.original(*args, **kwargs)
        finally:
            took = perf_counter() - start
            for clock in clocks:
                clock.depth -= 1
                clock.seconds += took
                clock.saves += 1


def watch() -> None:
    """Wrap the save functions of the modules of SAVES loaded by now (never loads one)."""
    if len(_wrapped) == len(SAVES):
        return
    for name in SAVES:
        module = sys.modules.get(name[0])
        original = getattr(module, name[1], None) if name not in _wrapped and module is not None else None
        if original is None:
            continue
        if not isinstance(original, _TimedSave):
            # torch.distributed.checkpoint.save is state_dict_saver.save: one wrapper for both names.
            wrapper = _wrappers.get(id(original))
            if wrapper is None:
                wrapper = _wrappers[id(original)] = _TimedSave(original)
            setattr(module, name[1], wrapper)
        _wrapped.add(name)
