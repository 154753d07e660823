"""Kubernetes identity of training processes: the cgroup layouts (fixture files, one per layout), the kubelet's
log-directory names, and the training collector's series on a fixture /proc and host root.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from bottleneck_exporter.cli import build_collectors, build_parser
from bottleneck_exporter.kube.cgroup import PodCgroup, parse_cgroup, read_pod_cgroup
from bottleneck_exporter.kube.podlogs import PodIdentity, parse_listing, read_pod_logs
from bottleneck_exporter.kube.processes import ProcessPods
from bottleneck_exporter.training.registry import TrainingRegistry
from tests.conftest import FIXTURES
from tests.kube_node import CGROUPS, CONTAINERD_ID, LINK, POD_DIR, UID, fixture_proc, host_root

CRIO_ID = "9a8b7c6d5e4f30211203f4e5d6c7b8a99a8b7c6d5e4f30211203f4e5d6c7b8a9"

EXPECTED = {
    "v2-systemd-containerd": PodCgroup(UID, CONTAINERD_ID),
    "v2-cgroupfs-containerd": PodCgroup(UID, CONTAINERD_ID),
    "v2-systemd-crio-other-cgroupns": PodCgroup(UID, CRIO_ID),
    "v2-kind-nested-kubelet": PodCgroup(UID, CONTAINERD_ID),
    "v2-static-pod": PodCgroup("6e1c2b0d8f7a4e3b9c5d1a2f3e4b5c6d", CONTAINERD_ID),
    "v1-systemd-docker-guaranteed": PodCgroup(UID, CRIO_ID),
    "v1-cgroupfs-crio": PodCgroup(UID, CRIO_ID),
    # CRI-O's monitor process sits in the pod but in no container.
    "v2-systemd-crio-conmon": PodCgroup(UID, ""),
    "v2-pod-level-no-container": PodCgroup(UID, ""),
    "not-a-pod-user-session": None,
    "not-a-pod-docker-run": None,
}


def test_every_cgroup_fixture_has_an_expectation() -> None:
    assert sorted(path.stem for path in CGROUPS.glob("*.cgroup")) == sorted(EXPECTED)


@pytest.mark.parametrize("layout", sorted(EXPECTED))
def test_cgroup_layout_gives_pod_uid_and_container_id(layout: str) -> None:
    assert parse_cgroup((CGROUPS / f"{layout}.cgroup").read_text()) == EXPECTED[layout]


def test_cgroup_v1_line_naming_the_container_wins_over_a_pod_only_line() -> None:
    text = (f"3:cpu:/kubepods/burstable/pod{UID}\n"
            f"2:memory:/kubepods/burstable/pod{UID}/{CONTAINERD_ID}\n")
    assert parse_cgroup(text) == PodCgroup(UID, CONTAINERD_ID)


@pytest.mark.parametrize("text", ["", "garbage", "0::", f"0::/kubepods/pod{UID[:-1]}/{CONTAINERD_ID}",
                                  "0::/kubepods/burstable/podnot-a-uid/x"])
def test_malformed_cgroup_is_not_a_pod(text: str) -> None:
    assert parse_cgroup(text) is None


def test_cgroup_of_a_vanished_process_is_none(tmp_path: Path) -> None:
    assert read_pod_cgroup(str(tmp_path), 12345) is None


def test_real_proc_self_cgroup_is_read_without_error() -> None:
    """The real kernel's file parses (this test machine is not a Kubernetes pod, so no pod comes out)."""
    text = Path("/proc/self/cgroup").read_text()
    result = parse_cgroup(text)
    assert result is None or result.pod_uid


# ---- names from the kubelet's log directories ----



def test_container_id_gives_namespace_pod_and_container() -> None:
    index = parse_listing([POD_DIR], [LINK], {POD_DIR: ["trainer", "log-shipper"]})
    assert index.lookup(UID, CONTAINERD_ID) == PodIdentity("ml", "bert-worker-0", "trainer", UID)


def test_pod_with_several_containers_and_unknown_container_id_names_no_container() -> None:
    index = parse_listing([POD_DIR], [], {POD_DIR: ["trainer", "log-shipper"]})
    assert index.lookup(UID, CONTAINERD_ID) == PodIdentity("ml", "bert-worker-0", "", UID)


def test_pod_with_one_container_names_it_without_the_container_id() -> None:
    index = parse_listing([POD_DIR], [], {POD_DIR: ["trainer"]})
    assert index.lookup(UID, "") == PodIdentity("ml", "bert-worker-0", "trainer", UID)


def test_container_link_of_another_pod_is_not_trusted_over_the_pod_directory() -> None:
    other = f"other_ml_trainer-{CONTAINERD_ID}.log"
    index = parse_listing([POD_DIR], [other], {POD_DIR: ["a", "b"]})
    assert index.lookup(UID, CONTAINERD_ID) == PodIdentity("ml", "bert-worker-0", "", UID)


