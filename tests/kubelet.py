"""A kubelet's pod-resources API for the tests: a real gRPC server on a Unix socket, and its answers.

``Kubelet`` answers ``/v1.PodResourcesLister/List`` with bytes that ``response(pod(container(devices(...))))``
encodes by hand from the field numbers of kubelet's api.proto (not with the exporter's message classes), so a
wrong field number in the exporter fails the tests. The answers carry fields the exporter does not read (CPU
ids, topology), as a real kubelet's do.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent import futures
from pathlib import Path

import grpc


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def field(number: int, payload: bytes | str) -> bytes:
    data = payload.encode() if isinstance(payload, str) else payload
    return varint(number << 3 | 2) + varint(len(data)) + data


def packed_int64(number: int, values: list[int]) -> bytes:
    return field(number, b"".join(varint(v) for v in values))


def devices(resource: str, *ids: str) -> bytes:
    topology = field(1, varint(1 << 3 | 0) + varint(0))  # TopologyInfo{nodes: [NUMANode{ID: 0}]}
    return field(1, resource) + b"".join(field(2, i) for i in ids) + field(3, topology)


def container(name: str, *device_lists: bytes, cpu_ids: list[int] | None = None) -> bytes:
    body = field(1, name) + b"".join(field(2, d) for d in device_lists)
    return body + (packed_int64(3, cpu_ids) if cpu_ids else b"")


def pod(name: str, namespace: str, *containers: bytes) -> bytes:
    return field(1, name) + field(2, namespace) + b"".join(field(3, c) for c in containers)


def response(*pods: bytes) -> bytes:
    return b"".join(field(1, p) for p in pods)


class Kubelet:
    """A gRPC server implementing PodResourcesLister/List on a Unix socket."""

    def __init__(self, path: Path, answer: Callable[[], bytes]) -> None:
        self.path = path
        self.calls = 0
        self.answer = answer
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))

        def list_handler(request: bytes, context: grpc.ServicerContext) -> bytes:
            assert request == b"", "ListPodResourcesRequest is empty"
            self.calls += 1
            return self.answer()

        handler = grpc.unary_unary_rpc_method_handler(list_handler)  # bytes in, bytes out
        self.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            "v1.PodResourcesLister", {"List": handler}),))
        assert self.server.add_insecure_port(f"unix:{path}") == 1
        self.server.start()

    def stop(self) -> None:
        self.server.stop(grace=None)
