"""Kubernetes manifests (deploy/kubernetes): rendered by kustomize, validated offline against the Kubernetes
schemas (kubernetes-validate --strict) and the prometheus-operator CRD schemas, and checked against the
exporter's own flags and config loader.
"""

from __future__ import annotations

import copy
import functools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import requests
import yaml

from bottleneck_exporter.cli import build_parser
from bottleneck_exporter.heuristics.catalogue import resolve
from bottleneck_exporter.kube.podresources import DEFAULT_SOCKET as DEFAULT_POD_RESOURCES_SOCKET
from bottleneck_exporter.web.server import parse_listen_address
from bottleneck_exporter.wire.paths import DEFAULT_SOCKET
from tests.conftest import FIXTURES, ROOT, require_tool
from tests.kustomize import KUBERNETES, by_kind, import_generator, render

KUBERNETES_VERSION = "1.30.0"  # oldest release we claim to support; kubernetes-validate bundles its schemas
GENERATOR = KUBERNETES / "generate_prometheusrule.py"
DASHBOARDS_GENERATOR = KUBERNETES / "generate_dashboards.py"
DASHBOARD_FILES = sorted((ROOT / "grafana" / "dashboards").glob("*.json"))
CRDS = FIXTURES / "crds"
CORE_KINDS = {"ServiceAccount", "DaemonSet", "Service", "ConfigMap"}
CRD_KINDS = {"ServiceMonitor": "servicemonitors", "PrometheusRule": "prometheusrules"}
# Shipped beside the kustomizations, applied on their own (deploy/kubernetes/alertmanager/).
OTHER_CRD_KINDS = {"AlertmanagerConfig": "alertmanagerconfigs"}








def strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The CRD's openAPIV3Schema with unknown fields refused (what `kubectl apply --validate=strict` does)."""
    schema = copy.deepcopy(schema)

    def tighten(node: Any) -> None:
        if isinstance(node, dict):
            if ("properties" in node and "additionalProperties" not in node
                    and not node.get("x-kubernetes-preserve-unknown-fields")):
                node["additionalProperties"] = False
            for value in node.values():
                tighten(value)
        elif isinstance(node, list):
            for value in node:
                tighten(value)

    tighten(schema)
    return schema


class _CrdLoader(yaml.SafeLoader):
    """YAML 1.1 reads a bare `=` (the AlertmanagerConfig CRD's matchType enum) as the `value` tag; Kubernetes
    reads YAML 1.2, where it is the string "="."""


_CrdLoader.add_constructor("tag:yaml.org,2002:value", lambda loader, node: loader.construct_scalar(node))


@functools.cache
def crd_schema(kind: str, api_version: str = "monitoring.coreos.com/v1") -> dict[str, Any]:
    plural = {**CRD_KINDS, **OTHER_CRD_KINDS}[kind]
    crd = yaml.load((CRDS / f"monitoring.coreos.com_{plural}.yaml").read_text(), Loader=_CrdLoader)
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == api_version.split("/")[1]]
    return strict_schema(version["schema"]["openAPIV3Schema"])


def crd_errors(obj: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft7Validator(crd_schema(obj["kind"], obj["apiVersion"]))
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(obj)]


KUSTOMIZATIONS = ["base", "overlays/gpu-nodes", "overlays/kube-prometheus-stack",
                  "overlays/beside-node-exporter-and-dcgm", "overlays/beside-node-exporter-and-dcgm-only"]


def test_every_kustomization_is_rendered_by_the_tests() -> None:
    """An overlay added (or renamed) without a line here would escape every check below."""
    found = {str(p.parent.relative_to(KUBERNETES)) for p in KUBERNETES.glob("*/**/kustomization.yaml")
             if yaml.safe_load(p.read_text())["kind"] == "Kustomization"}
    assert found == set(KUSTOMIZATIONS)


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_kustomization_renders_every_object(kustomization: str) -> None:
    objects = render(kustomization)
    assert {o["kind"] for o in objects} == CORE_KINDS | set(CRD_KINDS)
    configmaps = [o for o in objects if o["kind"] == "ConfigMap"]
    assert len(configmaps) == 1 + len(DASHBOARD_FILES), "the exporter's config and one per dashboard"
    assert all(len([o for o in objects if o["kind"] == kind]) == 1 for kind in CORE_KINDS - {"ConfigMap"})



