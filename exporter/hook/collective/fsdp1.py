"""FSDP1's all-gathers and gradient reductions (``torch.distributed.fsdp.FullyShardedDataParallel``).

FSDP1 launches its collectives as plain synchronous ``torch.distributed`` calls (on gloo they return when the
collective has; on NCCL once it is enqueued on FSDP's stream), from two places:

- the all-gather of each flat parameter, in its ``FlatParamHandle._all_gather_flat_param`` (private): the
  hook replaces that method on each handle instance with one that times the call
  (``bottleneck_exporter.hook.collective.clock.timed_launch``);
- the gradient reduction (reduce-scatter, or all-reduce under ``NO_SHARD``), through FSDP's one
  communication hook (what ``FullyShardedDataParallel.register_comm_hook`` sets on every FSDP module): the
  hook sets one that runs FSDP's own default (``reduce_scatter_hook`` / ``allreduce_hook``, with each
  module's own process group: the same pre- and post-division, the same collective), timed. A hook the user
  registers afterwards, through the root's ``register_comm_hook``, replaces the default inside ours instead
  of FSDP refusing a second one.

A model that is not FSDP1 itself but holds FSDP1 modules (layers wrapped by hand, as Lightning's
``configure_model`` does, the model left as it is) has as many roots as outermost FSDP1 modules: each becomes
a root at its first forward. ``attach_roots`` times each, once the caller knows that nothing wraps the model.

Not timed: the reduction under HSDP (``HYBRID_SHARD``: FSDP refuses communication hooks there, and its
all-reduce across replicas has no hook point at all; its all-gathers are timed), a communication hook the user
registered before the hook saw the model (logged), and everything when this torch's FSDP has no
flat-parameter handles where expected (logged).
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from bottleneck_exporter.hook.collective.clock import Stopwatches, timed_launch

log = logging.getLogger("bottleneck_exporter.hook")

_ATTACHED = "_bottleneck_fsdp1_comm_hook"


def fsdp_class() -> Any:
    """``FullyShardedDataParallel``, if torch's FSDP was imported (the hook never imports it itself)."""
    fsdp = sys.modules.get("torch.distributed.fsdp")
    return getattr(fsdp, "FullyShardedDataParallel", None)


class TimedFlatParamAllGather:
    """A handle's ``_all_gather_flat_param``, timed."""

    def __init__(self, original: Any, watches: Stopwatches, group: Any) -> None:
        self.original, self.watches, self.group = original, watches, group
        self.launches = 0  # what a test or a debugging session reads to see that FSDP calls us

    def __call__(self, padded_unsharded_flat_param: Any) -> Any:
        self.launches += 1
        return timed_launch(self.watches.for_group(self.group),
                            lambda: self.original(padded_unsharded_flat_param), synchronous=True)


class TimedReduction:
    """The communication hook of every FSDP1 module under a root: the hook in force (FSDP's default, or the
    user's), run with the state FSDP passes (each module's own: its process group and division factors) and
    timed on that state's group. Its signature is FSDP's: ``(state, grad)`` under ``NO_SHARD``,
    ``(state, grad, output)`` when sharded."""

    def __init__(self, watches: Stopwatches, default_group: Any) -> None:
        from torch.distributed.algorithms._comm_hooks.default_hooks import allreduce_hook, reduce_scatter_hook

        self.watches = watches
        self.default_group = default_group  # timing a user's hook whose state names no process group
        self.hook: Any = None  # None: FSDP's default
        self._defaults = (allreduce_hook, reduce_scatter_hook)
        self.launches = 0

    def __call__(self, state: Any, grad: Any, output: Any = None) -> None:
        self.launches += 1
        hook = self._defaults[output is not None] if self.hook is None else self.hook
        arguments = (state, grad) if output is None else (state, grad, output)
        group = getattr(state, "process_group", None)
        timed_launch(self.watches.for_group(self.default_group if group is None else group),
                     lambda: hook(*arguments), synchronous=True)

    # FSDP tells a low-precision hook (torch's fp16/bf16 compression, which casts the gradient itself, so
    # FSDP must not) by ``state._comm_hook in LOW_PRECISION_HOOKS``, a comparison: ours compares equal to the
    # user's hook it runs, so that FSDP treats it as that hook.
    def __eq__(self, other: object) -> bool:
        return other is self or (self.hook is not None and other is self.hook)

    def __hash__(self) -> int:
        return id(self)


