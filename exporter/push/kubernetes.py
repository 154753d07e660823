"""The pod each pushing rank runs in, as the hook reported it from inside the pod: one info series per rank::

    bottleneck_train_kubernetes_info{training_job="bert",rank="3",namespace="ml",pod="bert-worker-3",
                                     container="trainer"} 1.0

Absent for ranks outside Kubernetes. Join it onto any per-rank series::

    rate(bottleneck_train_steps_total[5m])
      * on (training_job, rank) group_left (namespace, pod, container) bottleneck_train_kubernetes_info
"""

from __future__ import annotations

from prometheus_client.metrics_core import GaugeMetricFamily

from bottleneck_exporter.push.store import RankState
from bottleneck_exporter.wire.schema import JOB_LABEL


def kubernetes_info(ranks: list[RankState]) -> GaugeMetricFamily:
    family = GaugeMetricFamily("bottleneck_train_kubernetes_info",
                               "Kubernetes pod a training rank runs in, as its hook reports it; value is always 1.",
                               labels=[JOB_LABEL, "rank", "namespace", "pod", "container"])
    for state in sorted(ranks, key=lambda s: (s.snapshot.job, s.snapshot.rank)):
        pod = state.snapshot.kubernetes
        if pod is not None and pod.pod:
            family.add_metric([state.snapshot.job, str(state.snapshot.rank), pod.namespace, pod.pod,
                               pod.container], 1.0)
    return family
