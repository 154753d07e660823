"""Where the push socket lives: one list shared by the exporter (where to bind) and the hook (where to send).

Standard library only (the hook imports it inside training processes). Order of preference:
``/run/bottleneck-exporter/push.sock`` (systemd ``RuntimeDirectory=``, or a hostPath in Kubernetes), then
``$XDG_RUNTIME_DIR/bottleneck-exporter/push.sock``, then ``/tmp/bottleneck-exporter-<uid>/push.sock``: the
fallbacks let an exporter started by a non-root user still receive from that user's training runs. The hook
sends only into a directory another user cannot have planted (``untrusted_directory``): anyone may create
``/tmp/bottleneck-exporter-<uid>`` first.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping

DEFAULT_SOCKET = "/run/bottleneck-exporter/push.sock"


def socket_candidates(env: Mapping[str, str] | None = None, uid: int | None = None) -> list[str]:
    env = os.environ if env is None else env
    uid = os.getuid() if uid is None else uid
    paths = [DEFAULT_SOCKET]
    runtime = env.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime):
        paths.append(os.path.join(runtime, "bottleneck-exporter", "push.sock"))
    paths.append(f"/tmp/bottleneck-exporter-{uid}/push.sock")
    return paths


def untrusted_directory(path: str, uid: int | None = None) -> str | None:
    """Why the directory holding socket ``path`` might have been planted by another user (who would then read
    every datagram sent there), or None when it cannot have been: a real directory that only its owner may
    write to, owned by root or by ``uid`` (this process's user), or created where only root creates entries
    (the exporter's own runtime directory under /run, handed to its user). A directory that does not exist
    is not a reason: nothing can be sent there yet."""
    uid = os.getuid() if uid is None else uid
    directory = os.path.dirname(path) or "."
    try:
        info = os.lstat(directory)
    except FileNotFoundError:
        return None
    except OSError as err:
        return f"cannot check {directory}: {err.strerror}"
    if not stat.S_ISDIR(info.st_mode):
        return f"{directory} is not a directory (a symbolic link?)"
    if info.st_mode & 0o022:
        return f"{directory} is writable by users other than its owner (mode {stat.S_IMODE(info.st_mode):04o})"
    if info.st_uid in (0, uid):
        return None
    try:
        parent = os.stat(os.path.dirname(directory) or "/")
    except OSError as err:
        return f"cannot check the directory above {directory}: {err.strerror}"
    if parent.st_uid == 0 and not parent.st_mode & 0o022:
        return None
    return f"{directory} belongs to uid {info.st_uid} and sits in a directory other users can write to"
