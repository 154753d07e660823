"""A Kubernetes node's files as the exporter reads them: one pod's log layout under the host root (the kubelet's
``/var/log/pods`` and ``/var/log/containers``), and a /proc whose trainer runs in that pod's container."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.conftest import FIXTURES

CGROUPS = FIXTURES / "kube" / "cgroup"
# The pod (namespace ml, bert-worker-0) and its trainer container, as the kubelet names their log files.
UID = "0d2f5c8e-4b1a-4f6e-9c3d-7a8b9c0d1e2f"
CONTAINERD_ID = "3f1e4a9b2c7d8e0f1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f7081"
POD_DIR = f"ml_bert-worker-0_{UID}"
LINK = f"bert-worker-0_ml_trainer-{CONTAINERD_ID}.log"


def host_root(tmp_path: Path, containers: tuple[str, ...] = ("trainer", "log-shipper")) -> Path:
    """A host root with the kubelet's log layout for one pod (the symlink points where the kubelet's does)."""
    root = tmp_path / "root"
    pod_dir = root / "var" / "log" / "pods" / POD_DIR
    for container in containers:
        (pod_dir / container).mkdir(parents=True)
        (pod_dir / container / "0.log").write_text("")
    links = root / "var" / "log" / "containers"
    links.mkdir(parents=True)
    (links / LINK).symlink_to(pod_dir / "trainer" / "0.log")
    return root


def fixture_proc(tmp_path: Path) -> Path:
    proc = tmp_path / "proc"
    shutil.copytree(FIXTURES / "training" / "proc-t0", proc, symlinks=True)
    # PID 4242 (train.py, LOCAL_RANK=0, with DataLoader workers) runs in the pod's trainer container.
    (proc / "4242" / "cgroup").write_text((CGROUPS / "v2-systemd-containerd.cgroup").read_text())
    return proc
