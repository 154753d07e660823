"""The pod and container of each training process: its cgroup for the IDs, the kubelet's log names for names.

Used by the training-process collector, which adds the result to its series (only for processes in a pod;
elsewhere the series are unchanged)::

    bottleneck_training_process_info{process="train.py",local_rank="0",training_job="",discovered_by="gpu",
                                     namespace="ml",pod="bert-worker-0",container="trainer",uid="5f0c…"} 1.0
    bottleneck_training_cpu_seconds_total{process="train.py",local_rank="0",role="main",mode="user",
                                          namespace="ml",pod="bert-worker-0",container="trainer"} 812.4

``uid`` (the pod UID, kube-state-metrics' ``kube_pod_info{uid}``) is on the info series only; it is there even
when the names cannot be found.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from prometheus_client.metrics_core import Metric

from bottleneck_exporter.kube.cgroup import PodCgroup, read_pod_cgroup
from bottleneck_exporter.kube.podlogs import PodIdentity, read_pod_logs

POD_LABELS = ("namespace", "pod", "container")


class ProcessPods:
    """Pod identity of processes; the cgroup is read once per process (identity = pid and start time)."""

    def __init__(self, procfs: str, rootfs: str) -> None:
        self.procfs = procfs
        self.rootfs = rootfs
        self._cgroups: dict[tuple[int, int], PodCgroup | None] = {}

    def identify(self, processes: Iterable[tuple[tuple[int, int], int]]) -> dict[tuple[int, int], PodIdentity]:
        """``{identity: PodIdentity}`` for those of ``(identity, pid)`` that run in a pod."""
        cgroups: dict[tuple[int, int], PodCgroup | None] = {}
        for identity, pid in processes:
            cgroups[identity] = (self._cgroups[identity] if identity in self._cgroups
                                 else read_pod_cgroup(self.procfs, pid))
        self._cgroups = cgroups  # processes no longer asked about are forgotten
        in_pods = {identity: cgroup for identity, cgroup in cgroups.items() if cgroup is not None}
        if not in_pods:
            return {}
        index = read_pod_logs(self.rootfs, {cgroup.pod_uid for cgroup in in_pods.values()})
        return {identity: (index.lookup(cgroup.pod_uid, cgroup.container_id)
                           or PodIdentity("", "", "", cgroup.pod_uid))
                for identity, cgroup in in_pods.items()}


def label_pods(families: Iterable[Metric], pods: Mapping[tuple[str, ...], PodIdentity],
               key: tuple[str, ...], info: Metric | None = None) -> None:
    """Add namespace/pod/container (the names that are known) to every sample whose ``key`` label values name
    a process in ``pods``; the ``info`` family also gets ``uid``."""
    for family in families:
        samples = []
        for sample in family.samples:
            pod = pods.get(tuple(sample.labels[name] for name in key))
            if pod is not None:
                extra = {name: getattr(pod, name) for name in POD_LABELS if getattr(pod, name)}
                if family is info:
                    extra["uid"] = pod.uid
                sample = sample._replace(labels={**sample.labels, **extra})
            samples.append(sample)
        family.samples = samples
