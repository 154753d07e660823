"""The plain-PyTorch API: ``loader = instrument(loader, model=model, optimizer=optimizer)``.

Wraps the DataLoader so that time inside its iterator's ``__next__`` is data wait, hooks the model's forward
and the optimizer's step, and reads the loader's settings and worker PIDs. The training loop is unchanged;
the exporter then shows::

    bottleneck_train_phase_seconds_total{job="train",rank="0",phase="data_wait"} 10.2
    bottleneck_train_dataloader_num_workers{job="train",rank="0"} 0.0

The wrapper forwards everything else (``len()``, attributes) to the loader, and exceptions of the loader's
iterator pass through untouched.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from typing import Any

from exporter.hook.session import Samples, Session
from exporter.hook.timing import DATA_WAIT, OTHER

log = logging.getLogger("exporter.hook")


def hook_disabled() -> bool:
    return os.environ.get("BOTTLENECK_HOOK_DISABLE", "").strip().lower() in ("1", "true", "yes", "on")


def instrument(loader: Any, model: Any = None, optimizer: Any = None, *, job: str | None = None,
               samples: Samples = None, address: str | None = None, interval: float | None = None,
               session: Session | None = None) -> Any:
    """Return ``loader`` wrapped so every step of the loop over it is measured and pushed to the exporter.

    Without ``optimizer`` each batch is one step. Never raises: if the hook cannot be set up (or
    ``BOTTLENECK_HOOK_DISABLE=1``), the loader is returned as it was.
    """
    if hook_disabled():
        return loader
    try:
        session = session or Session(job=job, samples=samples, address=address, interval=interval)
        has_optimizer = optimizer is not None and session.attach_optimizer(optimizer)
        if model is not None:
            session.attach_model(model)
        session.set_loader(loader)
        return InstrumentedLoader(loader, session, step_per_batch=not has_optimizer)
    except Exception:
        log.warning("bottleneck hook: could not instrument the training loop; running without it",
                    exc_info=True)
        return loader


class InstrumentedLoader:
    def __init__(self, loader: Any, session: Session, step_per_batch: bool) -> None:
        self.loader = loader
        self.bottleneck_session = session
        self._step_per_batch = step_per_batch

    def __iter__(self) -> Iterator[Any]:
        iterator = iter(self.loader)
        session = self.bottleneck_session
        if session.active:
            try:
                # Multi-process iterators keep their worker processes in ``_workers`` (started by iter()).
                workers = getattr(iterator, "_workers", None) or ()
                session.set_loader(self.loader, [w.pid for w in workers if getattr(w, "pid", None)])
            except Exception:
                session.failed("reading DataLoader workers")
        return _InstrumentedIterator(iterator, session, self._step_per_batch)

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)


class _InstrumentedIterator:
    __slots__ = ("_iterator", "_session", "_step_per_batch")

    def __init__(self, iterator: Iterator[Any], session: Session, step_per_batch: bool) -> None:
        self._iterator = iterator
        self._session = session
        self._step_per_batch = step_per_batch

    def __iter__(self) -> _InstrumentedIterator:
        return self

    def __next__(self) -> Any:
        session = self._session
        if session.active:
            try:
                if self._step_per_batch and session.clock._since is not None:
                    session.end_step()
                session.mark(DATA_WAIT)
            except Exception:
                session.failed("before fetching a batch")
        try:
            batch = next(self._iterator)
        except StopIteration:
            if session.active:
                try:
                    session.mark(OTHER)
                    session.flush()
                except Exception:
                    session.failed("end of data")
            raise
        if session.active:
            try:
                session.fetched(batch)
            except Exception:
                session.failed("after fetching a batch")
        return batch
