"""How the hook's datagrams leave the training process: non-blocking datagram sockets, never a wait.

Reads ``BOTTLENECK_PUSH_ADDRESS`` (``unix:///path``, ``udp://127.0.0.1:PORT`` or ``off``); without it, sends
to the first of ``bottleneck_exporter.wire.paths.socket_candidates()`` that accepts. Every failure (exporter absent,
restarting, its queue full, permission denied) drops the datagram and counts it in ``dropped``; the next send
simply tries again, so the hook recovers by itself when the exporter comes back. The exporter shows the count
once a datagram gets through::

    bottleneck_train_hook_dropped_datagrams_total{training_job="resnet",rank="0"} 3.0

Each target gets a socket connected to it, so its address is resolved once (a ``udp://`` host name too: it
is looked up again only after the target refuses a datagram).

Fork-safe: a forked child (a DataLoader worker) never sends, checked by PID and by ``os.register_at_fork``,
which also closes the child's copies of the sockets.

A Unix socket is used only in a directory no other user can have planted (``wire.paths.untrusted_directory``),
checked once per path before its first datagram and again after the path stops answering (at most once a
second), never per datagram; a refused path is logged once and skipped.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
import weakref
from typing import Any

from bottleneck_exporter.wire.paths import socket_candidates, untrusted_directory

log = logging.getLogger("bottleneck_exporter.hook")

_transports: weakref.WeakSet[Transport] = weakref.WeakSet()
_RECHECK_SECONDS = 1.0


def _after_fork_in_child() -> None:
    for transport in list(_transports):
        transport.forked()


os.register_at_fork(after_in_child=_after_fork_in_child)


class AddressError(ValueError):
    pass


def parse_address(text: str) -> tuple[int, Any] | None:
    """``unix:///path`` → (AF_UNIX, path); ``udp://host:port`` → (AF_INET[6], (host, port)); ``off`` → None."""
    text = text.strip()
    if text.lower() in ("off", "none", "disabled"):
        return None
    if text.startswith("unix://"):
        path = text[len("unix://"):]
        if not path.startswith("/"):
            raise AddressError(f"BOTTLENECK_PUSH_ADDRESS={text!r}: expected unix:///absolute/path")
        return socket.AF_UNIX, path
    if text.startswith("udp://"):
        host, sep, port = text[len("udp://"):].rpartition(":")
        host = host.strip("[]")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise AddressError(f"BOTTLENECK_PUSH_ADDRESS={text!r}: expected udp://HOST:PORT")
        return (socket.AF_INET6 if ":" in host else socket.AF_INET), (host, int(port))
    raise AddressError(f"BOTTLENECK_PUSH_ADDRESS={text!r}: expected unix:///path, udp://HOST:PORT or off")


class Transport:
    def __init__(self, address: str | None = None) -> None:
        text = address if address is not None else os.environ.get("BOTTLENECK_PUSH_ADDRESS")
        if text is not None and text.strip():
            parsed = parse_address(text)
            self.targets: list[tuple[int, Any]] = [parsed] if parsed is not None else []
        else:
            self.targets = [(socket.AF_UNIX, path) for path in socket_candidates()]
        self.enabled = bool(self.targets)
        self.sent = 0
        self.dropped = 0
        self._pid = os.getpid()
        self._connected: dict[int, socket.socket] = {}  # target index -> a socket connected to it
        self._preferred = 0  # index of the target that worked last
        self._warned: set[str] = set()
        self._directories: dict[str, tuple[bool, float]] = {}  # socket path → (trusted, checked when)
        _transports.add(self)

    def send(self, data: bytes) -> bool:
        """Send one datagram or drop it; never blocks, never raises."""
        if not self.enabled or os.getpid() != self._pid:
            return False
        count = len(self.targets)
        for offset in range(count):
            index = (self._preferred + offset) % count
            family, target = self.targets[index]
            if family == socket.AF_UNIX and not self._trusted(target):
                continue
            try:
                self._send_to(index, data)
            except (FileNotFoundError, ConnectionRefusedError):
                if family == socket.AF_UNIX:
                    self._recheck(target)  # the exporter may come back in a directory made anew
                continue  # nobody listens there (yet): try the next candidate
            except BlockingIOError:
                break  # the exporter's queue is full: it is slow, drop rather than wait
            except PermissionError as err:
                self._warn_once("permission", "cannot send to %s (%s): add this user to the socket's group "
                                "(see docs/hook.md)", target, err.strerror)
                continue
            except OSError as err:
                self._warn_once(f"oserror-{err.errno}", "cannot send to %s: %s", target, err)
                break
            self._preferred = index
            self.sent += 1
            return True
        self.dropped += 1
        return False

    def _send_to(self, index: int, data: bytes) -> None:
        """Send on a socket connected to target ``index``, connecting it first if need be.

        Connected, the kernel resolves the address once, not per datagram: ``sendto`` with a socket path walks
        the path every time, on the training thread, with that kernel code gone cold since the last datagram
        (benchmarks/hook_overhead.py --parts times the send). A peer that went away
        (an exporter restarted binds a new socket at the same path) refuses: connect again and resend, once.
        """
        sock = self._connected.get(index)
        if sock is not None:
            try:
                sock.send(data)
                return
            except ConnectionRefusedError:
                self._disconnect(index)
        family, target = self.targets[index]
        sock = socket.socket(family, socket.SOCK_DGRAM)
        try:
            sock.setblocking(False)
            sock.connect(target)
        except OSError:
            sock.close()
            raise
        self._connected[index] = sock
        sock.send(data)

    def _disconnect(self, index: int) -> None:
        sock = self._connected.pop(index, None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()

    def _trusted(self, path: str) -> bool:
        known = self._directories.get(path)
        if known is not None and (known[0] or time.monotonic() - known[1] < _RECHECK_SECONDS):
            return known[0]
        problem = untrusted_directory(path)
        if problem is not None:
            self._warn_once(f"untrusted-{path}", "not sending to %s: %s; another user could read the "
                            "datagrams (see docs/hook.md)", path, problem)
        self._directories[path] = (problem is None, time.monotonic())
        return problem is None

    def _recheck(self, path: str) -> None:
        known = self._directories.get(path)
        if known is not None and time.monotonic() - known[1] >= _RECHECK_SECONDS:
            del self._directories[path]

    def _warn_once(self, key: str, message: str, *args: Any) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning("bottleneck hook: " + message, *args)

    def forked(self) -> None:
        """In a forked child: this copy must never send; close its file descriptors."""
        self.enabled = False
        self.close()

    def close(self) -> None:
        for index in list(self._connected):
            self._disconnect(index)
