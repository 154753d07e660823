"""Where the push socket lives: one list shared by the exporter (where to bind) and the hook (where to send).

Standard library only (the hook imports it inside training processes). Order of preference:
``/run/bottleneck-exporter/push.sock`` (systemd ``RuntimeDirectory=``, or a hostPath in Kubernetes), then
``$XDG_RUNTIME_DIR/bottleneck-exporter/push.sock``, then ``/tmp/bottleneck-exporter-<uid>/push.sock``: the
fallbacks let an exporter started by a non-root user still receive from that user's training runs.
"""

from __future__ import annotations

import os
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
