"""The in-process training hook: measures every optimizer step and pushes the numbers to the node's exporter.

Plain PyTorch, one line (see docs/hook.md)::

    from bottleneck_exporter.hook import instrument
    loader = instrument(loader, model=model, optimizer=optimizer)

Lightning: ``bottleneck_exporter.hook.lightning.BottleneckCallback``; Hugging Face:
``bottleneck_exporter.hook.huggingface.BottleneckCallback``; no code change at all: ``bottleneck-exporter run``
(``bottleneck_exporter.hook.auto``, docs/run.md). Importing this package needs neither torch, Lightning nor
transformers: torch is imported only once a model is attached. What the exporter then shows::

    bottleneck_train_phase_seconds_total{training_job="train",rank="0",phase="data_wait"} 10.2
    bottleneck_train_steps_total{training_job="train",rank="0"} 120.0

``instrument``, ``InstrumentedLoader`` and ``Session`` are loaded at their first use, not with the package:
``bottleneck-exporter run`` imports ``hook.auto`` into every Python process of the command it runs, where each
millisecond of start-up is paid by every helper process too.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # not typing's: that module alone would be most of this package's start-up
if TYPE_CHECKING:
    from typing import Any

    from bottleneck_exporter.hook.loader import InstrumentedLoader, instrument
    from bottleneck_exporter.hook.session import Session

__all__ = ["InstrumentedLoader", "Session", "instrument"]

_MODULE_OF = {"InstrumentedLoader": "loader", "instrument": "loader", "Session": "session"}


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
