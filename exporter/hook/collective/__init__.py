"""Time a rank spends in its collectives: DDP's gradient all-reduce, FSDP's all-gathers and reduce-scatters.

Collectives overlap backward (DDP all-reduces each gradient bucket as soon as backward has filled it; FSDP
prefetches the next all-gather), so their time is a phase of its own, not part of the partition of the step.
It is the time during which at least one of the rank's collectives was in flight (launched, not yet
completed), which includes the time spent waiting for the slowest peer to join::

    bottleneck_train_phase_seconds_total{training_job="resnet",rank="0",phase="collective"} 4.2

Modules: ``clock`` (the time covered by collectives in flight, and the stopwatch that times each launch by
the process group's backend), and where the launches are seen: ``ddp`` (a DDP communication hook), ``fsdp2``
(FSDP2's communication objects), ``fsdp1`` (FSDP1's flat-parameter all-gathers and its communication hook).
Each of those imports ``clock`` only; this module, which the session calls, imports them all.

Imports torch only inside ``attach``, which runs once a model is seen.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

from bottleneck_exporter.hook.collective import ddp, fsdp1, fsdp2
from bottleneck_exporter.hook.collective.clock import CollectiveClock, Stopwatches, backend_of
from bottleneck_exporter.hook.timing import CudaEventLike


def enclosing_wrapper(model: Any, frames: int = 64) -> Any:
    """From inside ``model``'s forward: the outermost DDP or FSDP1 module whose forward is running it, if
    any. Who needs it: the Hugging Face Trainer hands its callbacks the unwrapped model, and a user may
    instrument a model before wrapping it in DDP; neither wrapper can be reached from the model itself, but
    its forward is on the stack. Read once per session (at the first training forward)."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    parallel = sys.modules.get("torch.nn.parallel")
    wrappers = [t for t in (getattr(parallel, "DistributedDataParallel", None), fsdp1.fsdp_class())
                if t is not None]
    return outermost_running(model, wrappers, frames + 1)


def outermost_running(model: Any, wrappers: list[Any], frames: int = 64) -> Any:
    """From inside ``model``'s forward: the outermost module of one of the ``wrappers`` classes whose forward
    is on the stack and contains ``model``, if any. Only the frames of the wrappers' own ``forward`` have their
    locals read: on Python 3.11 and 3.12 reading a frame's locals leaves a snapshot of them on the frame, which
    would keep, say, the training loop's first batch alive."""
    forwards = {t.forward.__code__ for t in wrappers}
    found: Any = None
    frame: FrameType | None = sys._getframe(1)
    for _ in range(frames):
        if frame is None:
            break
        if frame.f_code in forwards:
            owner = frame.f_locals.get("self")
            if owner is not None and owner is not found and any(m is model for m in owner.modules()):
                found = owner  # farther up the stack: an outer FSDP1 module, the root
        frame = frame.f_back
    return found


def attach(clock: CollectiveClock, model: Any, gpu_event_factory: Callable[[], CudaEventLike] | None = None,
           roots: bool = False) -> bool:
    """Time the collectives of ``model`` (DDP, or a model with FSDP2 or FSDP1 modules); False when it has
    none that the hook can time. With ``roots`` (the caller knows that nothing wraps the model), also those of
    the FSDP1 modules inside it that no other contains: roots of their own (``fsdp1.attach_roots``). Safe to
    call again for the same model."""
    if "torch" not in sys.modules:
        return False
    watches = Stopwatches(clock, backend_of, gpu_event_factory)
    return (ddp.attach(watches, model) or fsdp2.attach(watches, model)
            or fsdp1.attach(watches, model) or (roots and fsdp1.attach_roots(watches, model)))
