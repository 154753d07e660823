"""The hook's sender thread: folds, encodes and sends each datagram off the training thread.

A daemon thread wakes every ``interval`` seconds by itself and, when steps were logged since the last
datagram, sends one (folding the step log, reading /proc for worker PIDs, JSON, ``sendto``: 0.2-0.4 ms that
used to sit inside a training step). The training thread does nothing for it: no call, no wake-up (waking a
thread from the training thread measured 20-400 us on a loaded 2-CPU machine, the cost it was to save). The
thread holds the GIL only while it runs Python code, and torch releases the GIL inside its operators, so the
training thread mostly runs beside it. A rank that stops stepping stops sending, as before: a hung rank
falls silent. What it sends shows up as::

    bottleneck_push_datagrams_total 1234.0

Fork-safe: a forked child (a DataLoader worker) has no sender thread and never starts one (``forked()``,
called from the hook's at-fork handler), and never touches a lock the vanished thread might hold.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable


class Sender:
    def __init__(self, send: Callable[[], None], interval: float) -> None:
        self._send = send  # sends a datagram if there is news; never raises (the session guards it)
        self.interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()

    def start(self) -> None:
        if self._thread is None and not self._stop.is_set() and os.getpid() == self._pid:
            self._thread = threading.Thread(target=self._run, name="bottleneck-sender", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        stop = self._stop
        while not stop.wait(self.interval):
            self._send()

    def stop(self, timeout: float = 1.0) -> None:
        """Stop the thread (after the datagram it is sending, if any); it never starts again."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and os.getpid() == self._pid:
            thread.join(timeout)

    def forked(self) -> None:
        """In a forked child: the thread does not exist here, and none may start."""
        self._thread = None
        self._pid = -1
