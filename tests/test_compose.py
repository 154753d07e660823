"""The container image (deploy/docker) and the local compose stack (deploy/compose), checked without a Docker
engine: every file a service mounts exists, Prometheus' and Alertmanager's configs pass promtool/amtool with
the files as mounted, Grafana's provisioning points where the dashboards are mounted, and the image runs the
package as a non-root user without torch.
"""

from __future__ import annotations

import fnmatch
import functools
import re
import shlex
import subprocess
from importlib.metadata import distribution
from pathlib import Path
from typing import Any

import yaml

from bottleneck_exporter.cli import DEFAULT_PORT, build_parser
from bottleneck_exporter.heuristics.catalogue import resolve
from bottleneck_exporter.wire.paths import DEFAULT_SOCKET
from tests.conftest import ROOT, require_tool

COMPOSE_DIR = ROOT / "deploy" / "compose"
DOCKERFILE = ROOT / "deploy" / "docker" / "Dockerfile"


@functools.cache
def compose() -> dict[str, Any]:
    return dict(yaml.safe_load((COMPOSE_DIR / "docker-compose.yml").read_text()))


def bind_mounts(service: str) -> dict[str, Path]:
    """Container path → host path of a service's bind mounts from the repository (relative sources)."""
    mounts: dict[str, Path] = {}
    for volume in compose()["services"][service].get("volumes", []):
        source, target = volume.split(":")[:2]
        if source.startswith("."):
            mounts[target] = (COMPOSE_DIR / source).resolve()
    return mounts


def host_path(service: str, container_path: str) -> Path:
    """Where a path inside the container comes from on the host, through the service's bind mounts."""
    for target, source in sorted(bind_mounts(service).items(), key=lambda item: -len(item[0])):
        if container_path == target or container_path.startswith(target.rstrip("/") + "/"):
            return source / container_path[len(target):].lstrip("/")
    raise AssertionError(f"{service}: {container_path} is not mounted from the repository")


def test_stack_has_the_four_services() -> None:
    assert {"exporter", "prometheus", "alertmanager", "grafana"} <= set(compose()["services"])


def test_every_repository_file_a_service_mounts_exists() -> None:
    for name in compose()["services"]:
        for target, source in bind_mounts(name).items():
            assert source.exists(), f"{name}: {source} (mounted at {target}) does not exist"


def test_image_build_points_at_the_dockerfile() -> None:
    builds = [s["build"] for s in compose()["services"].values() if "build" in s]
    assert builds
    for build in builds:
        context = (COMPOSE_DIR / build["context"]).resolve()
        assert context == ROOT and (context / build["dockerfile"]) == DOCKERFILE


def test_exporter_command_is_valid_flags() -> None:
    args = build_parser().parse_args(compose()["services"]["exporter"]["command"])
    assert args.procfs == "/host/proc" and args.listen_address == f":{DEFAULT_PORT}"
    volumes = dict(v.split(":")[1::-1] for v in compose()["services"]["exporter"]["volumes"])
    assert {args.procfs, args.sysfs, args.rootfs} <= set(volumes)
    # Training scripts on the host find the socket where the hook looks first, without configuration.
    socket_dir = str(Path(DEFAULT_SOCKET).parent)
    assert args.push_socket == DEFAULT_SOCKET and volumes[socket_dir] == socket_dir
    # Regression: mode 0666 let every user of the machine push; now the exporter's group (gid 10001) only.
    assert int(args.push_socket_mode, 8) & 0o007 == 0, args.push_socket_mode


