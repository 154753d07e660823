"""FSDP2's all-gathers and reduce-scatters (``torch.distributed.fsdp.fully_shard``), timed through its
communication objects.

FSDP2 launches each parameter group's all-gather and reduce-scatter through an ``AllGather`` and a
``ReduceScatter`` object that ``FSDPModule.set_custom_all_gather`` / ``set_custom_reduce_scatter`` replace
(public methods; written against torch 2.13). The hook installs, on every FSDP module of the model, objects
that delegate both the buffer allocation and the call to the ones in force (FSDP's defaults, or a custom
one set before the hook saw the model) and time the call (``clock.timed_launch``). The
ones in force are read from FSDP's parameter groups (``_fsdp_param_groups``, private): where that is
missing (another torch version), nothing is timed and a line is logged.

Not timed: FSDP1 (``FullyShardedDataParallel``), HSDP's all-reduce across replicas, a module with several
parameter groups (FSDP refuses custom communication there), communication objects set after the hook saw the
model (they replace ours). Once ours are installed, ``set_allocate_memory_from_process_group`` and
``set_symm_mem_for_comm`` refuse (they only accept FSDP's defaults): call them before ``instrument()``.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from bottleneck_exporter.hook.collective.clock import Stopwatches, timed_launch

log = logging.getLogger("bottleneck_exporter.hook")


class TimedAllGather:
    def __init__(self, inner: Any, watches: Stopwatches) -> None:
        self.inner, self.watches = inner, watches
        self.launches = 0  # what a test or a debugging session reads to see that FSDP calls us

    def allocate(self, size: Any, *, dtype: Any, device: Any) -> Any:
        return self.inner.allocate(size, dtype=dtype, device=device)

    def __call__(self, output_tensor: Any, input_tensor: Any, group: Any, async_op: bool = False) -> Any:
        self.launches += 1
        return timed_launch(self.watches.for_group(group), lambda: self.inner(
            output_tensor=output_tensor, input_tensor=input_tensor, group=group, async_op=async_op))


class TimedReduceScatter:
    def __init__(self, inner: Any, watches: Stopwatches) -> None:
        self.inner, self.watches = inner, watches
        self.launches = 0

    def allocate(self, size: Any, *, dtype: Any, device: Any) -> Any:
        return self.inner.allocate(size, dtype=dtype, device=device)

    def __call__(self, output_tensor: Any, input_tensor: Any, group: Any, op: Any, async_op: bool = False) -> Any:
        self.launches += 1
        return timed_launch(self.watches.for_group(group), lambda: self.inner(
            output_tensor=output_tensor, input_tensor=input_tensor, group=group, op=op, async_op=async_op))


def attach(watches: Stopwatches, model: Any) -> bool:
    """Time the collectives of every FSDP2 module in ``model``; True if any are timed."""
    fsdp = sys.modules.get("torch.distributed.fsdp")
    module_type = getattr(fsdp, "FSDPModule", None)
    if module_type is None or not hasattr(model, "modules"):
        return False
    timed = 0
    for module in model.modules():
        if isinstance(module, module_type):
            timed += _attach_module(watches, module)
    return timed > 0


def param_groups(module: Any) -> list[Any]:
    """FSDP's parameter groups of one FSDP module (private: ``_fsdp_param_groups``)."""
    return list(module._get_fsdp_state()._fsdp_param_groups)


def launches(model: Any) -> dict[str, int]:
    """All-gathers and reduce-scatters timed so far on ``model``'s FSDP modules."""
    counts = {"all_gather": 0, "reduce_scatter": 0}
    for module in model.modules():
        for group in param_groups(module) if hasattr(module, "_get_fsdp_state") else ():
            for key, comm in (("all_gather", group._all_gather_comm), ("reduce_scatter", group._reduce_scatter_comm)):
                counts[key] += getattr(comm, "launches", 0)
    return counts


def _attach_module(watches: Stopwatches, module: Any) -> int:
    try:
        groups = param_groups(module)
    except Exception:
        log.info("bottleneck hook: this torch's FSDP has no parameter groups where expected; FSDP "
                 "collectives not timed", exc_info=True)
        return 0
    if len(groups) != 1:
        return 0  # no parameters of its own (its children's are theirs), or several groups (refused)
    group = groups[0]
    gather, scatter = group._all_gather_comm, group._reduce_scatter_comm
    if isinstance(gather, TimedAllGather) and isinstance(scatter, TimedReduceScatter):
        gather.watches = scatter.watches = watches  # attached already: a new session's clock
        return 1
    module.set_custom_all_gather(TimedAllGather(gather, watches))
    module.set_custom_reduce_scatter(TimedReduceScatter(scatter, watches))
    return 1
