"""The hook sends only into a socket directory that no other user can have planted (bottleneck_exporter.wire.paths).

Runs as root (as CI does) to hand directories to other uids, the way another user on the node would own them.
"""

from __future__ import annotations

import logging
import os
import socket
from pathlib import Path

import pytest

from bottleneck_exporter.hook import transport as transport_module
from bottleneck_exporter.hook.transport import Transport
from bottleneck_exporter.wire.paths import untrusted_directory

OTHER_UID = 65534  # nobody: stands for another user of the node


def listening(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.setblocking(False)
    return sock


def received(sock: socket.socket) -> bytes | None:
    try:
        return sock.recv(65536)
    except BlockingIOError:
        return None


@pytest.fixture
def shared_tmp(tmp_path: Path) -> Path:
    """A directory like /tmp: everyone may create entries in it (sticky)."""
    shared = tmp_path / "tmp"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    return shared


def test_a_fallback_directory_planted_by_another_user_gets_nothing(shared_tmp: Path, caplog) -> None:
    # Regression: with no socket under /run the hook sent to /tmp/bottleneck-exporter-<uid>/push.sock, which
    # another user could create first, and then read every datagram of the job.
    planted = shared_tmp / f"bottleneck-exporter-{os.getuid()}"
    planted.mkdir(mode=0o755)
    os.chown(planted, OTHER_UID, OTHER_UID)
    with listening(planted / "push.sock") as thief:
        hook = Transport(f"unix://{planted}/push.sock")
        with caplog.at_level(logging.WARNING, logger="bottleneck_exporter.hook"):
            assert not any(hook.send(b'{"secret": 1}') for _ in range(5))
        assert received(thief) is None
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and f"belongs to uid {OTHER_UID}" in lines[0], lines
    assert hook.dropped == 5


@pytest.mark.parametrize("case", ["open_to_others", "symlink"])
def test_a_directory_others_can_write_to_or_a_symlink_is_refused(tmp_path: Path, case: str) -> None:
    real = tmp_path / "real"
    real.mkdir()
    directory = real
    if case == "open_to_others":
        os.chmod(real, 0o777)
    else:
        directory = tmp_path / "link"
        directory.symlink_to(real)
    with listening(real / "push.sock") as sock:
        assert not Transport(f"unix://{directory}/push.sock").send(b"x")
        assert received(sock) is None
    assert untrusted_directory(str(directory / "push.sock")) is not None


def test_the_exporters_runtime_directory_and_the_users_own_are_trusted(tmp_path: Path, shared_tmp: Path) -> None:
    # /run/bottleneck-exporter: owned by the exporter's user, in a directory only root writes to.
    runtime = tmp_path / "run" / "bottleneck-exporter"
    runtime.mkdir(parents=True, mode=0o750)
    os.chmod(tmp_path / "run", 0o755)
    os.chown(runtime, OTHER_UID, OTHER_UID)
    # /tmp/bottleneck-exporter-<uid> made by an exporter running as this user.
    own = shared_tmp / f"bottleneck-exporter-{os.getuid()}"
    own.mkdir(mode=0o700)
    for directory in (runtime, own):
        with listening(directory / "push.sock") as sock:
            assert Transport(f"unix://{directory}/push.sock").send(b"x"), directory
            assert received(sock) == b"x"


def test_the_directory_is_checked_once_per_path_not_per_datagram(tmp_path: Path, monkeypatch) -> None:
    checks: list[str] = []
    real_check = transport_module.untrusted_directory

    def counting(path: str, uid: int | None = None) -> str | None:
        checks.append(path)
        return real_check(path, uid)

    monkeypatch.setattr(transport_module, "untrusted_directory", counting)
    with listening(tmp_path / "push.sock") as sock:
        hook = Transport(f"unix://{tmp_path}/push.sock")
        for _ in range(100):
            assert hook.send(b"x")
            assert received(sock) == b"x"  # drained each time: the socket queues only ~10 datagrams
    assert checks == [f"{tmp_path}/push.sock"]


def test_datagrams_go_on_a_connected_socket_and_follow_a_restarted_exporter(tmp_path):
    """The socket's path is resolved once, at connect (not per datagram, which costs a path walk in the
    kernel each time); an exporter that restarts binds a new socket at the same path, which the next send
    reaches by connecting again, without dropping that datagram."""
    path = tmp_path / "push.sock"

    def listen() -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(str(path))
        sock.settimeout(5)
        return sock

    first = listen()
    hook = Transport(f"unix://{path}")
    try:
        assert hook.send(b"one") and first.recv(100) == b"one"
        moved = tmp_path / "moved.sock"
        path.rename(moved)  # connected: the path is not looked up again
        assert hook.send(b"two") and first.recv(100) == b"two"
        first.close()
        moved.unlink()
        second = listen()  # the exporter restarted
        try:
            assert hook.send(b"three") and second.recv(100) == b"three"
            assert (hook.sent, hook.dropped) == (3, 0)
        finally:
            second.close()
    finally:
        hook.close()
