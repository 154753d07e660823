"""The push receiver: a thread that reads hook datagrams from a Unix socket (and optionally loopback UDP).

Reads datagrams (``wire.schema.validate``), keeps the latest per job and rank (``store.JobStore``), hands trainer
and DataLoader-worker PIDs to the training-process collector (``TrainingRegistry``), and is itself a
prometheus_client collector::

    bottleneck_push_datagrams_total 5120.0
    bottleneck_push_rejected_total{reason="bad_schema"} 2.0
    bottleneck_train_steps_total{training_job="resnet",rank="0"} 1200.0

Bad input is counted by reason and dropped; nothing a sender does can raise out of the receive loop. On the
Unix socket the kernel tells us the sender's PID and uid (SO_PASSCRED), the PID translated into our PID
namespace, so a trainer in a container is still matched to its process here, a silent rank is kept while that
process runs (``liveness``: a hung trainer stops sending but must not vanish), a rank belongs to the sender
that created it (``store``), and only the sender's descendants are taken as its DataLoader workers. A UDP
datagram carries no credentials: its series are kept, but no process is attributed to it.
"""

from __future__ import annotations

import contextlib
import grp
import logging
import os
import select
import socket
import stat
import struct
import threading
import time
from collections.abc import Iterable

from prometheus_client.metrics_core import Metric

from bottleneck_exporter.push.exposition import families
from bottleneck_exporter.push.liveness import boot_clock
from bottleneck_exporter.push.store import JobStore, RankState
from bottleneck_exporter.training.registry import RegisteredProcess, TrainingRegistry
from bottleneck_exporter.wire.schema import MAX_DATAGRAM_BYTES, REASONS, Rejected, validate

log = logging.getLogger(__name__)

_UCRED = struct.Struct("iII")  # struct ucred: pid, uid, gid
_ANCILLARY = socket.CMSG_SPACE(_UCRED.size)
# Datagrams drained per wake-up before expiry runs again: bounds the time one burst can hold the loop.
_BURST = 512
# Seconds between expiry passes: each pass reads /proc/PID/stat of every silent rank whose process lives,
# which busy wake-ups (one per datagram burst) must not repeat many times a second.
_EXPIRY_INTERVAL = 1.0
_WORKER_LISTS_KEPT = 1024


