"""The cumulative histogram of NVML's sub-second GPU-Util samples, one per GPU.

A 15 s average of GPU-Util hides its shape: a GPU that waits for every batch saws between ~0 % and ~100 %
and can average the same as one that runs small kernels at a flat 50 %. NVML keeps the samples behind the
average (nvmlDeviceGetSamples, about six a second); every scrape adds the samples newer than the last one
seen, so PromQL can count both ends over a window::

    bottleneck_gpu_utilization_samples_bucket{gpu="0",uuid="GPU-…",le="0.05"} 412.0
    bottleneck_gpu_utilization_samples_bucket{gpu="0",uuid="GPU-…",le="0.8"} 530.0
    bottleneck_gpu_utilization_samples_count{gpu="0",uuid="GPU-…"} 1080.0
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

from bottleneck_exporter.gpu.backend import UtilizationSample

# "Idle" (<= 5 %), three steps in between, "busy" (> 80 %), "saturated" (> 95 %).
BUCKETS = (0.05, 0.3, 0.5, 0.8, 0.95, 1.0)


class UtilizationHistogram:
    def __init__(self) -> None:
        self.last_seen_us = 0  # passed back to NVML so each sample is counted once
        self._counts = [0] * (len(BUCKETS) + 1)
        self.sum = 0.0

    def observe(self, samples: Iterable[UtilizationSample]) -> None:
        newest = self.last_seen_us
        for sample in samples:
            if sample.timestamp_us <= self.last_seen_us:
                continue
            self._counts[bisect.bisect_left(BUCKETS, sample.value)] += 1
            # Rounded so that adding ratios like 0.41 does not accumulate binary noise in the exposition.
            self.sum = round(self.sum + sample.value, 9)
            newest = max(newest, sample.timestamp_us)
        self.last_seen_us = newest

    def cumulative_buckets(self) -> list[tuple[str, float]]:
        result = []
        running = 0
        for bound, count in zip((*map(str, BUCKETS), "+Inf"), self._counts, strict=True):
            running += count
            result.append((bound, float(running)))
        return result
