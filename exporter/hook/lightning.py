"""PyTorch Lightning adapter: ``Trainer(callbacks=[BottleneckCallback()])``.

Maps Lightning's hooks onto the session's phases: from one batch's end to the next batch's start is data wait
(Lightning fetches the next batch and moves it to the device in between), ``training_step`` is forward,
``on_before_backward`` to ``on_after_backward`` is backward, ``on_before_optimizer_step`` to the batch end is
the optimizer step. With ``accumulate_grad_batches`` one step is one optimizer step. The strategy's
``batch_to_device``, which moves each training batch to the device inside the data wait, is timed on its own
(``bottleneck_exporter.hook.transfer``). The exporter shows::

    bottleneck_train_phase_seconds_total{training_job="train",rank="0",phase="forward"} 0.9
    bottleneck_train_steps_total{training_job="train",rank="0"} 120.0

Works with ``pytorch_lightning`` and ``lightning.pytorch``: the callback derives from whichever the script
imported first (Lightning checks the class of its callbacks). Importing this module imports Lightning.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from bottleneck_exporter.hook.session import Samples, Session
from bottleneck_exporter.hook.timing import BACKWARD, DATA_WAIT, FORWARD, OPTIMIZER, OTHER
from bottleneck_exporter.hook.transfer import CopyClock, time_batch_transfers, untime_batch_transfers


def _lightning_callback_base() -> type:
    for name in ("lightning.pytorch", "pytorch_lightning"):
        if name in sys.modules:
            return sys.modules[name].Callback
    for name in ("pytorch_lightning", "lightning.pytorch"):
        try:
            return importlib.import_module(name).Callback
        except ImportError:
            continue
    raise ImportError("bottleneck_exporter.hook.lightning needs pytorch-lightning or lightning installed")


class _BottleneckCallbackLogic:
    """The callback's behaviour, kept apart from Lightning's base class so both packages can share it."""

    def __init__(self, *, job: str | None = None, samples: Samples = None, address: str | None = None,
                 interval: float | None = None) -> None:
        self._options: dict[str, Any] = {"job": job, "samples": samples, "address": address, "interval": interval}
        self.session: Session | None = None
        self._stepped = False

    def __getstate__(self) -> dict[str, Any]:
        # Spawned DDP workers get a pickled copy: each process starts its own session (its own RANK).
        state = dict(self.__dict__)
        state["session"] = None
        return state

    def _active(self) -> Session | None:
        session = self.session
        return session if session is not None and session.active else None

    def _guard(self, where: str, action: Any, *args: Any) -> None:
        session = self._active()
        if session is None:
            return
        try:
            action(session, *args)
        except Exception:
            session.failed(where)

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if self.session is None:
            try:
                self.session = Session(**self._options)
            except Exception:
                return
        def start(session: Session) -> None:
            # Not inside a forward: nothing to find on the stack, the trainer says what wraps the model. The
            # strategy's wrapper (DDP's DistributedDataParallel around the LightningModule) holds the gradient
            # all-reduce: pl_module is the module inside it, which has no collectives of its own. Without one
            # (FSDPStrategy wraps nothing when configure_model wrapped layers by hand), the module's outermost
            # FSDP modules are roots of their own.
            wrapped = getattr(trainer, "model", None)
            alone = wrapped is None or wrapped is pl_module
            session.check_device(pl_module, find_wrapper=False, alone=alone)
            if not alone:
                session.time_collectives(wrapped)
            # The loop moves each batch to the device with the strategy's batch_to_device, inside the data wait.
            copies = session.copies if session.copies is not None else CopyClock()
            if time_batch_transfers(trainer.strategy, copies, lambda: bool(trainer.training)):
                session.copies = copies

        self._guard("on_train_start", start)

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        def start(session: Session) -> None:
            loader = getattr(trainer, "train_dataloader", None)
            if loader is not None:
                session.set_loader(loader)
            session.mark(DATA_WAIT)

        self._guard("on_train_epoch_start", start)

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        def start(session: Session) -> None:
            session.add_batch(batch)
            session.mark(FORWARD)

        self._guard("on_train_batch_start", start)

    def on_before_backward(self, trainer: Any, pl_module: Any, loss: Any) -> None:
        self._guard("on_before_backward", lambda s: s.mark(BACKWARD))

    def on_after_backward(self, trainer: Any, pl_module: Any) -> None:
        self._guard("on_after_backward", lambda s: s.mark(OTHER))

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        def step(session: Session) -> None:
            self._stepped = True
            session.mark(OPTIMIZER)

        self._guard("on_before_optimizer_step", step)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        def end(session: Session) -> None:
            if self._stepped:
                self._stepped = False
                session.end_step()
            session.mark(DATA_WAIT)

        self._guard("on_train_batch_end", end)

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self._guard("on_train_epoch_end", lambda s: s.mark(OTHER))

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        def end(session: Session) -> None:
            untime_batch_transfers(trainer.strategy)
            session.flush()

        self._guard("on_train_end", end)


BottleneckCallback: type = type("BottleneckCallback", (_BottleneckCallbackLogic, _lightning_callback_base()), {
    "__doc__": "Lightning callback that measures every optimizer step and pushes it to bottleneck-exporter.",
    "__module__": __name__,
})
