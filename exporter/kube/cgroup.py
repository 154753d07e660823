"""Which pod and container a process runs in, from its ``/proc/PID/cgroup``: the pod UID and the container ID.

The kubelet puts every pod in a cgroup named after its UID and the runtime puts every container in a child
cgroup named after the container ID. The names depend on the cgroup driver and the runtime::

    0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod5f0c…_9e2b.slice/cri-containerd-<id>.scope
    0::/kubepods/besteffort/pod5f0c…-9e2b/<id>                                     (cgroupfs driver)
    11:memory:/kubepods.slice/kubepods-pod5f0c…_9e2b.slice/docker-<id>.scope      (cgroup v1, Guaranteed QoS)
    0::/../../kubepods-besteffort-pod5f0c…_9e2b.slice/crio-<id>.scope            (read from another cgroupns)

Names (namespace, pod, container) are not in the cgroup: ``bottleneck_exporter.kube.podlogs`` finds them from the IDs.
``parse_cgroup`` is pure (text in, identity out); ``read_pod_cgroup`` reads the file through
``bottleneck_exporter.procfs``.
"""

from __future__ import annotations

import dataclasses
import re

from bottleneck_exporter.procfs import read_cgroup

# A pod UID is a UUID (API pods; the systemd driver writes its dashes as underscores) or, for static pods, the
# 32-hex hash of the manifest. The systemd slice carries its parents' names as a prefix: kubepods-burstable-pod…,
# or kubelet-kubepods-besteffort-pod… under kind's nested kubelet.slice.
_POD = re.compile(
    r"^(?:[a-z]+-)*pod"
    r"([0-9a-f]{8}[-_]?[0-9a-f]{4}[-_]?[0-9a-f]{4}[-_]?[0-9a-f]{4}[-_]?[0-9a-f]{12})(?:\.slice)?$"
)
# containerd, CRI-O and dockershim/cri-dockerd scopes (systemd driver), or the bare ID (cgroupfs driver).
# CRI-O's ``crio-conmon-<id>.scope`` holds the monitor process, not the container, and does not match.
_CONTAINER = re.compile(r"^(?:(?:cri-containerd|crio|docker)-)?([0-9a-f]{64})(?:\.scope)?$")


@dataclasses.dataclass(frozen=True)
class PodCgroup:
    pod_uid: str  # with dashes, as the API shows it (metadata.uid)
    container_id: str  # 64 hex digits, without the runtime prefix; "" for a process in the pod's own cgroup


def _parse_path(path: str) -> PodCgroup | None:
    parts = [part for part in path.split("/") if part]
    for index, part in enumerate(parts):
        pod = _POD.match(part)
        if pod is None:
            continue
        uid = pod.group(1).replace("_", "-")
        following = _CONTAINER.match(parts[index + 1]) if index + 1 < len(parts) else None
        return PodCgroup(uid, following.group(1) if following else "")
    return None


def parse_cgroup(text: str) -> PodCgroup | None:
    """The pod (and container, when the process is in one) of a ``/proc/PID/cgroup``; None off Kubernetes.

    cgroup v1 lists one line per hierarchy (``ID:controllers:path``), v2 one line (``0::path``); a line that
    names a container wins over one that names only the pod."""
    found: PodCgroup | None = None
    for line in text.splitlines():
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        identity = _parse_path(fields[2])
        if identity is None:
            continue
        if identity.container_id:
            return identity
        found = found or identity
    return found


def read_pod_cgroup(procfs: str, pid: int) -> PodCgroup | None:
    """``parse_cgroup`` of a live process; None when it is gone or not in a pod."""
    text = read_cgroup(procfs, pid)
    return None if text is None else parse_cgroup(text)
