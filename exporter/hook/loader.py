"""The plain-PyTorch API: ``loader = instrument(loader, model=model, optimizer=optimizer)``.

Wraps the DataLoader so that time inside its iterator's ``__next__`` is data wait, hooks the model's forward
and the optimizer's step, and reads the loader's settings and worker PIDs. The training loop is unchanged;
the exporter then shows::

    bottleneck_train_phase_seconds_total{training_job="train",rank="0",phase="data_wait"} 10.2
    bottleneck_train_dataloader_num_workers{training_job="train",rank="0"} 0.0

The wrapper forwards everything else (``len()``, attributes) to the loader, its iterator forwards them to the
loader's iterator, and exceptions of the loader's iterator pass through untouched.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from time import perf_counter
from typing import Any

from bottleneck_exporter.hook.pinning import CHECK_EVERY
from bottleneck_exporter.hook.session import FETCH_ENDS_STEPPED, Samples, Session
from bottleneck_exporter.hook.timing import DATA_WAIT, LOG_LIMIT, OTHER

log = logging.getLogger("bottleneck_exporter.hook")


def hook_disabled() -> bool:
    return os.environ.get("BOTTLENECK_HOOK_DISABLE", "").strip().lower() in ("1", "true", "yes", "on")


def _several(given: Any) -> list[Any]:
    if given is None:
        return []
    return list(given) if isinstance(given, (list, tuple)) else [given]


def instrument(loader: Any, model: Any = None, optimizer: Any = None, *, scaler: Any = None,
               job: str | None = None, samples: Samples = None, address: str | None = None,
               interval: float | None = None, session: Session | None = None) -> Any:
    """Return ``loader`` wrapped so every step of the loop over it is measured and pushed to the exporter.

    ``model`` and ``optimizer`` may each be a list (a GAN's generator and discriminator): with several
    optimizers a step is every optimizer step between two fetches. ``scaler``: AMP's ``GradScaler``, so that
    the steps it skips are counted. Without ``optimizer`` each batch is one step. Called again for the same
    model or optimizer (a loader re-created every epoch), it goes on with the same session. Never raises: if
    the hook cannot be set up (or ``BOTTLENECK_HOOK_DISABLE=1``), the loader is returned as it was.
    """
    if hook_disabled():
        return loader
    try:
        models, optimizers = _several(model), _several(optimizer)
        session = session or Session.of(*optimizers, *models) or Session(
            job=job, samples=samples, address=address, interval=interval)
        for each in optimizers:
            session.attach_optimizer(each)
        for each in models:
            session.attach_model(each)
        if scaler is not None:
            session.attach_scaler(scaler)
        session.set_loader(loader)
        return InstrumentedLoader(loader, session)
    except Exception:
        log.warning("bottleneck hook: could not instrument the training loop; running without it",
                    exc_info=True)
        return loader


def known_batch_sizes(loader: Any, samples: Samples) -> tuple[int, int, int] | None:
    """``(size, batches, last size)`` of one pass over ``loader`` when its batches' sizes are known before
    they are fetched; None when each batch's first dimension must be read.

    Known: a fixed ``samples=N``, or a plain ``torch.utils.data.DataLoader`` over a map-style dataset with
    its own ``BatchSampler`` and ``default_collate``: every batch then holds ``batch_size`` samples but the
    last of a pass, which holds the rest. Why not just read the shape: asking torch for it inside the
    training step costs more than the rest of the hook's per-batch work (benchmarks/hook_overhead.py).
    """
    if isinstance(samples, int) and not isinstance(samples, bool) and samples >= 0:
        return samples, 0, samples
    if samples is not None:
        return None
    # A DataLoader means torch is imported; without it this is some other iterable.
    data = sys.modules.get("torch.utils.data")
    if data is None or type(loader) is not data.DataLoader or isinstance(loader.dataset, data.IterableDataset):
        return None
    batch_sampler = loader.batch_sampler
    if type(batch_sampler) is not data.BatchSampler or loader.collate_fn is not data.default_collate:
        return None
    size = batch_sampler.batch_size
    total = len(batch_sampler.sampler)
    batches = len(batch_sampler)
    if not isinstance(size, int) or size <= 0 or batches <= 0:
        return None
    return size, batches, size if batch_sampler.drop_last else total - (batches - 1) * size


class InstrumentedLoader:
    def __init__(self, loader: Any, session: Session) -> None:
        self.loader = loader
        self.bottleneck_session = session

    def __iter__(self) -> Iterator[Any]:
        return timed(self.loader, iter(self.loader), self.bottleneck_session)

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)


def timed(loader: Any, iterator: Iterator[Any], session: Session) -> _InstrumentedIterator:
    """``iterator``, taken from ``loader``, with each ``__next__`` timed as data wait for ``session``; the
    loader's settings and worker PIDs are read now. Used by ``InstrumentedLoader`` and by the automatic
    instrumentation (``bottleneck_exporter.hook.auto``), which times the iterators ``DataLoader.__iter__`` returns."""
    if session.active:
        try:
            # Multi-process iterators keep their worker processes in ``_workers`` (started by iter()).
            workers = getattr(iterator, "_workers", None) or ()
            pids = [w.pid for w in workers if getattr(w, "pid", None)]
            session.set_loader(loader, pids)
            session.setup.started_iterator(pids)
        except Exception:
            session.failed("reading DataLoader workers")
    sizes = None
    if session.active:
        try:
            sizes = known_batch_sizes(loader, session.samples)
        except Exception:
            session.failed("reading DataLoader batch sizes")
    return _InstrumentedIterator(iterator, session, sizes)


class _InstrumentedIterator:
    """Logs each ``__next__`` of the loader's iterator as data wait and counts the batch's samples.

    This runs once per batch in the middle of the training step, where every Python call and attribute
    lookup is paid with cold caches: the marks are appended to the clock's log inline (see StepClock) and
    the common sample count is done here, on locals. Data wait and "other" are host-only phases: no GPU
    event is recorded for them.
    """

    __slots__ = ("_batch_size", "_batches_left", "_clock", "_count_shapes", "_iterator", "_last_batch_size",
                 "_log", "_session", "_until_pin_check")

    def __init__(self, iterator: Iterator[Any], session: Session,
                 sizes: tuple[int, int, int] | None = None) -> None:
        self._iterator = iterator
        self._session = session
        self._clock = session.clock
        self._log = session.clock.log
        self._count_shapes = session.samples is None
        # With the sizes known, batches are counted down instead of looked at (see known_batch_sizes).
        self._batch_size: int | None = None
        self._batches_left = self._last_batch_size = 0
        # The second batch is the first checked: by then the first forward has told whether the rank is on CUDA.
        self._until_pin_check = 2
        if sizes is not None:
            self._batch_size, self._batches_left, self._last_batch_size = sizes

    def __iter__(self) -> _InstrumentedIterator:
        return self

    def __len__(self) -> int:
        return len(self._iterator)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:
        # What the loader's own iterator has (``_workers``, ``_num_yielded``...), for code that reads it; the
        # slots are this wrapper's own (unset ones must not recurse through here).
        if name in _InstrumentedIterator.__slots__:
            raise AttributeError(name)
        return getattr(self._iterator, name)

    def __next__(self) -> Any:
        session = self._session
        if session.active:
            try:
                if session.end_at_fetch:  # FETCH_ENDS_NOTHING is 0: a fetch with one optimizer ends nothing
                    session.end_step_at_fetch()
                log = self._log
                log.append(DATA_WAIT)
                log.append(perf_counter())
            except Exception:
                session.failed("before fetching a batch")
        try:
            batch = next(self._iterator)
        except StopIteration:
            if session.active:
                try:
                    if session.end_at_fetch == FETCH_ENDS_STEPPED:
                        session.end_step_at_fetch()  # the pass's last step: no fetch will end it
                    session.mark(OTHER)
                except Exception:
                    session.failed("end of data")
            raise
        if session.active:
            try:
                log = self._log
                log.append(OTHER)
                log.append(perf_counter())
                size = self._batch_size
                if size is not None:
                    left = self._batches_left - 1
                    self._batches_left = left
                    self._clock.fetched_samples += size if left else self._last_batch_size
                elif self._count_shapes:
                    # The common batches inline (a tensor, or a tuple/list starting with one), the rest in
                    # Session.add_batch.
                    shape = getattr(batch, "shape", None)
                    if shape is None and type(batch) in (tuple, list) and batch:
                        shape = getattr(batch[0], "shape", None)
                    if shape:
                        self._clock.fetched_samples += shape[0]
                    else:
                        session.add_batch(batch)
                else:
                    session.add_batch(batch)
                pin_check = self._until_pin_check - 1
                if pin_check:
                    self._until_pin_check = pin_check
                else:
                    self._until_pin_check = CHECK_EVERY
                    session.check_pinned(batch)
                if len(log) > LOG_LIMIT:
                    self._clock.fold(wait=False)
            except Exception:
                session.failed("after fetching a batch")
        return batch
