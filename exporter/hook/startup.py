"""When this process started, on the clock the hook times steps with: start-up is the time from there to the
end of the first step (imports, building the model and the dataset, the first step's compile and warm-up).

Reads ``/proc/self/stat`` (``starttime``: clock ticks after boot, on the boot clock) once, when a session
starts; the session sends the start-up in every datagram from its first step on::

    bottleneck_train_startup_seconds{training_job="resnet",rank="0"} 84.2
"""

from __future__ import annotations

import os
import time
from time import perf_counter

from bottleneck_exporter.procfs import USER_HZ, read_stat


def process_start(procfs: str = "/proc") -> float | None:
    """The ``perf_counter()`` time at which this process started (a time in the past), None where /proc does not
    tell (not Linux, or /proc not mounted)."""
    try:
        stat = read_stat(procfs, os.getpid())
        if stat is None:
            return None
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - stat.starttime / USER_HZ
    except (OSError, ValueError, AttributeError):
        return None
    return perf_counter() - max(age, 0.0)
