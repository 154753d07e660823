"""GPUs held by pods: one info series per GPU (or MIG instance) and container, from the kubelet's pod-resources
API (``bottleneck_exporter.kube.podresources``), joinable on ``uuid`` with every GPU series::

    bottleneck_gpu_kubernetes_info{uuid="GPU-5e0c…",resource="nvidia.com/gpu",namespace="ml",pod="bert-0",
                                   container="trainer"} 1.0
    bottleneck_gpu_kubernetes_info{uuid="MIG-77a1…",resource="nvidia.com/mig-1g.18gb",namespace="ml",pod="nb-3",
                                   container="lab"} 1.0

Off Kubernetes (no socket), or when the socket is root-only and the exporter is not root, the collector
exports nothing and says so once. The kubelet is asked at most once
per ``refresh-interval`` whatever the number of scrapes, with a ``timeout`` so a stuck kubelet costs a scrape
at most that long; a kubelet that does not answer fails this collector (success 0) until it answers again.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from bottleneck_exporter.collectors.base import Context, register
from bottleneck_exporter.kube.podresources import (
    DEFAULT_GPU_RESOURCES,
    DEFAULT_SOCKET,
    GpuAllocation,
    PodResourcesError,
    gpu_allocations,
    list_pod_resources,
)
from bottleneck_exporter.options import Option, parse_regex, positive_duration

log = logging.getLogger(__name__)


@register(
    "kubernetes",
    help="Pod, namespace and container holding each GPU and MIG instance (kubelet pod-resources API; nothing "
    "off Kubernetes).",
    options=(
        Option("pod-resources-socket", DEFAULT_SOCKET, "The kubelet's pod-resources gRPC socket."),
        Option("timeout", "2s", "How long to wait for the kubelet's answer (at most 1h).", positive_duration(3600)),
        Option("refresh-interval", "10s", "Ask the kubelet at most once per this long (at most 1h); scrapes in "
               "between reuse the answer.", positive_duration(3600)),
        Option("gpu-resource", DEFAULT_GPU_RESOURCES, "Regular expression matching the whole resource name of "
               "the GPU device plugin's resources.", parse_regex),
    ),
)
class KubernetesCollector:
    def __init__(self, ctx: Context, clock: Callable[[], float] = time.monotonic) -> None:
        options: dict[str, Any] = ctx.options
        self.socket = str(options.get("pod-resources-socket", DEFAULT_SOCKET))
        self.timeout = float(options.get("timeout", 2.0))
        self.refresh = float(options.get("refresh-interval", 10.0))
        self.resources = str(options.get("gpu-resource", DEFAULT_GPU_RESOURCES))
        self._clock = clock
        # One kubelet call at a time; concurrent scrapes wait for it and share its answer.
        self._lock = threading.Lock()
        self._polled_at: float | None = None
        self._answer: list[GpuAllocation] | PodResourcesError = []
        self._socket_state = ""
        self._unjoinable_logged = False

    def _socket_usable(self) -> bool:
        """Whether to ask the kubelet. No socket (off Kubernetes) and a socket this user may not connect to
        (the kubelet makes it root-only) are states of the node, not failures: said once, nothing exported."""
        if not os.path.exists(self.socket):
            state = "absent"
        else:
            state = "usable" if os.access(self.socket, os.W_OK) else "forbidden"
        if state != self._socket_state:
            if state == "usable":
                log.info("kubelet pod-resources socket %s found: GPUs are attributed to pods", self.socket)
            elif state == "absent":
                log.info("no kubelet pod-resources socket at %s: GPUs are not attributed to pods (normal off "
                         "Kubernetes)", self.socket)
            else:
                log.warning("kubelet pod-resources socket %s is not writable by uid %d (the kubelet makes it "
                            "root-only): GPUs are not attributed to pods; run the exporter as root "
                            "(overlays/gpu-nodes does, see docs/deploy.md)", self.socket, os.getuid())
            self._socket_state = state
        return state == "usable"

    def _poll(self) -> list[GpuAllocation] | PodResourcesError:
        try:
            response = list_pod_resources(self.socket, self.timeout)
        except PodResourcesError as err:
            return err
        allocations, unjoinable = gpu_allocations(response, self.resources)
        if unjoinable and not self._unjoinable_logged:
            log.warning("kubelet lists GPU device IDs that are not UUIDs (%s): the device plugin runs with "
                        "deviceIDStrategy=index, those GPUs are not attributed to pods", ", ".join(unjoinable[:4]))
            self._unjoinable_logged = True
        return allocations

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            if not self._socket_usable():
                self._polled_at = None
                return
            now = self._clock()
            if self._polled_at is None or now - self._polled_at >= self.refresh:
                self._answer = self._poll()
                self._polled_at = now
            answer = self._answer
        if isinstance(answer, PodResourcesError):
            raise PodResourcesError(str(answer))  # a fresh one: re-raising the cached one would grow its traceback
        info = GaugeMetricFamily(
            "bottleneck_gpu_kubernetes_info",
            "A GPU or MIG instance (uuid, as on the GPU series) allocated to a container by the kubelet; "
            "value is always 1.",
            labels=["uuid", "resource", "namespace", "pod", "container"])
        for allocation in answer:
            info.add_metric([allocation.uuid, allocation.resource, allocation.namespace, allocation.pod,
                             allocation.container], 1.0)
        if info.samples:
            yield info
