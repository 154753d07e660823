"""Where a GPU's processes may run against where the GPU sits: the CPUs and NUMA nodes of ``PID/status``
(``Cpus_allowed_list``, ``Mems_allowed_list``) beside the GPU's CPU and memory affinity (NVML, as
``nvidia-smi topo -m`` prints them), and what to call a GPU process in labels.

A rank pinned to the socket far from its GPU (``taskset``, ``numactl``, a cpuset cgroup, a launcher that binds
rank N to socket N % 2 while the GPUs are numbered the other way) copies every batch across the socket
interconnect. Used by the gpu collector, which exposes::

    bottleneck_gpu_process_local_cpus_ratio{gpu="1",uuid="GPU-…",process="train.py",local_rank="1"} 0.0
    bottleneck_gpu_process_local_memory_ratio{gpu="1",uuid="GPU-…",process="train.py",local_rank="1"} 0.5
"""

from __future__ import annotations

import dataclasses

from bottleneck_exporter.procfs import Allowed, read_argv, read_comm, read_environ_value
from bottleneck_exporter.training.discovery import MAX_LABEL_LENGTH, script_name


@dataclasses.dataclass(frozen=True)
class Affinity:
    """The CPUs and NUMA nodes near one GPU."""

    cpus: frozenset[int]
    memory_nodes: frozenset[int]


@dataclasses.dataclass(frozen=True)
class Placement:
    local_cpus_ratio: float  # share of the CPUs the process may run on that are near its GPU
    local_memory_ratio: float  # share of the NUMA nodes it may allocate from that are near its GPU


def place(allowed: Allowed, near: Affinity) -> Placement | None:
    """How much of what ``allowed`` lets the process use is near the GPU; None when either side is empty
    (a kernel or driver that tells nothing)."""
    if not allowed.cpus or not allowed.memory_nodes or not near.cpus or not near.memory_nodes:
        return None
    return Placement(len(allowed.cpus & near.cpus) / len(allowed.cpus),
                     len(allowed.memory_nodes & near.memory_nodes) / len(allowed.memory_nodes))


def process_labels(procfs: str, pid: int) -> tuple[str, str]:
    """(process, local_rank) as the training collector names a trainer: its script and LOCAL_RANK, so that a
    GPU series joins the trainer's series on them. A notebook kernel reads ``ipykernel_launcher``."""
    comm = (read_comm(procfs, pid) or "").strip() or "unknown"
    process = script_name(read_argv(procfs, pid), comm)[:MAX_LABEL_LENGTH]
    local_rank = (read_environ_value(procfs, pid, "LOCAL_RANK") or "")[:MAX_LABEL_LENGTH]
    return process, local_rank

