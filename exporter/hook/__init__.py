"""The in-process training hook: measures every optimizer step and pushes the numbers to the node's exporter.

Plain PyTorch, one line (see docs/hook.md)::

    from bottleneck_exporter.hook import instrument
    loader = instrument(loader, model=model, optimizer=optimizer)

Lightning: ``bottleneck_exporter.hook.lightning.BottleneckCallback``; Hugging Face:
``bottleneck_exporter.hook.huggingface.BottleneckCallback``. Importing this package needs neither torch, Lightning
nor transformers: torch is imported only once a model is attached. What the exporter then shows::

    bottleneck_train_phase_seconds_total{training_job="train",rank="0",phase="data_wait"} 10.2
    bottleneck_train_steps_total{training_job="train",rank="0"} 120.0
"""

from __future__ import annotations

from bottleneck_exporter.hook.loader import InstrumentedLoader, instrument
from bottleneck_exporter.hook.session import Session

__all__ = ["InstrumentedLoader", "Session", "instrument"]
