"""torch.compile's compilations in the training process: how many, how many of them recompiled a frame it had
compiled before, and the seconds they took, from dynamo's compile callbacks.

Dynamo calls ``on_compile_start`` and ``on_compile_end`` callbacks around each compilation, on the thread that
compiles (the one that called the compiled function: the training thread stops for it). Its compile id reads
``frame/recompile``: ``0/0`` compiles frame 0 the first time, ``0/1`` compiles it again because a guard failed
(a new shape, dtype or Python value). A job that keeps recompiling after its warm-up loses those seconds on every
occurrence and, once a frame reaches dynamo's recompile limit, runs it uncompiled. The session sends the totals
in each datagram, which the exporter turns into::

    bottleneck_train_compiles_total{training_job="resnet",rank="0"} 14.0
    bottleneck_train_recompiles_total{training_job="resnet",rank="0"} 12.0
    bottleneck_train_compile_seconds_total{training_job="resnet",rank="0"} 31.5

Never imports torch._dynamo: ``attach`` registers the callbacks once the training script has loaded it (the
first ``torch.compile`` does); the session calls it at each datagram, which also registers them again after a
``torch._dynamo.reset()``, which drops every callback. Compilations before
that are not seen; recompilations after a warm-up, the ones that matter, are. The callbacks never raise.
"""

from __future__ import annotations

import sys
import threading
from time import perf_counter
from typing import Any

# The trigger of a compilation dynamo traces (CallbackTrigger.DYNAMO); the others (a deferred backward, CUDA
# graph recording) are not counted as compilations of a frame.
_DYNAMO_TRIGGER = "DYNAMO"


def recompiles(compile_id: str) -> bool:
    """Whether a compile id (``"0/1"``, ``"[0/1]"``, ``"0/1_2"``) compiles a frame again."""
    _, slash, rest = compile_id.strip("[]").partition("/")
    if not slash:
        return False
    count = rest.split("_", 1)[0]
    return count.isdigit() and int(count) > 0


class CompileClock:
    """Counts and times dynamo's compilations; ``attach`` once ``torch._dynamo`` is loaded."""

    def __init__(self) -> None:
        self.compiles = 0
        self.recompiles = 0
        self.seconds = 0.0
        self.attached = False
        self._started: dict[int, float] = {}  # thread id -> start of its compilation in progress

    def attach(self) -> bool:
        """Registers the callbacks if the training script has loaded torch._dynamo, and again after a
        ``torch._dynamo.reset()`` dropped them; True while they are registered."""
        callback = sys.modules.get("torch._dynamo.callback")
        if callback is None:
            return False
        try:
            handler = callback.callback_handler
            if self._start not in handler.start_callbacks:
                callback.on_compile_start(self._start)
            if self._end not in handler.end_callbacks:
                callback.on_compile_end(self._end)
        except Exception:  # a torch without them: nothing to count
            return self.attached
        self.attached = True
        return True

    def detach(self) -> None:
        callback = sys.modules.get("torch._dynamo.callback")
        if not self.attached or callback is None:
            return
        try:
            callback.callback_handler.remove_start_callback(self._start)
            callback.callback_handler.remove_end_callback(self._end)
        except Exception:
            pass
        self.attached = False

    def _start(self, args: Any) -> None:
        try:
            if getattr(args.callback_trigger, "name", "") == _DYNAMO_TRIGGER:
                self._started[threading.get_ident()] = perf_counter()
        except Exception:
            return

    def _end(self, args: Any) -> None:
        try:
            started = self._started.pop(threading.get_ident(), None)
            if started is None:  # not a dynamo trace, or its start went unseen
                return
            self.seconds += perf_counter() - started
            self.compiles += 1
            if recompiles(str(args.compile_id)):
                self.recompiles += 1
        except Exception:
            return
