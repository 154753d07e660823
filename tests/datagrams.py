"""The datagrams the hook sends, as the tests read them: off a socket, and as the exporter exports them."""

from __future__ import annotations

import socket

from bottleneck_exporter.push.schema import Snapshot, validate


def received(sock: socket.socket) -> list[Snapshot]:
    """Every datagram waiting on the non-blocking receiving socket ``sock``, validated."""
    out = []
    while True:
        try:
            out.append(validate(sock.recv(65536)))
        except BlockingIOError:
            return out


def exported(sent: Snapshot, name: str) -> float | None:
    """The value of series ``name`` that the exporter's push receiver exports for the datagram ``sent``."""
    from prometheus_client import CollectorRegistry

    from bottleneck_exporter.push.receiver import PushReceiver
    from bottleneck_exporter.push.store import JobStore

    receiver = PushReceiver(JobStore(max_jobs=4, max_ranks=4, expiry=600))
    receiver.store.accept(sent)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(receiver)
    return registry.get_sample_value(name, {"training_job": sent.job, "rank": str(sent.rank)})
