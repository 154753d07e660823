"""The one place that decides what a GPU backend error means for a scrape (nvitop's single choke point).

- NotSupported: the series is left out, and the (device, field) pair is never asked again: consumer cards
  answer "not supported" to a dozen fields on every call, and asking costs a driver round trip each time.
- FunctionNotFound: the driver's NVML is older than the function; logged once per field, then treated
  like NotSupported.
- GpuLost: that GPU is down for the rest of this scrape (``bottleneck_gpu_up`` 0), the others go on; it is
  probed again next scrape in case it came back after a reset.
- BackendError: a passing failure; the series is left out this scrape, logged once per (device, field).
- Any other exception (a binding or driver quirk never seen in the recorded profiles): treated like
  BackendError, with its traceback logged once, so that one odd field costs that field, not every GPU.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from bottleneck_exporter.gpu.backend import BackendError, FunctionNotFound, GpuLost, NotSupported

log = logging.getLogger(__name__)

T = TypeVar("T")


class FieldGuard:
    def __init__(self) -> None:
        self.unsupported: set[tuple[str, str]] = set()
        self._down: set[str] = set()
        self._lost_logged: set[str] = set()
        self._missing_logged: set[str] = set()
        self._failure_logged: set[tuple[str, str]] = set()

    def begin_scrape(self) -> None:
        self._down.clear()

    def is_down(self, device: str) -> bool:
        return device in self._down

    def mark_down(self, device: str, reason: str) -> None:
        self._down.add(device)
        if device not in self._lost_logged:
            self._lost_logged.add(device)
            log.warning("GPU %s is lost (%s); reporting it down, the other GPUs go on", device, reason)

    def read(self, device: str, field: str, fn: Callable[..., T], *args: Any) -> T | None:
        """``fn(*args)``, or None when the value is unavailable for any of the reasons above."""
        if device in self._down or (device, field) in self.unsupported:
            return None
        try:
            value = fn(*args)
        except NotSupported:
            self.unsupported.add((device, field))
            return None
        except FunctionNotFound as err:
            self.unsupported.add((device, field))
            if field not in self._missing_logged:
                self._missing_logged.add(field)
                log.warning("GPU field %s unavailable: the driver's NVML lacks the function (%s)", field, err)
            return None
        except GpuLost as err:
            self.mark_down(device, str(err))
            return None
        except BackendError as err:
            self._log_failure(device, field, err)
            return None
        except Exception as err:
            self._log_failure(device, field, err, unexpected=True)
            return None
        if device in self._lost_logged:
            self._lost_logged.discard(device)
            log.warning("GPU %s answers again", device)
        return value

    def _log_failure(self, device: str, field: str, err: Exception, unexpected: bool = False) -> None:
        if (device, field) in self._failure_logged:
            return
        self._failure_logged.add((device, field))
        log.warning("GPU %s: reading %s failed: %s", device, field, err, exc_info=unexpected)
