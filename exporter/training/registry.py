"""Training processes the exporter has been told about by the in-process hook.

The push receiver writes to it; the training-process collector reads it, so that a trainer and its
DataLoader workers get their roles even when auto-discovery would miss them. Thread-safe: the receiver
runs in its own thread, scrapes run in HTTP threads.
"""

from __future__ import annotations

import dataclasses
import threading


@dataclasses.dataclass(frozen=True)
class RegisteredProcess:
    pid: int
    job: str
    rank: str
    local_rank: str
    worker_pids: tuple[int, ...] = ()


class TrainingRegistry:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_pid: dict[int, RegisteredProcess] = {}

    def register(self, process: RegisteredProcess) -> None:
        with self._lock:
            self._by_pid[process.pid] = process

    def forget(self, pid: int) -> None:
        with self._lock:
            self._by_pid.pop(pid, None)

    def processes(self) -> list[RegisteredProcess]:
        with self._lock:
            return list(self._by_pid.values())
