"""The training job's label, for the modules that still import it from here (``bottleneck_exporter.diagnose``,
``bottleneck_exporter.status.model``); the datagram's schema is ``bottleneck_exporter.wire.schema``. Delete
this module once they import ``JOB_LABEL`` from there.
"""

from __future__ import annotations

from bottleneck_exporter.wire.schema import JOB_LABEL

__all__ = ["JOB_LABEL"]