def attach(watches: Stopwatches, model: Any) -> bool:
    """Time the collectives of ``model``, an FSDP1 module (the root, in practice), and of the FSDP1 modules
    under it; True if any are timed. A model that is not itself FSDP1 but has FSDP1 modules inside is left alone: only a
    root may take a communication hook, and which modules are roots is known only once the model runs (a wrapper the
    hook was not handed may hold it, ``bottleneck_exporter.hook.collective.enclosing_wrapper``;
    else ``attach_roots``)."""
    fsdp = fsdp_class()
    if fsdp is None or not isinstance(model, fsdp):
        return False
    try:
        found = [m._handle for m in model.modules() if isinstance(m, fsdp) and m._handle is not None]
    except Exception:
        log.info("bottleneck hook: this torch's FSDP1 has no flat-parameter handles where expected; its "
                 "collectives are not timed", exc_info=True)
        return False
    timed = False
    for handle in found:
        current = handle.__dict__.get("_all_gather_flat_param")
        if isinstance(current, TimedFlatParamAllGather):
            current.watches = watches  # attached already: a new session's clock
            timed = True
        elif not getattr(handle, "_use_fake_all_gather", False) and watches.for_group(handle.process_group) is not None:
            handle._all_gather_flat_param = TimedFlatParamAllGather(handle._all_gather_flat_param, watches,
                                                                    handle.process_group)
            timed = True
    return _attach_reduction(watches, model, fsdp) or timed


def attach_roots(watches: Stopwatches, model: Any) -> bool:
    """Time the collectives of the FSDP1 modules inside ``model`` that no other FSDP1 module contains, each
    as a root; True if any are timed. Only for a model that nothing wraps (the caller knows it: found nothing
    on the stack, or the framework says so): each of those modules is then a root of its own. Under a wrapper
    the hook was not handed, they would not be, and the wrapper's root must take the hooks instead."""
    fsdp = fsdp_class()
    dist = sys.modules.get("torch.distributed")
    # FSDP1 modules exist only in a process with a process group: a single-process job is left at once.
    if fsdp is None or dist is None or not dist.is_initialized() or isinstance(model, fsdp):
        return False
    timed = False
    for root in _outermost(model, fsdp):
        timed = attach(watches, root) or timed
    return timed


def _outermost(module: Any, fsdp: Any) -> list[Any]:
    """The FSDP1 modules under ``module`` that no other FSDP1 module under it contains, and that FSDP has not
    already made part of another root's tree (``_is_root`` False: a root that ran holds it)."""
    found: list[Any] = []
    for child in getattr(module, "children", tuple)():
        if not isinstance(child, fsdp):
            found += _outermost(child, fsdp)
        elif getattr(child, "_is_root", None) is not False:
            found.append(child)
    return found


def launches(model: Any) -> dict[str, int]:
    """All-gathers and gradient reductions timed so far on ``model``'s FSDP1 modules."""
    counts = {"all_gather": 0, "reduce": 0}
    fsdp = fsdp_class()
    if fsdp is None:
        return counts
    for module in model.modules():
        if isinstance(module, fsdp):
            gather = module._handle.__dict__.get("_all_gather_flat_param") if module._handle else None
            counts["all_gather"] += getattr(gather, "launches", 0)
            counts["reduce"] += getattr(module.__dict__.get(_ATTACHED), "launches", 0)
    return counts


def _attach_reduction(watches: Stopwatches, root: Any, fsdp: Any) -> bool:
    attached = root.__dict__.get(_ATTACHED)
    if attached is not None:
        attached.watches = watches
        return True
    from torch.distributed.fsdp import ShardingStrategy

    states = [m for m in root.modules() if isinstance(m, fsdp)]
    if any(s.sharding_strategy in (ShardingStrategy.HYBRID_SHARD, ShardingStrategy._HYBRID_SHARD_ZERO2)
           for s in states):
        log.info("bottleneck hook: FSDP's hybrid sharding (HSDP) takes no communication hook: its gradient "
                 "reductions are not timed (its all-gathers are)")
        return False
    if any(s._comm_hook is not None for s in states):
        log.info("bottleneck hook: the FSDP model's communication hook was registered before the hook saw the "
                 "model, so its gradient reductions are not timed; pass the FSDP model to instrument() and "
                 "register your hook after it (with layers wrapped and the model not: after the first step)")
        return False
    if any(getattr(s._handle, "_use_fake_reduce", False) for s in states):
        return False
    if watches.for_group(root.process_group) is None:
        return False
    from torch.distributed.algorithms._comm_hooks.default_hooks import DefaultState

    reduction = TimedReduction(watches, root.process_group)
    # What FSDP's register_comm_hook does, with each module's own process group (a module may shard over
    # another group than the root's, or keep its gradients local), and without its check that ``root`` is
    # the root: that check runs FSDP's lazy initialization, which, before the first forward, would make root
    # whatever module it is called on.
    for state in states:
        state._comm_hook, state._comm_hook_state = reduction, DefaultState(state.process_group)

    def register_comm_hook(state: object, hook: Any) -> None:
        """FSDP's ``register_comm_hook``, made to swap the hook the bottleneck hook times."""
        if reduction.hook is not None:
            raise AssertionError("A communication hook is already registered")
        if not callable(hook):
            raise ValueError(f"The communication hook must be callable but got {hook}")
        reduction.hook = hook
        for fsdp_state in states:
            fsdp_state._comm_hook_state = state

    root.__dict__["register_comm_hook"] = register_comm_hook
    root.__dict__[_ATTACHED] = reduction
    return True
