"""Who is training: job name, ranks and world size from the launcher's environment (torchrun, Slurm, Kubernetes).

Reads environment variables only; becomes the labels of every series of the job::

    bottleneck_train_info{training_job="bert-pretrain",rank="3",local_rank="3",world_size="8",device="cuda:3"} 1.0

In a Kubernetes pod the rank also reports its pod (``bottleneck_train_kubernetes_info``): ``POD_NAME`` and
``POD_NAMESPACE`` (set them from the downward API), else ``HOSTNAME`` (the pod name, unless the pod uses the
host's network) and the service account's namespace file; ``CONTAINER_NAME`` (no downward API field gives
it: write it in the pod spec) for the container.

Job name, first found: the ``job=`` argument, ``BOTTLENECK_JOB``, torchrun's ``TORCHELASTIC_RUN_ID``,
Slurm's ``SLURM_JOB_NAME``-``SLURM_JOB_ID``, the Kubernetes pod name without its replica suffix, the script's
file name; always passed through ``wire.schema.sanitize_job`` so the exporter accepts it.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from collections.abc import Mapping

from bottleneck_exporter.wire.schema import KUBERNETES_PATTERNS, MAX_RANK, sanitize_job

# PyTorchJob / MPIJob replicas ("train-worker-3"), then the random suffix of Job/ReplicaSet pods.
_K8S_REPLICA = re.compile(r"-(master|worker|launcher|chief|ps|evaluator)-\d+$")
_K8S_RANDOM = re.compile(r"(-[0-9a-z]{8,10})?-[0-9a-z]{5}$")
# Mounted into every pod whose service account token is mounted (the default).
SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


@dataclasses.dataclass(frozen=True)
class Identity:
    job: str
    rank: int
    local_rank: int
    world_size: int
    # {"namespace", "pod", "container"}: the names known, when the rank runs in a Kubernetes pod.
    kubernetes: dict[str, str] | None = None


def job_name(given: str | None = None, env: Mapping[str, str] | None = None,
             argv0: str | None = None) -> str:
    env = os.environ if env is None else env
    if given:
        return sanitize_job(given)
    if env.get("BOTTLENECK_JOB"):
        return sanitize_job(env["BOTTLENECK_JOB"])
    run_id = env.get("TORCHELASTIC_RUN_ID", "")
    if run_id and run_id.lower() != "none":
        return sanitize_job(run_id)
    if env.get("SLURM_JOB_ID"):
        name = env.get("SLURM_JOB_NAME")
        return sanitize_job(f"{name}-{env['SLURM_JOB_ID']}" if name else env["SLURM_JOB_ID"])
    pod = env.get("HOSTNAME", "")
    if env.get("KUBERNETES_SERVICE_HOST") and pod:
        stripped = _K8S_REPLICA.sub("", pod)
        if stripped == pod:
            stripped = _K8S_RANDOM.sub("", pod) or pod
        return sanitize_job(stripped)
    script = argv0 if argv0 is not None else (sys.argv[0] if sys.argv and sys.argv[0] else "python")
    base = os.path.basename(script)
    return sanitize_job(base.removesuffix(".py") or "python")


def kubernetes_identity(env: Mapping[str, str] | None = None,
                        namespace_file: str = SERVICE_ACCOUNT_NAMESPACE) -> dict[str, str] | None:
    """The pod this process runs in, from inside it; None outside Kubernetes. A name that is not a valid
    Kubernetes name is left out rather than sent (the receiver would refuse the whole datagram)."""
    env = os.environ if env is None else env
    in_pod = bool(env.get("KUBERNETES_SERVICE_HOST") or env.get("POD_NAME"))
    if not in_pod:
        return None
    namespace = env.get("POD_NAMESPACE", "")
    if not namespace:
        try:
            with open(namespace_file, encoding="utf-8") as file:
                namespace = file.read(256).strip()
        except (OSError, UnicodeDecodeError):
            namespace = ""
    names = {"namespace": namespace, "pod": env.get("POD_NAME") or env.get("HOSTNAME", ""),
             "container": env.get("CONTAINER_NAME", "")}
    return {key: value for key, value in names.items() if value and KUBERNETES_PATTERNS[key].fullmatch(value)}


def _int_env(env: Mapping[str, str], names: tuple[str, ...], default: int, low: int) -> int:
    for name in names:
        value = env.get(name, "").strip()
        if value.isdigit() and low <= int(value) < MAX_RANK:
            return int(value)
    return default


def identify(job: str | None = None, env: Mapping[str, str] | None = None) -> Identity:
    env = os.environ if env is None else env
    return Identity(
        job=job_name(job, env),
        rank=_int_env(env, ("RANK", "SLURM_PROCID"), 0, 0),
        local_rank=_int_env(env, ("LOCAL_RANK", "SLURM_LOCALID"), 0, 0),
        world_size=_int_env(env, ("WORLD_SIZE", "SLURM_NTASKS"), 1, 1),
        kubernetes=kubernetes_identity(env),
    )
