"""Hugging Face adapter: ``Trainer(..., callbacks=[BottleneckCallback()])``.

The Trainer fetches a step's micro-batches between ``on_step_end`` and the next ``on_step_begin``: that gap is
data wait. Forward is timed by hooks on the model (outermost forward, samples counted from its first tensor
argument), backward runs from the end of the forward to the next micro-batch or ``on_pre_optimizer_step``,
the optimizer from there to ``on_optimizer_step``. The exporter shows::

    bottleneck_train_phase_seconds_total{training_job="train",rank="0",phase="backward"} 1.7
    bottleneck_train_steps_total{training_job="train",rank="0"} 120.0

Importing this module imports transformers.
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback

from bottleneck_exporter.hook.session import Samples, Session
from bottleneck_exporter.hook.timing import DATA_WAIT, OPTIMIZER, OTHER


class BottleneckCallback(TrainerCallback):
    """TrainerCallback that measures every optimizer step and pushes it to bottleneck-exporter."""

    def __init__(self, *, job: str | None = None, samples: Samples = None, address: str | None = None,
                 interval: float | None = None) -> None:
        self._options: dict[str, Any] = {"job": job, "samples": samples, "address": address, "interval": interval}
        self.session: Session | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["session"] = None
        return state

    def _guard(self, where: str, action: Any) -> None:
        session = self.session
        if session is None or not session.active:
            return
        try:
            action(session)
        except Exception:
            session.failed(where)

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None,
                       train_dataloader: Any = None, **kwargs: Any) -> None:
        if self.session is None:
            try:
                self.session = Session(**self._options)
            except Exception:
                return

        def begin(session: Session) -> None:
            if model is not None:
                session.attach_model(model, count_samples_in_forward=True)
            if train_dataloader is not None:
                session.set_loader(train_dataloader)

        self._guard("on_train_begin", begin)

    def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._guard("on_epoch_begin", lambda s: s.mark(DATA_WAIT))

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._guard("on_step_begin", lambda s: s.mark(OTHER))

    def on_substep_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._guard("on_substep_end", lambda s: s.mark(OTHER))

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._guard("on_pre_optimizer_step", lambda s: s.mark(OPTIMIZER))

    def on_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._guard("on_optimizer_step", lambda s: s.end_step())

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._guard("on_step_end", lambda s: s.mark(DATA_WAIT))

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._guard("on_epoch_end", lambda s: s.mark(OTHER))

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._guard("on_train_end", lambda s: s.flush())
