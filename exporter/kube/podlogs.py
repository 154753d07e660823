"""Pod and container names for a pod UID and container ID, from the names of the kubelet's log files.

The cgroup gives IDs; people and kube-state-metrics use names. The kubelet names what it writes under
``/var/log`` after both (the layout every log shipper — fluent-bit, Vector, Promtail — parses)::

    /var/log/pods/<namespace>_<pod>_<pod uid>/<container>/0.log
    /var/log/containers/<pod>_<namespace>_<container>-<container id>.log   (a symlink to the file above)

Only the directory listings are read (names, never the logs), through the host's root (``--path.rootfs``), so
no mount beyond the one the exporter already has. Pod, namespace and container names cannot contain ``_``,
which makes the file names unambiguous. Limits: a symlink name longer than 255 bytes is cut by the kubelet,
losing the container ID's tail (then only a pod with a single container gets its container named); a kubelet
with a non-default ``podLogsDir`` leaves ``/var/log/pods`` empty (then no names: the pod UID still comes out).
"""

from __future__ import annotations

import dataclasses
import os
import re

PODS_DIR = "var/log/pods"
CONTAINERS_DIR = "var/log/containers"

_POD_DIR = re.compile(r"^([a-z0-9-]{1,63})_([a-z0-9.-]{1,253})_([0-9a-f-]{32,36})$")
_CONTAINER_LINK = re.compile(r"^([a-z0-9.-]{1,253})_([a-z0-9-]{1,63})_([a-z0-9-]{1,63})-([0-9a-f]{64})\.log$")


@dataclasses.dataclass(frozen=True)
class PodIdentity:
    namespace: str
    pod: str
    container: str  # "" when it cannot be told (several containers and no container ID)
    uid: str


@dataclasses.dataclass(frozen=True)
class PodLogIndex:
    """One listing of the kubelet's log directories."""

    pods: dict[str, tuple[str, str]]  # pod uid -> (namespace, pod)
    containers: dict[str, tuple[str, str, str]]  # container id -> (namespace, pod, container)
    pod_containers: dict[str, tuple[str, ...]]  # pod uid -> container directory names

    def lookup(self, pod_uid: str, container_id: str) -> PodIdentity | None:
        """Names for the IDs a cgroup gave; None when the kubelet wrote nothing for that pod."""
        pod = self.pods.get(pod_uid)
        by_id = self.containers.get(container_id) if container_id else None
        if pod is None:
            if by_id is None:
                return None
            return PodIdentity(by_id[0], by_id[1], by_id[2], pod_uid)
        if by_id is not None and by_id[:2] == pod:
            container = by_id[2]
        else:
            names = self.pod_containers.get(pod_uid, ())
            container = names[0] if len(names) == 1 else ""
        return PodIdentity(pod[0], pod[1], container, pod_uid)


def parse_listing(pod_dirs: list[str], container_links: list[str],
                  pod_containers: dict[str, list[str]] | None = None) -> PodLogIndex:
    """Build the index from directory entry names; names that do not follow the layout are ignored."""
    pods: dict[str, tuple[str, str]] = {}
    children: dict[str, tuple[str, ...]] = {}
    for name in pod_dirs:
        match = _POD_DIR.match(name)
        if match:
            namespace, pod, uid = match.groups()
            pods[uid] = (namespace, pod)
            children[uid] = tuple(sorted((pod_containers or {}).get(name, ())))
    containers: dict[str, tuple[str, str, str]] = {}
    for name in container_links:
        match = _CONTAINER_LINK.match(name)
        if match:
            pod, namespace, container, container_id = match.groups()
            containers[container_id] = (namespace, pod, container)
    return PodLogIndex(pods, containers, children)


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def read_pod_logs(rootfs: str, pod_uids: set[str]) -> PodLogIndex:
    """List the kubelet's log directories under ``rootfs``; container directories only for ``pod_uids``."""
    pods_dir = os.path.join(rootfs, PODS_DIR)
    pod_dirs = _listdir(pods_dir)
    wanted = [name for name in pod_dirs if name.rsplit("_", 1)[-1] in pod_uids]
    pod_containers = {name: _listdir(os.path.join(pods_dir, name)) for name in wanted}
    return parse_listing(pod_dirs, _listdir(os.path.join(rootfs, CONTAINERS_DIR)), pod_containers)
