"""The kubelet's pod-resources API: which pod and container each GPU (or MIG instance) is allocated to.

Calls ``v1.PodResourcesLister/List`` over the kubelet's Unix socket (``/var/lib/kubelet/pod-resources/
kubelet.sock``), as dcgm-exporter does, and keeps the devices of the GPU resources: ``nvidia.com/gpu``,
``nvidia.com/gpu.shared`` (time-slicing renamed) and ``nvidia.com/mig-<profile>``. The device plugin reports
a GPU by its UUID (``GPU-…``), a MIG instance by its MIG UUID (``MIG-…``) and a time-sliced replica as
``GPU-…::<n>``: the UUID is what the ``uuid`` label of the GPU series holds, so the result joins on it.

The messages are built from a descriptor written here rather than from protoc output: six fields of four
messages are read (numbers from kubelet's ``pkg/apis/podresources/v1/api.proto``), unknown fields (CPU ids,
memory, topology, DRA) are skipped by the parser, and no generated module ties the code to one protobuf
release (protoc output refuses an older runtime). ``grpc`` and ``protobuf`` are imported on the first call, so
a node without the socket never loads them; they come with the ``kubernetes`` extra
(``pip install 'bottleneck-exporter[kubernetes]'``, which the image installs), and where they are missing the
call fails naming it.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import Any

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
LIST_METHOD = "/v1.PodResourcesLister/List"
DEFAULT_GPU_RESOURCES = r"nvidia\.com/(gpu(\.shared)?|mig-.+)"
# The distributions the client needs, as pyproject.toml's extra names them.
CLIENT_MISSING = ("the kubelet client (grpcio, protobuf) is not installed: "
                  "pip install 'bottleneck-exporter[kubernetes]'")
# The device plugin's deviceIDStrategy=uuid (its default); the index strategy's "0", "1" are not joinable.
_UUID = re.compile(r"(GPU|MIG)-[0-9A-Za-z-]+")

# (message, [(field, number, type, repeated, message type)]) — the subset of the v1 API this reader uses.
# Types as google.protobuf.descriptor_pb2.FieldDescriptorProto numbers them.
_STRING, _MESSAGE = 9, 11
_MESSAGES: tuple[tuple[str, tuple[tuple[str, int, int, bool, str], ...]], ...] = (
    ("ListPodResourcesRequest", ()),
    ("ListPodResourcesResponse", (("pod_resources", 1, _MESSAGE, True, "PodResources"),)),
    ("PodResources", (("name", 1, _STRING, False, ""), ("namespace", 2, _STRING, False, ""),
                      ("containers", 3, _MESSAGE, True, "ContainerResources"))),
    ("ContainerResources", (("name", 1, _STRING, False, ""),
                            ("devices", 2, _MESSAGE, True, "ContainerDevices"))),
    ("ContainerDevices", (("resource_name", 1, _STRING, False, ""), ("device_ids", 2, _STRING, True, ""))),
)


@functools.cache
def messages() -> dict[str, Any]:
    """Message classes by name, in a pool of their own (another ``v1`` package in the default pool would clash)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    assert descriptor_pb2.FieldDescriptorProto.TYPE_STRING == _STRING
    assert descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE == _MESSAGE
    file = descriptor_pb2.FileDescriptorProto(name="bottleneck_exporter/podresources_v1.proto", package="v1",
                                              syntax="proto3")
    for name, fields in _MESSAGES:
        message = file.message_type.add(name=name)
        for field, number, kind, repeated, type_name in fields:
            message.field.add(
                name=field, number=number, type=kind, type_name=f".v1.{type_name}" if type_name else None,
                label=(descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED if repeated
                       else descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL))
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"v1.{name}"))
            for name, _ in _MESSAGES}


@dataclasses.dataclass(frozen=True, order=True)
class GpuAllocation:
    uuid: str  # GPU-… or MIG-…, the replica suffix (::n) removed
    resource: str  # nvidia.com/gpu, nvidia.com/mig-1g.10gb, ...
    namespace: str
    pod: str
    container: str


class PodResourcesError(RuntimeError):
    """The socket is there but the kubelet did not answer (down, too slow, or the socket is not ours to use), or
    the client to ask it with is not installed."""


def gpu_allocations(response: Any, resources: str = DEFAULT_GPU_RESOURCES) -> tuple[list[GpuAllocation], list[str]]:
    """(allocations, device IDs of GPU resources that are not UUIDs) from a ListPodResourcesResponse.

    Each allocation once: the replicas of one time-sliced GPU held by one container are one allocation."""
    wanted = re.compile(resources)
    found: set[GpuAllocation] = set()
    unjoinable: list[str] = []
    for pod in response.pod_resources:
        for container in pod.containers:
            for devices in container.devices:
                if not wanted.fullmatch(devices.resource_name):
                    continue
                for device_id in devices.device_ids:
                    uuid = device_id.split("::", 1)[0]
                    if not _UUID.fullmatch(uuid):
                        unjoinable.append(device_id)
                        continue
                    found.add(GpuAllocation(uuid, devices.resource_name, pod.namespace, pod.name, container.name))
    return sorted(found), unjoinable


def list_pod_resources(socket: str, timeout: float) -> Any:
    """One ``List`` call; raises PodResourcesError when no answer comes within ``timeout`` seconds, or when the
    client is not installed (the ``kubernetes`` extra)."""
    try:
        import grpc  # deferred: only nodes with a kubelet socket pay for loading it

        classes = messages()
    except ImportError:
        raise PodResourcesError(f"{socket}: {CLIENT_MISSING}") from None
    with grpc.insecure_channel(f"unix:{socket}") as channel:
        call = channel.unary_unary(LIST_METHOD,
                                   request_serializer=classes["ListPodResourcesRequest"].SerializeToString,
                                   response_deserializer=classes["ListPodResourcesResponse"].FromString)
        try:
            return call(classes["ListPodResourcesRequest"](), timeout=timeout)
        except grpc.RpcError as err:
            code = err.code() if isinstance(err, grpc.Call) else None
            details = err.details() if isinstance(err, grpc.Call) else str(err)
            raise PodResourcesError(f"{socket}: {getattr(code, 'name', 'error')}: {details}") from None