def test_names_outside_the_kubelet_layout_are_ignored() -> None:
    index = parse_listing(["README", "ml_pod_not-a-uid", f"Upper_case_{UID}"],
                          ["bert_ml_trainer-short.log", "x.log", f"a_b_c_d-{CONTAINERD_ID}.log"])
    assert index.pods == {} and index.containers == {}
    assert index.lookup(UID, CONTAINERD_ID) is None




def test_read_pod_logs_lists_the_real_directories(tmp_path: Path) -> None:
    index = read_pod_logs(str(host_root(tmp_path)), {UID})
    assert index.pod_containers[UID] == ("log-shipper", "trainer")
    assert index.lookup(UID, CONTAINERD_ID) == PodIdentity("ml", "bert-worker-0", "trainer", UID)


def test_read_pod_logs_without_the_directories_is_empty(tmp_path: Path) -> None:
    index = read_pod_logs(str(tmp_path), {UID})
    assert index.lookup(UID, CONTAINERD_ID) is None


def test_process_in_a_pod_without_log_names_keeps_its_uid(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    (proc / "77").mkdir(parents=True)
    (proc / "77" / "cgroup").write_text((CGROUPS / "v2-systemd-containerd.cgroup").read_text())
    pods = ProcessPods(str(proc), str(tmp_path / "empty-root"))
    assert pods.identify([((77, 1), 77)]) == {(77, 1): PodIdentity("", "", "", UID)}


def test_cgroup_is_read_once_per_process_and_forgotten_when_it_is_gone(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    (proc / "77").mkdir(parents=True)
    cgroup = proc / "77" / "cgroup"
    cgroup.write_text((CGROUPS / "v2-systemd-containerd.cgroup").read_text())
    pods = ProcessPods(str(proc), str(host_root(tmp_path)))
    assert pods.identify([((77, 1), 77)])[(77, 1)].pod == "bert-worker-0"
    cgroup.write_text("0::/\n")  # a process never changes pod: the cached answer stands
    assert pods.identify([((77, 1), 77)])[(77, 1)].pod == "bert-worker-0"
    assert pods.identify([]) == {}
    assert pods.identify([((77, 1), 77)]) == {}, "a new sighting reads the file again"


# ---- the training collector ----

def scrape(procfs: Path, rootfs: Path) -> dict[str, list[dict[str, str]]]:
    args = build_parser().parse_args([f"--path.procfs={procfs}", f"--path.rootfs={rootfs}",
                                      "--collector.disable-defaults", "--collector.training"])
    collector = build_collectors(args, {}, TrainingRegistry())["training"]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)  # type: ignore[arg-type]
    text = generate_latest(registry).decode()
    return {family.name: [sample.labels for sample in family.samples]
            for family in text_string_to_metric_families(text)}




def test_training_series_of_a_trainer_in_a_pod_carry_namespace_pod_and_container(tmp_path: Path) -> None:
    families = scrape(fixture_proc(tmp_path), host_root(tmp_path))
    pod = {"namespace": "ml", "pod": "bert-worker-0", "container": "trainer"}
    in_pod = [labels for name, samples in families.items() for labels in samples
              if labels.get("process") == "train.py" and labels.get("local_rank") == "0"]
    assert in_pod and all(pod.items() <= labels.items() for labels in in_pod)
    names = {name for name, samples in families.items() for labels in samples if pod.items() <= labels.items()}
    assert {"bottleneck_training_cpu_seconds", "bottleneck_training_threads",
            "bottleneck_training_process_info"} <= names
    (info,) = [labels for labels in families["bottleneck_training_process_info"] if labels.get("pod")]
    assert info["uid"] == UID, "kube-state-metrics' kube_pod_info{uid} join key"
    others = [labels for samples in families.values() for labels in samples if labels.get("process") != "train.py"]
    assert others and not any({"namespace", "pod", "container", "uid"} & labels.keys() for labels in others)


def test_trainer_not_in_a_pod_gets_no_kubernetes_labels(tmp_path: Path) -> None:
    """Off Kubernetes nothing changes: no empty namespace/pod/container labels appear."""
    proc = tmp_path / "proc"
    shutil.copytree(FIXTURES / "training" / "proc-t0", proc, symlinks=True)
    (proc / "4242" / "cgroup").write_text((CGROUPS / "not-a-pod-user-session.cgroup").read_text())
    families = scrape(proc, host_root(tmp_path))
    assert families
    assert not any({"namespace", "pod", "container", "uid"} & labels.keys()
                   for samples in families.values() for labels in samples)