@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_core_objects_pass_kubernetes_validate_strict(kustomization: str) -> None:
    for obj in render(kustomization):
        if obj["kind"] in CORE_KINDS:
            try:
                kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
            except kubernetes_validate.ValidationError as err:
                pytest.fail(f"{obj['kind']}/{obj['metadata']['name']}: {err.message} at {list(err.path)}")


def test_kubernetes_validate_cli_accepts_the_rendered_base(tmp_path: Path) -> None:
    """The command users run themselves, on the rendered core objects (offline: schemas ship in the package)."""
    path = tmp_path / "base.yaml"
    path.write_text(yaml.safe_dump_all([o for o in render("base") if o["kind"] in CORE_KINDS]))
    cli = Path(sys.executable).parent / "kubernetes-validate"
    result = subprocess.run([str(cli), "--strict", "-k", KUBERNETES_VERSION, str(path)], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_kubernetes_validate_strict_refuses_an_unknown_field() -> None:
    daemonset = copy.deepcopy(by_kind(render("base"), "DaemonSet"))
    daemonset["spec"]["template"]["spec"]["hostPid"] = True  # the real field is hostPID
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(daemonset, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("kind", sorted(CRD_KINDS))
def test_crd_objects_match_the_prometheus_operator_schema(kind: str) -> None:
    obj = by_kind(render("base"), kind)
    assert obj["apiVersion"] == "monitoring.coreos.com/v1"
    assert crd_errors(obj) == []


def test_crd_schema_refuses_a_misspelled_servicemonitor_field() -> None:
    monitor = copy.deepcopy(by_kind(render("base"), "ServiceMonitor"))
    monitor["spec"]["endpoints"][0]["honourLabels"] = True
    assert any("honourLabels" in error for error in crd_errors(monitor))


def test_prometheusrule_is_generated_from_the_rule_files() -> None:
    """Drift: the committed PrometheusRule holds exactly the groups of prometheus/ and alerts/."""
    result = subprocess.run([sys.executable, str(GENERATOR), "--check"], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    rule = yaml.safe_load((KUBERNETES / "base" / "prometheusrule.yaml").read_text())
    sources = [ROOT / "prometheus" / "recording-rules.yml", ROOT / "alerts" / "alert-rules.yml"]
    expected = [group for source in sources for group in yaml.safe_load(source.read_text())["groups"]]
    assert rule["spec"]["groups"] == expected
    first_line = (KUBERNETES / "base" / "prometheusrule.yaml").read_text().splitlines()[0]
    assert "generate_prometheusrule.py" in first_line


def test_prometheusrule_groups_load_in_promtool(tmp_path: Path) -> None:
    promtool = require_tool("promtool")
    rule = by_kind(render("base"), "PrometheusRule")
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    result = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_daemonset_follows_the_node_exporter_model() -> None:
    spec = by_kind(render("base"), "DaemonSet")["spec"]["template"]["spec"]
    assert spec["hostPID"] is True and spec["hostNetwork"] is True
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert any(t.get("key") == "nvidia.com/gpu" and t["operator"] == "Exists" for t in spec["tolerations"])
    (container,) = spec["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert container["resources"]["requests"] and container["resources"]["limits"]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    for host_path in ("/host/proc", "/host/sys", "/host/root"):
        assert mounts[host_path]["readOnly"] is True, host_path
    volumes = {v["name"]: v for v in spec["volumes"]}
    push = volumes[mounts["/run/bottleneck-exporter"]["name"]]
    assert push["hostPath"]["path"] == "/run/bottleneck-exporter", "training pods reach the socket through it"


def test_gpu_overlay_selects_gpu_nodes_only() -> None:
    base = by_kind(render("base"), "DaemonSet")["spec"]["template"]["spec"]
    gpu = by_kind(render("overlays/gpu-nodes"), "DaemonSet")["spec"]["template"]["spec"]
    assert "nvidia.com/gpu.present" not in base["nodeSelector"]
    assert gpu["nodeSelector"]["nvidia.com/gpu.present"] == "true"
    assert gpu["runtimeClassName"] == "nvidia"


def exporter_args() -> list[str]:
    (container,) = by_kind(render("base"), "DaemonSet")["spec"]["template"]["spec"]["containers"]
    return [arg.replace("$(HOST_IP)", "127.0.0.1") for arg in container["args"]]


def test_daemonset_args_are_exporter_flags() -> None:
    args = build_parser().parse_args(exporter_args())
    assert args.procfs == "/host/proc" and args.sysfs == "/host/sys"
    # The node's IP is substituted by Kubernetes; IPv6 nodes need the brackets.
    assert parse_listen_address(args.listen_address) == ("127.0.0.1", 9847)


def test_push_socket_is_created_in_the_hostpath_training_pods_mount() -> None:
    """--push.socket must lie in the hostPath directory, at the path the hook tries first (no configuration in
    the training pods), or the pods' datagrams go nowhere."""
    spec = by_kind(render("base"), "DaemonSet")["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    socket = Path(build_parser().parse_args(exporter_args()).push_socket)
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == str(socket.parent))
    volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    assert volume["hostPath"]["path"] == str(socket.parent)
    assert str(socket) == DEFAULT_SOCKET
    (init,) = spec["initContainers"]
    assert any(m["name"] == mount["name"] for m in init["volumeMounts"]), "the init container hands the dir over"


def test_service_and_monitor_point_at_the_metrics_port() -> None:
    objects = render("base")
    (container,) = by_kind(objects, "DaemonSet")["spec"]["template"]["spec"]["containers"]
    port = {p["name"]: p["containerPort"] for p in container["ports"]}["metrics"]
    service = by_kind(objects, "Service")
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["ports"][0]["targetPort"] == "metrics" and service["spec"]["ports"][0]["port"] == port
    monitor = by_kind(objects, "ServiceMonitor")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    assert monitor["spec"]["endpoints"][0]["honorLabels"] is True, "the workload's namespace must survive the scrape"
    # The scrape job is the Service's jobLabel value: the rules' exporter_job, or BottleneckExporterDown
    # (up{job="bottleneck-exporter"} == 0) never matches anything.
    job = service["metadata"]["labels"][monitor["spec"]["jobLabel"]]
    assert job == resolve().parameters["exporter_job"]


def test_configmap_is_accepted_by_the_real_exporter(tmp_path: Path, start_exporter: Any) -> None:
    """The ConfigMap's config.yml, mounted where the DaemonSet says, starts a real exporter."""
    (configmap,) = [o for o in render("base") if o["kind"] == "ConfigMap" and "config.yml" in o.get("data", {})]
    daemonset = by_kind(render("base"), "DaemonSet")
    assert configmap["metadata"]["name"] in {v.get("configMap", {}).get("name")
                                             for v in daemonset["spec"]["template"]["spec"]["volumes"]}
    config = tmp_path / "config.yml"
    config.write_text(configmap["data"]["config.yml"])
    mode = build_parser().parse_args(exporter_args()).push_socket_mode
    exporter = start_exporter([f"--config.file={config}", f"--push.socket={tmp_path / 'push.sock'}",
                               f"--push.socket-mode={mode}"])
    assert requests.get(f"{exporter.url}/-/ready", timeout=5).status_code == 200
    assert (tmp_path / "push.sock").stat().st_mode & 0o777 == int(mode, 8)


def test_daemonset_mounts_the_kubelet_pod_resources_directory_read_only_and_no_more() -> None:
    """The kubernetes collector's default socket lies in a read-only mount of exactly that host directory,
    and every other host path is the node-exporter set (plus the push socket's directory, the only writable)."""
    spec = by_kind(render("base"), "DaemonSet")["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    host_paths = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    assert sorted(host_paths.values()) == ["/", "/proc", "/run/bottleneck-exporter", "/sys",
                                           "/var/lib/kubelet/pod-resources"]
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    writable = {name for name in host_paths if not mounts[name].get("readOnly")}
    assert writable == {"push-socket"}
    socket_dir = str(Path(DEFAULT_POD_RESOURCES_SOCKET).parent)
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == socket_dir)
    assert mount["readOnly"] is True
    assert host_paths[mount["name"]] == socket_dir, "the kubelet's directory, mounted where the collector looks"


def test_gpu_overlay_runs_the_exporter_as_root_without_any_capability() -> None:
    """The kubelet's pod-resources socket is root-only; root here must not mean privileged."""
    spec = by_kind(render("overlays/gpu-nodes"), "DaemonSet")["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    context = container["securityContext"]
    assert context["runAsUser"] == 0 and context["runAsNonRoot"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert context["allowPrivilegeEscalation"] is False and context["readOnlyRootFilesystem"] is True
    assert "privileged" not in context
    base = by_kind(render("base"), "DaemonSet")["spec"]["template"]["spec"]
    assert "runAsUser" not in base["containers"][0]["securityContext"], "the base stays non-root"


# ---- dashboards for kube-prometheus-stack's Grafana ----

def dashboard_configmaps(kustomization: str = "base") -> list[dict[str, Any]]:
    return [o for o in render(kustomization)
            if o["kind"] == "ConfigMap" and o["metadata"]["labels"].get("app.kubernetes.io/component") == "dashboards"]


def test_dashboard_configmaps_are_generated_from_the_committed_dashboards() -> None:
    """Drift: the ConfigMaps hold every grafana/dashboards/*.json byte for byte."""
    result = subprocess.run([sys.executable, str(DASHBOARDS_GENERATOR), "--check"], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    data = {key: value for cm in dashboard_configmaps() for key, value in cm["data"].items()}
    assert data == {path.name: path.read_text() for path in DASHBOARD_FILES}
    first_line = (KUBERNETES / "base" / "grafana-dashboards.yaml").read_text().splitlines()[0]
    assert "generate_dashboards.py" in first_line


def test_stale_dashboard_configmaps_are_reported(tmp_path: Path) -> None:
    """The check fails when a dashboard changes and the ConfigMaps were not regenerated."""
    generate_dashboards = import_generator("generate_dashboards")
    for path in DASHBOARD_FILES:
        (tmp_path / path.name).write_text(path.read_text())
    (tmp_path / DASHBOARD_FILES[0].name).write_text(DASHBOARD_FILES[0].read_text().replace("Bottleneck", "Bottle"))
    assert generate_dashboards.render(tmp_path) != (KUBERNETES / "base" / "grafana-dashboards.yaml").read_text()
    assert generate_dashboards.render() == (KUBERNETES / "base" / "grafana-dashboards.yaml").read_text()


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_every_dashboard_is_labelled_for_the_grafana_sidecar(kustomization: str) -> None:
    configmaps = dashboard_configmaps(kustomization)
    assert len(configmaps) == len(DASHBOARD_FILES)
    for configmap in configmaps:
        assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"  # a string: labels are strings
        (text,) = configmap["data"].values()
        assert json.loads(text)["uid"], configmap["metadata"]["name"]


def overlay_bundles() -> dict[str, str]:
    return dict(import_generator("generate_prometheusrule").OVERLAY_BUNDLES)


@pytest.mark.parametrize("overlay", sorted(overlay_bundles()))
def test_an_overlay_with_its_own_rule_bundle_ships_that_bundles_dashboards(overlay: str) -> None:
    """Under the node-exporter bundles the default dashboards would read bottleneck_* host (and GPU) series
    nobody exports: the overlay's ConfigMaps hold its bundle's dashboards instead, same names, same keys."""
    bundle = overlay_bundles()[overlay]
    data = {key: value for cm in dashboard_configmaps(f"overlays/{overlay}") for key, value in cm["data"].items()}
    committed = sorted((ROOT / "grafana" / "bundles" / bundle).glob("*.json"))
    assert data == {path.name: path.read_text() for path in committed}
    assert all(bundle in json.loads(text)["title"] for text in data.values())
    kustomization = yaml.safe_load((KUBERNETES / "overlays" / overlay / "kustomization.yaml").read_text())
    assert {"path": "grafana-dashboards.yaml"} in kustomization["patches"]


def test_every_overlay_dashboard_patch_is_written_and_checked_by_the_generator() -> None:
    """One line in OVERLAY_BUNDLES wires an overlay's rules and dashboards; a patch no entry writes would drift."""
    generate_dashboards = import_generator("generate_dashboards")
    committed = generate_dashboards.committed_files()
    assert set(committed) == {KUBERNETES / "base" / "grafana-dashboards.yaml",
                              *(KUBERNETES / "overlays").glob("*/grafana-dashboards.yaml")}
    assert {generate_dashboards.patch_target(overlay) for overlay in overlay_bundles()} <= set(committed)
    for target, render_text in committed.items():
        assert render_text() == target.read_text(), target


def test_dashboard_configmaps_fit_kubernetes_size_limits() -> None:
    """1 MiB per object (etcd), and client-side apply's last-applied-configuration annotation (the whole object
    as JSON) under the 256 KiB limit on all annotations, so even `kubectl apply` without --server-side works."""
    overlays = [configmap for overlay in overlay_bundles() for configmap in dashboard_configmaps(f"overlays/{overlay}")]
    for configmap in [*dashboard_configmaps(), *overlays]:
        as_json = json.dumps(configmap, separators=(",", ":"))
        assert len(as_json.encode()) < 1024 * 1024
        assert len(as_json.encode()) + sum(map(len, configmap["metadata"]["annotations"].values())) < 256 * 1024, \
            configmap["metadata"]["name"]


def test_kube_prometheus_stack_overlay_is_selected_by_the_charts_prometheus() -> None:
    """kube-prometheus-stack's Prometheus selects ServiceMonitors and PrometheusRules by `release: <release>`;
    the overlay builds on gpu-nodes (the GPU Operator labels GPU nodes and creates the nvidia RuntimeClass)."""
    objects = render("overlays/kube-prometheus-stack")
    for kind in CRD_KINDS:
        assert by_kind(objects, kind)["metadata"]["labels"]["release"] == "kube-prometheus-stack", kind
        assert crd_errors(by_kind(objects, kind)) == []
    spec = copy.deepcopy(by_kind(objects, "DaemonSet")["spec"])
    spec["template"]["spec"]["containers"][0]["args"].pop()  # the preset (next test)
    assert spec == by_kind(render("overlays/gpu-nodes"), "DaemonSet")["spec"]
    assert "release" not in by_kind(objects, "DaemonSet")["metadata"]["labels"]


def test_every_overlay_beside_kube_prometheus_stack_gets_its_release_label_from_one_component() -> None:
    """The label is written once (components/kube-prometheus-stack): a release of another name is one edit."""
    component = KUBERNETES / "components" / "kube-prometheus-stack"
    assert yaml.safe_load((component / "kustomization.yaml").read_text())["kind"] == "Component"
    for overlay in BESIDE_OVERLAYS:
        kustomization = yaml.safe_load((KUBERNETES / "overlays" / overlay / "kustomization.yaml").read_text())
        assert [(KUBERNETES / "overlays" / overlay / c).resolve() for c in kustomization["components"]] == [component]


# overlay -> (the preset it runs, the collectors that preset runs, whether its gpu collector exports only what
# dcgm-exporter lacks). kube-prometheus-stack always runs node-exporter: its overlay runs beside it by default.
BESIDE_OVERLAYS = {"kube-prometheus-stack": ("beside-node-exporter", ["gpu", "kubernetes", "training"], False),
                   "beside-node-exporter-and-dcgm": ("beside-node-exporter-and-dcgm",
                                                     ["gpu", "kubernetes", "training"], True),
                   "beside-node-exporter-and-dcgm-only": ("beside-node-exporter-and-dcgm-only", ["training"], False)}


@pytest.mark.parametrize(("overlay", "preset", "collectors", "only_unique"),
                         [(overlay, *expected) for overlay, expected in BESIDE_OVERLAYS.items()])
def test_beside_overlay_runs_the_preset_with_the_config_file(overlay: str, preset: str, collectors: list[str],
                                                              only_unique: bool, tmp_path: Path) -> None:
    """The overlay is gpu-nodes' plus the preset, and the real parts built from its args and its ConfigMap leave
    the host to node_exporter, and beside dcgm-exporter the duplicated GPU series (or all of them) to it (the
    config file must not turn a collector back on)."""
    from bottleneck_exporter import parts
    from bottleneck_exporter.config import load_yaml
    from bottleneck_exporter.training.registry import TrainingRegistry

    objects = render(f"overlays/{overlay}")
    (container,) = by_kind(objects, "DaemonSet")["spec"]["template"]["spec"]["containers"]
    base = by_kind(render("overlays/gpu-nodes"), "DaemonSet")["spec"]["template"]["spec"]
    assert not [arg for arg in base["containers"][0]["args"] if arg.startswith("--collector.preset")]
    assert container["args"] == [*base["containers"][0]["args"], f"--collector.preset={preset}"]
    args = [arg.replace("$(HOST_IP)", "127.0.0.1") for arg in container["args"]]
    args = [arg for arg in args if not arg.startswith(("--config.file", "--push."))]
    (configmap,) = [o for o in objects if o["kind"] == "ConfigMap" and "config.yml" in o.get("data", {})]
    config = tmp_path / "config.yml"
    config.write_text(configmap["data"]["config.yml"])
    built = parts.build_collectors(build_parser().parse_args([*args, "--collector.gpu.profile=" + str(
        FIXTURES / "gpu-profiles" / "hopper-4x-h100.yaml")]), load_yaml(str(config)), TrainingRegistry())
    assert sorted(built) == collectors
    assert "gpu" not in built or (built["gpu"].exported is not None) == only_unique  # type: ignore[attr-defined]


def test_dcgm_only_overlay_has_the_base_daemonset_on_gpu_nodes_without_gpu_access() -> None:
    """No gpu or kubernetes collector: no NVML (RuntimeClass, NVIDIA_* variables), no kubelet socket, so not
    root. What is left is the base's DaemonSet, on GPU nodes (where the trainers are), with the preset."""
    overlay = "beside-node-exporter-and-dcgm-only"
    spec = copy.deepcopy(by_kind(render(f"overlays/{overlay}"), "DaemonSet")["spec"])
    gpu_nodes = by_kind(render("overlays/gpu-nodes"), "DaemonSet")["spec"]["template"]["spec"]
    assert spec["template"]["spec"]["nodeSelector"] == gpu_nodes["nodeSelector"]
    assert spec["template"]["spec"]["containers"][0]["args"].pop() == f"--collector.preset={overlay}"
    base = copy.deepcopy(by_kind(render("base"), "DaemonSet")["spec"])
    base["template"]["spec"]["nodeSelector"] = gpu_nodes["nodeSelector"]
    (container,) = base["template"]["spec"]["containers"]
    container["env"] = [e for e in container["env"] if not e["name"].startswith("NVIDIA_")]
    container["volumeMounts"] = [m for m in container["volumeMounts"] if m["name"] != "pod-resources"]
    base["template"]["spec"]["volumes"] = [v for v in base["template"]["spec"]["volumes"]
                                           if v["name"] != "pod-resources"]
    assert spec == base
    assert "pod-resources" in {v["name"] for v in by_kind(render("base"), "DaemonSet")["spec"]["template"]["spec"]
                               ["volumes"]}, "the base still mounts it for the kubernetes collector"


@pytest.mark.parametrize("overlay", BESIDE_OVERLAYS)
def test_beside_overlay_crd_objects_match_the_prometheus_operator_schema(overlay: str) -> None:
    """The overlay replaces the PrometheusRule with its bundle's: it must still be one the operator accepts and
    the chart's Prometheus selects."""
    objects = render(f"overlays/{overlay}")
    for kind in CRD_KINDS:
        assert crd_errors(by_kind(objects, kind)) == [], kind
        assert by_kind(objects, kind)["metadata"]["labels"]["release"] == "kube-prometheus-stack", kind


def test_every_overlay_prometheusrule_is_written_and_checked_by_the_generator() -> None:
    """Regression: the generator knew one overlay's PrometheusRule; another overlay's could drift unchecked."""
    generate_prometheusrule = import_generator("generate_prometheusrule")
    committed = generate_prometheusrule.committed_files()
    assert set(committed) == {KUBERNETES / "base" / "prometheusrule.yaml",
                              *(KUBERNETES / "overlays").glob("*/prometheusrule.yaml")}
    assert {KUBERNETES / "overlays" / overlay / "prometheusrule.yaml" for overlay in BESIDE_OVERLAYS} <= set(committed)
    for target, render_text in committed.items():
        assert render_text() == target.read_text(), target


def test_servicemonitor_drops_the_exporter_pods_own_pod_and_container_target_labels() -> None:
    """Otherwise every host series, and a trainer outside any pod, would say pod="bottleneck-exporter-xxxxx"."""
    (endpoint,) = by_kind(render("base"), "ServiceMonitor")["spec"]["endpoints"]
    drops = [r for r in endpoint["relabelings"] if r["action"] == "labeldrop"]
    assert [r["regex"] for r in drops] == ["pod|container"]


def test_push_socket_is_not_writable_by_every_user_of_the_node() -> None:
    """Regression: the socket was created with mode 0666, so any pod (any user in one) that reached the
    hostPath could push. Now only the exporter's group: pods add it to their supplementalGroups."""
    args = build_parser().parse_args(exporter_args())
    assert int(args.push_socket_mode, 8) & 0o007 == 0, args.push_socket_mode
    spec = by_kind(render("base"), "DaemonSet")["spec"]["template"]["spec"]
    assert spec["securityContext"]["runAsGroup"] == 10001, "docs/deploy.md tells training pods to add this group"


def gpu_operator_service_monitor(monitor: dict[str, Any]) -> dict[str, Any]:
    """The ServiceMonitor the GPU Operator creates for dcgm-exporter from its dcgmExporter.serviceMonitor values."""
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
            "metadata": {"name": "nvidia-dcgm-exporter", "labels": monitor.get("additionalLabels", {})},
            "spec": {"selector": {"matchLabels": {"app": "nvidia-dcgm-exporter"}},
                     "endpoints": [{"port": "gpu-metrics", "honorLabels": monitor.get("honorLabels", False),
                                    "relabelings": monitor.get("relabelings", [])}]}}


def test_gpu_operator_values_give_dcgm_exporter_a_servicemonitor_the_stack_accepts_and_selects() -> None:
    """The shipped Helm values (tests/test_e2e_bundles.py runs their relabelling in a real Prometheus) make a
    ServiceMonitor valid under the CRD schema, selected by the same release label as our overlays'."""
    values = yaml.safe_load((KUBERNETES / "gpu-operator" / "dcgm-exporter-values.yaml").read_text())
    monitor = values["dcgmExporter"]["serviceMonitor"]
    assert monitor["enabled"] is True
    obj = gpu_operator_service_monitor(monitor)
    assert crd_errors(obj) == []
    ours = by_kind(render("overlays/kube-prometheus-stack"), "ServiceMonitor")
    assert obj["metadata"]["labels"]["release"] == ours["metadata"]["labels"]["release"]
    (ours_endpoint,) = ours["spec"]["endpoints"]
    assert monitor["relabelings"][0] in ours_endpoint["relabelings"], "both give instance the node's name alike"
    # Regression guard: Prometheus' spelling (source_labels) is not a RelabelConfig field; the API server drops
    # it and the relabelling silently does nothing.
    misspelled = copy.deepcopy(monitor)
    misspelled["relabelings"][0]["source_labels"] = misspelled["relabelings"][0].pop("sourceLabels")
    assert any("source_labels" in error for error in crd_errors(gpu_operator_service_monitor(misspelled)))


# ---------------------------------------------------------------------------------------- Alertmanager routing


def test_alertmanager_routing_for_kube_prometheus_stack_is_generated_from_the_shipped_config() -> None:
    """alerts/alertmanager.yml and its templates are the source; the AlertmanagerConfig and both values files
    follow them (tests/test_alertmanager.py runs all of them in a real Alertmanager)."""
    generator = import_generator("generate_alertmanager")
    committed = generator.committed_files()
    assert set(committed) == set((KUBERNETES / "alertmanager").iterdir())
    for target, render_text in committed.items():
        assert render_text() == target.read_text(), f"{target} is stale: run {generator.REGENERATE}"
    result = subprocess.run([sys.executable, str(KUBERNETES / "generate_alertmanager.py"), "--check"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_alertmanagerconfig_matches_the_prometheus_operator_schema() -> None:
    resource = yaml.safe_load((KUBERNETES / "alertmanager" / "alertmanagerconfig.yaml").read_text())
    assert resource["apiVersion"] == "monitoring.coreos.com/v1alpha1"
    assert crd_errors(resource) == []
    misspelled = copy.deepcopy(resource)
    misspelled["spec"]["route"]["group_by"] = misspelled["spec"]["route"].pop("groupBy")
    assert any("group_by" in error for error in crd_errors(misspelled)), "Alertmanager's own spelling is refused"