class PushReceiver:
    """Collector with ``start()``/``stop()``; sockets are bound by ``bind_unix``/``bind_udp`` beforehand."""

    def __init__(self, store: JobStore, training: TrainingRegistry | None = None) -> None:
        self.store = store
        self.training = training
        self.unix_path: str | None = None
        self.udp_address: tuple[str, int] | None = None
        self._sockets: list[tuple[socket.socket, bool]] = []  # (socket, is_unix)
        self._lock = threading.Lock()
        self._datagrams = 0
        self._rejected = dict.fromkeys(REASONS, 0)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._draining = False  # the thread has datagrams in hand (settle() waits for them)
        # trainer PID → (worker PIDs its datagram named, those that descend from it): /proc is walked again
        # only when the list changes.
        self._workers: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = {}

    # -- sockets ---------------------------------------------------------------------------------------
    def bind_unix(self, path: str, mode: int = 0o660, group: str | None = None) -> None:
        """Bind a Unix datagram socket at ``path``; raises OSError/ValueError with a readable message."""
        _remove_stale_socket(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
            # bind() creates the file with the process umask: start owner-only, widen after chmod/chown, so
            # the socket is never briefly writable by everyone.
            old_umask = os.umask(0o177)
            try:
                sock.bind(path)
            finally:
                os.umask(old_umask)
            if group is not None:
                os.chown(path, -1, _group_id(group))
            os.chmod(path, mode)
        except BaseException:
            sock.close()
            raise
        sock.setblocking(False)
        self.unix_path = path
        self._sockets.append((sock, True))

    def bind_udp(self, host: str, port: int) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_DGRAM)
        try:
            sock.bind((host, port))
        except BaseException:
            sock.close()
            raise
        sock.setblocking(False)
        self.udp_address = sock.getsockname()[:2]
        self._sockets.append((sock, False))

    # -- lifecycle -------------------------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is None and self._sockets:
            self._thread = threading.Thread(target=self._run, name="push-receiver", daemon=True)
            self._thread.start()
            where = [f"unix://{self.unix_path}"] if self.unix_path else []
            where += [f"udp://{self.udp_address[0]}:{self.udp_address[1]}"] if self.udp_address else []
            log.info("push receiver listening on %s", ", ".join(where))

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        for sock, _ in self._sockets:
            sock.close()
        self._sockets.clear()
        if self.unix_path is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.unix_path)

    def _run(self) -> None:
        socks = {sock.fileno(): (sock, is_unix) for sock, is_unix in self._sockets}
        next_expiry = 0.0
        while not self._stop.is_set():
            try:
                ready, _, _ = select.select(list(socks), [], [], _EXPIRY_INTERVAL)
                self._draining = bool(ready)  # before the first recv: settle() then sees a queue or this
                for fd in ready:
                    sock, is_unix = socks[fd]
                    self._drain(sock, is_unix)
                self._draining = False
                if time.monotonic() >= next_expiry:
                    next_expiry = time.monotonic() + _EXPIRY_INTERVAL
                    self._expire()
            except Exception:
                if self._stop.is_set():
                    return  # sockets closed under us by stop()
                log.exception("push receiver loop error; continuing")
                self._stop.wait(1.0)

    def settle(self, timeout: float = 1.0) -> bool:
        """Wait at most ``timeout`` seconds until every datagram queued now has been handled; True once it has.
        For a caller that knows its senders have exited (``run``, once its command has): their last datagrams are
        then in the exposition. The queues are checked before the thread's flag, which it raises before taking a
        datagram off them, so a datagram is always in one of the two."""
        deadline = time.monotonic() + timeout
        while True:
            queued = [sock for sock, _ in self._sockets]
            with contextlib.suppress(OSError, ValueError):  # closed by stop()
                queued, _, _ = select.select(queued, [], [], 0)
            if not queued and not self._draining:
                return True
            if time.monotonic() >= deadline or self._thread is None:
                return False
            time.sleep(0.005)

    def _drain(self, sock: socket.socket, is_unix: bool) -> None:
        for _ in range(_BURST):
            try:
                if is_unix:
                    data, ancdata, flags, _ = sock.recvmsg(MAX_DATAGRAM_BYTES + 1, _ANCILLARY)
                    pid, uid = _peer(ancdata)
                else:
                    data, _, flags, _ = sock.recvmsg(MAX_DATAGRAM_BYTES + 1)
                    pid, uid = None, None
            except (BlockingIOError, InterruptedError):
                return
            except OSError as err:
                log.debug("push receive error: %s", err)
                return
            self.handle(data, pid, truncated=bool(flags & socket.MSG_TRUNC), peer_uid=uid)

    def _expire(self) -> None:
        for state in self.store.expire():
            if state.process is not None:
                log.info("push: job %s rank %d: its process %d is gone and it sent nothing for %.0fs, "
                         "forgotten", state.snapshot.job, state.snapshot.rank, state.pid, self.store.expiry)
            else:
                log.info("push: job %s rank %d sent nothing for %.0fs, forgotten", state.snapshot.job,
                         state.snapshot.rank, self.store.expiry)
            self._workers.pop(state.pid, None)
            if self.training is not None:
                self.training.forget(state.pid)

    # -- one datagram ----------------------------------------------------------------------------------
    def handle(self, data: bytes, peer_pid: int | None = None, truncated: bool = False,
               peer_uid: int | None = None) -> bool:
        """Validate and store one datagram; returns whether it was accepted. Never raises. ``peer_pid`` and
        ``peer_uid``: the sender as the kernel reported it (None over UDP)."""
        received = boot_clock()
        with self._lock:
            self._datagrams += 1
        try:
            if truncated:
                raise Rejected("too_large", "datagram truncated")
            state = self.store.accept(validate(data), peer_pid, received, peer_uid)
        except Rejected as err:
            with self._lock:
                self._rejected[err.reason] += 1
            log.debug("push datagram rejected: %s", err)
            return False
        except Exception:  # a bug here must cost one datagram, not the receiver
            with self._lock:
                self._rejected["bad_schema"] += 1
            log.exception("push datagram could not be handled")
            return False
        self._register(state, peer_pid is not None)
        return True

    def _register(self, state: RankState, kernel_named: bool) -> None:
        """Hand the sender and its workers to the training collector: only a sender the kernel named (a PID a
        UDP datagram claims could be anyone's), and of the workers it names only its own descendants."""
        if self.training is None or not kernel_named:
            return
        snap = state.snapshot
        claimed = snap.loader.worker_pids if snap.loader is not None and state.same_pid_namespace else ()
        self.training.register(RegisteredProcess(pid=state.pid, job=snap.job, rank=str(snap.rank),
                                                 local_rank=str(snap.local_rank),
                                                 worker_pids=self._own_workers(state.pid, claimed)))

    def _own_workers(self, trainer: int, claimed: tuple[int, ...]) -> tuple[int, ...]:
        known = self._workers.get(trainer)
        if known is not None and known[0] == claimed:
            return known[1]
        processes = self.store.processes
        own = tuple(pid for pid in claimed if processes is not None and processes.descends_from(pid, trainer))
        if len(own) < len(claimed):
            log.debug("push: PID %d named %d worker PIDs that are not its descendants; ignored them", trainer,
                      len(claimed) - len(own))
        if len(self._workers) >= _WORKER_LISTS_KEPT:
            self._workers.clear()  # trainers that restarted under new PIDs leave entries nobody reads
        self._workers[trainer] = (claimed, own)
        return own

    # -- prometheus_client collector -------------------------------------------------------------------
    def collect(self) -> Iterable[Metric]:
        with self._lock:
            datagrams = float(self._datagrams)
            rejected = {reason: float(count) for reason, count in self._rejected.items()}
        return families(self.store.ranks(), datagrams, rejected, self.store.job_count())

    def rejected(self) -> dict[str, int]:
        with self._lock:
            return dict(self._rejected)


def _peer(ancdata: list[tuple[int, int, bytes]]) -> tuple[int | None, int | None]:
    """(PID, uid) of the sender from SCM_CREDENTIALS; PID 0 means the kernel could not map it into ours."""
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS and len(payload) >= _UCRED.size:
            pid, uid, _gid = _UCRED.unpack_from(payload)
            return (int(pid) if pid > 0 else None), int(uid)
    return None, None


def _group_id(group: str) -> int:
    try:
        return int(group) if group.isdigit() else grp.getgrnam(group).gr_gid
    except KeyError:
        raise ValueError(f"group {group!r} does not exist") from None


def _remove_stale_socket(path: str) -> None:
    """Unlink a socket file nobody listens on; refuse to touch a live socket or any other file."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(info.st_mode):
        raise FileExistsError(f"{path} exists and is not a socket; not replacing it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        probe.connect(path)
    except ConnectionRefusedError:
        os.unlink(path)  # left behind by a previous run that did not shut down cleanly
        return
    except OSError as err:
        raise OSError(err.errno, f"{path}: cannot check whether it is in use: {err.strerror}") from None
    finally:
        probe.close()
    raise OSError(f"{path} is in use by another process (another exporter?)")