def test_prometheus_config_passes_promtool_with_the_mounted_rules(tmp_path: Path) -> None:
    """promtool checks the config and loads every rule file, read from where compose mounts it from."""
    promtool = require_tool("promtool")
    config = yaml.safe_load(host_path("prometheus", "/etc/prometheus/prometheus.yml").read_text())
    config["rule_files"] = [str(host_path("prometheus", path)) for path in config["rule_files"]]
    assert len(config["rule_files"]) == 2
    checked = tmp_path / "prometheus.yml"
    checked.write_text(yaml.safe_dump(config))
    result = subprocess.run([promtool, "check", "config", str(checked)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    (scrape,) = config["scrape_configs"]
    assert scrape["job_name"] == resolve().parameters["exporter_job"]
    assert "honor_labels" not in scrape, "the rules need no honor_labels: the training job is in training_job"
    assert scrape["static_configs"][0]["targets"] == [f"host.docker.internal:{DEFAULT_PORT}"]
    (alertmanager,) = config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]
    host, port = alertmanager.split(":")
    assert host in compose()["services"] and f"{port}:{port}" in compose()["services"][host]["ports"]


def file_settings(node: Any, key: str = "") -> list[tuple[str, str]]:
    """Every ``*_file`` setting in a config tree, as (key, path)."""
    if isinstance(node, dict):
        return [found for k, v in node.items() for found in file_settings(v, k)]
    if isinstance(node, list):
        return [found for v in node for found in file_settings(v, key)]
    return [(key, node)] if key.endswith("_file") and isinstance(node, str) else []


def test_alertmanager_config_passes_amtool_with_the_mounted_templates(tmp_path: Path) -> None:
    amtool = require_tool("amtool")
    source = host_path("alertmanager", "/etc/alertmanager/alertmanager.yml")
    config = yaml.safe_load(source.read_text())
    templates = config.get("templates", [])
    assert templates, "the Alertmanager config should use template files"
    # Template globs are relative to the config file's directory in the container: point them at the mounted
    # directory, then let amtool load them.
    config["templates"] = [str(host_path("alertmanager", str(Path("/etc/alertmanager") / pattern)))
                           for pattern in templates]
    assert all(list(Path(p).parent.glob(Path(p).name)) for p in config["templates"]), config["templates"]
    # Secrets read from files (webhook URL, SMTP password) must be mounted too, or Alertmanager cannot notify.
    for key, path in file_settings(config):
        assert host_path("alertmanager", path).is_file(), f"{key}: {path} is not mounted"
    checked = tmp_path / "alertmanager.yml"
    checked.write_text(yaml.safe_dump(config))
    result = subprocess.run([amtool, "check-config", str(checked)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_grafana_provisioning_finds_the_dashboards_and_prometheus() -> None:
    grafana = compose()["services"]["grafana"]
    provider_file = host_path("grafana", "/etc/grafana/provisioning/dashboards/bottleneck.yml")
    (provider,) = yaml.safe_load(provider_file.read_text())["providers"]
    dashboards = host_path("grafana", provider["options"]["path"])
    assert sorted(p.name for p in dashboards.glob("*.json")), f"no dashboards at {dashboards}"
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert host_path("grafana", home).is_file()
    datasource_file = host_path("grafana", "/etc/grafana/provisioning/datasources/prometheus.yml")
    (datasource,) = yaml.safe_load(datasource_file.read_text())["datasources"]
    host, port = re.fullmatch(r"http://([\w-]+):(\d+)", datasource["url"]).groups()  # type: ignore[union-attr]
    assert host in compose()["services"] and f"{port}:{port}" in compose()["services"][host]["ports"]


# ------------------------------------------------------------------------------------------ Dockerfile


def instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "") for line in lines]


def final_stage() -> list[tuple[str, str]]:
    steps = instructions()
    last_from = max(i for i, (op, _) in enumerate(steps) if op == "FROM")
    return steps[last_from:]


def test_image_is_python_slim_and_runs_as_a_non_root_user() -> None:
    stage = final_stage()
    assert re.fullmatch(r"python:\$\{PYTHON_VERSION\}-slim|python:[\d.]+-slim", stage[0][1])
    users = [arg for op, arg in stage if op == "USER"]
    assert users, "the final stage must switch to a non-root user"
    uid = dict(arg.split("=", 1) for op, arg in stage if op == "ARG" and "=" in arg).get("UID", "")
    user = users[-1].replace("${UID}", uid).split(":")[0]
    assert user not in ("", "root", "0"), users[-1]


def test_image_installs_the_package_without_torch() -> None:
    runs = " ".join(arg for op, arg in instructions() if op == "RUN")
    assert "torch" not in runs.replace("find_spec('torch')", ""), "the daemon image must not install torch"
    package = distribution("bottleneck-exporter")
    unconditional = [dep for dep in package.requires or [] if "extra ==" not in dep]
    assert unconditional and not any(dep.startswith("torch") for dep in unconditional)
    scripts = {ep.name for ep in package.entry_points if ep.group == "console_scripts"}
    entrypoint = [arg for op, arg in final_stage() if op == "ENTRYPOINT"][-1]
    assert yaml.safe_load(entrypoint)[0] in scripts
    assert f"EXPOSE {DEFAULT_PORT}" in [f"{op} {arg}" for op, arg in final_stage()]


def test_every_file_the_image_copies_is_in_the_build_context() -> None:
    patterns = [line.strip() for line in (DOCKERFILE.parent / "Dockerfile.dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]

    def included(path: str) -> bool:
        keep = True
        for pattern in patterns:
            negated = pattern.startswith("!")
            body = pattern.lstrip("!").rstrip("/")
            if fnmatch.fnmatch(path, body) or path.startswith(body + "/"):
                keep = negated
        return keep

    for op, arg in instructions():
        if op == "COPY" and "--from" not in arg:
            *sources, _ = shlex.split(arg)
            for source in sources:
                assert (ROOT / source).exists(), source
                assert included(source.rstrip("/")), f"{source} is excluded by Dockerfile.dockerignore"
