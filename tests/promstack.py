"""Real Prometheus and Alertmanager processes for the live tests, each on a free loopback port.

    prometheus = Prometheus(tmp_path, targets=[Target("127.0.0.1:9847", "node-a")], rule_files=[...])
    prometheus.start()
    prometheus.query('up{instance="node-a"}')   # → the result vector, or AssertionError with the error

Targets get their ``instance`` label by relabelling (as a real fleet maps addresses to node names), and are
scraped with Prometheus' default ``honor_labels: false`` (what prometheus-operator's overrideHonorLabels
forces): the scrape job owns ``job``, the training job rides in ``training_job``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.server
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import requests
import yaml

from tests.conftest import free_port, require_tool, wait_until

EXPORTER_JOB = "bottleneck-exporter"  # the catalogue's exporter_job parameter


@dataclasses.dataclass(frozen=True)
class Target:
    address: str  # host:port of an exporter
    node: str  # the instance label it gets
    labels: tuple[tuple[str, str], ...] = ()  # more target labels: the cluster a fleet's agent adds


class Process:
    """A long-running tool whose output goes to a log file in the test's directory."""

    def __init__(self, name: str, workdir: Path) -> None:
        self.name = name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = workdir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def spawn(self, argv: list[str]) -> None:
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)

    def wait_ready(self, path: str, timeout: float = 30) -> None:
        def ready() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.name} exited {self.proc.returncode}:\n{self.log.read_text()}")
            try:
                return requests.get(self.url + path, timeout=2).status_code == 200
            except requests.RequestException:
                return False

        wait_until(ready, timeout, f"{self.name} to become ready")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_node_exporter(workdir: Path, *flags: str) -> Process:
    """Debian's real prometheus-node-exporter with its default collectors, on a free loopback port; ``flags``:
    more of its flags (``--path.procfs`` of a fixture tree)."""
    exporter = Process("node_exporter", workdir)
    exporter.spawn([require_tool("prometheus-node-exporter"), f"--web.listen-address=127.0.0.1:{exporter.port}",
                    *flags])
    exporter.wait_ready("/metrics")
    return exporter


def scrape_jobs(targets: list[Target], peers: dict[str, list[Target]] | None = None,
                   more: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Our exporters' scrape job, then ``peers``' (job name → targets) and ``more`` as they are: every target named
    by its ``instance`` through relabelling, scraped with ``honor_labels: false``."""
    return [{
        "job_name": job,
        "static_configs": [{"targets": [t.address], "labels": {"__node": t.node, **dict(t.labels)}}
                           for t in job_targets],
        "relabel_configs": [{"source_labels": ["__node"], "target_label": "instance"}],
    } for job, job_targets in {EXPORTER_JOB: targets, **(peers or {})}.items()] + list(more or [])


def instant_query(url: str, expr: str) -> list[dict[str, Any]]:
    """An instant query of the Prometheus HTTP API at ``url`` (Prometheus, VictoriaMetrics): its result as a list
    (a scalar's as one element)."""
    response = requests.get(f"{url}/api/v1/query", params={"query": expr}, timeout=30)
    body = response.json()
    if body.get("status") != "success":
        raise AssertionError(f"query failed: {body.get('errorType')}: {body.get('error')}\n{expr}")
    result = body["data"]["result"]
    return result if isinstance(result, list) else [result]


class Prometheus(Process):
    def __init__(self, workdir: Path, targets: list[Target], rule_files: list[Path], *,
                 alertmanager_url: str | None = None, interval: str = "1s",
                 peers: dict[str, list[Target]] | None = None,
                 scrape_configs: list[dict[str, Any]] | None = None) -> None:
        """``peers``: other exporters' scrape jobs (job name → targets), scraped as a stack scrapes them:
        ``honor_labels: false``, ``instance`` relabelled to the node name as for ours. ``scrape_configs``: more
        jobs, written as they are."""
        super().__init__("prometheus", workdir)
        self.workdir = workdir
        self.config = workdir / "prometheus.yml"
        config: dict[str, Any] = {
            "global": {"scrape_interval": interval, "evaluation_interval": interval, "scrape_timeout": interval},
            "rule_files": [str(path) for path in rule_files],
            "scrape_configs": scrape_jobs(targets, peers, scrape_configs),
        }
        if alertmanager_url:
            config["alerting"] = {"alertmanagers": [{"static_configs": [
                {"targets": [alertmanager_url.removeprefix("http://")]}]}]}
        self.config.write_text(yaml.safe_dump(config, sort_keys=False))

    def start(self) -> Prometheus:
        binary = require_tool("prometheus")
        self.spawn([binary, f"--config.file={self.config}", f"--storage.tsdb.path={self.workdir / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn",
                    # Alerts resolve and re-send quickly in tests (defaults: 1m and 15m).
                    "--rules.alert.resend-delay=1s"])
        self.wait_ready("/-/ready")
        return self

    def query(self, expr: str) -> list[dict[str, Any]]:
        return instant_query(self.url, expr)

    def label_values(self, label: str, match: str) -> list[str]:
        response = requests.get(f"{self.url}/api/v1/label/{label}/values", params={"match[]": match}, timeout=30)
        body = response.json()
        if body.get("status") != "success":
            raise AssertionError(f"label values failed: {body.get('error')}\n{match}")
        return list(body["data"])

    def alerts(self) -> list[dict[str, Any]]:
        return list(requests.get(f"{self.url}/api/v1/alerts", timeout=10).json()["data"]["alerts"])

    def rule_errors(self) -> dict[str, str]:
        """{rule name: its last evaluation's error} of every rule whose last evaluation failed."""
        groups = requests.get(f"{self.url}/api/v1/rules", timeout=10).json()["data"]["groups"]
        return {rule["name"]: rule.get("lastError", "") for group in groups for rule in group["rules"]
                if rule.get("health") == "err"}


class Alertmanager(Process):
    def __init__(self, workdir: Path, config: Path) -> None:
        super().__init__("alertmanager", workdir)
        self.workdir = workdir
        self.config = config

    def start(self) -> Alertmanager:
        binary = require_tool("prometheus-alertmanager")
        self.spawn([binary, f"--config.file={self.config}", f"--storage.path={self.workdir / 'am-data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    # Single instance: no gossip port to bind, nothing to wait for.
                    "--cluster.listen-address=", "--log.level=warn"])
        self.wait_ready("/-/ready")
        return self


class PrometheusAgent(Process):
    """Prometheus in agent mode: scrapes as ``Prometheus`` does, stores nothing it could query, evaluates no rules,
    and remote-writes every sample to ``remote_write_url`` (a fleet's node-side scraper)."""

    def __init__(self, workdir: Path, targets: list[Target], remote_write_url: str, interval: str = "1s") -> None:
        super().__init__("prometheus-agent", workdir)
        self.workdir = workdir
        self.config = workdir / "prometheus-agent.yml"
        self.config.write_text(yaml.safe_dump({
            "global": {"scrape_interval": interval, "scrape_timeout": interval},
            "scrape_configs": scrape_jobs(targets),
            # Sent within a second (default 5 s): the test's rate windows are 20 s.
            "remote_write": [{"url": remote_write_url, "queue_config": {"batch_send_deadline": "1s"}}],
        }, sort_keys=False))

    def start(self) -> PrometheusAgent:
        self.spawn([require_tool("prometheus"), "--enable-feature=agent", f"--config.file={self.config}",
                    f"--storage.agent.path={self.workdir / 'agent-wal'}",
                    f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"])
        self.wait_ready("/-/ready")
        return self


class VictoriaMetrics(Process):
    """Single-node VictoriaMetrics (Debian's victoria-metrics): takes Prometheus remote write on /api/v1/write and
    answers the Prometheus query API in MetricsQL."""

    def __init__(self, workdir: Path) -> None:
        super().__init__("victoria-metrics", workdir)
        self.workdir = workdir
        self.write_url = f"{self.url}/api/v1/write"

    def start(self) -> VictoriaMetrics:
        self.spawn([require_tool("victoria-metrics"), f"--storageDataPath={self.workdir / 'vm-data'}",
                    f"--httpListenAddr=127.0.0.1:{self.port}", "--loggerLevel=WARN",
                    # Samples are queryable a second after they arrive (default 30 s: a fleet's ingestion lag).
                    "--search.latencyOffset=1s"])
        self.wait_ready("/health")
        return self

    def query(self, expr: str) -> list[dict[str, Any]]:
        return instant_query(self.url, expr)


class VmAlert(Process):
    """vmalert evaluating ``rule_files`` against VictoriaMetrics: its records written back there, its alerts sent
    to the Alertmanager at ``alertmanager_url``."""

    def __init__(self, workdir: Path, rule_files: list[Path], victoria_metrics: VictoriaMetrics,
                 alertmanager_url: str, interval: str = "1s") -> None:
        super().__init__("vmalert", workdir)
        self.argv = [
            require_tool("vmalert"), *(f"--rule={path}" for path in rule_files),
            f"--datasource.url={victoria_metrics.url}", f"--remoteWrite.url={victoria_metrics.url}",
            f"--notifier.url={alertmanager_url}", f"--evaluationInterval={interval}",
            f"--httpListenAddr=127.0.0.1:{self.port}", "--loggerLevel=WARN",
            # Records reach VictoriaMetrics within a second (default 5 s): rules chain records on records.
            "--remoteWrite.flushInterval=1s",
            # vmalert adds the group's name as a label to every alert unless told not to (docs/rules.md).
            "--disableAlertgroupLabel"]

    def start(self) -> VmAlert:
        self.spawn(self.argv)
        self.wait_ready("/health")
        return self


@contextlib.contextmanager
def static_target(exposition: Path) -> Iterator[str]:
    """A recorded scrape (a dcgm-exporter's, which needs a GPU to run) served over HTTP as a scrape target:
    yields its host:port."""
    body = exposition.read_bytes()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()

# What prometheus-operator writes before a ServiceMonitor endpoint's own relabelings in its relabel_configs
# (generateServiceMonitorConfig, pkg/prometheus/promcfg.go; its keep rules on the Service's labels and port are
# left out, a static target needs no selection): the target labels namespace, service, pod and container, job =
# the Service's name (no jobLabel), endpoint = the port's name.
OPERATOR_TARGET_LABELS: list[dict[str, Any]] = [
    {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
    {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "service"},
    {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
    {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
    {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "job"},
    {"source_labels": ["__meta_kubernetes_endpoint_port_name"], "target_label": "endpoint"},
]

_RELABEL_FIELDS = {"sourceLabels": "source_labels", "targetLabel": "target_label", "separator": "separator",
                   "regex": "regex", "replacement": "replacement", "modulus": "modulus", "action": "action"}


def operator_relabel_configs(relabelings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A ServiceMonitor endpoint's ``relabelings`` (prometheus-operator's RelabelConfig) as the operator writes them
    into the scrape config (generateRelabelConfig): camelCase fields → Prometheus' snake_case, the action
    lower-cased (the CRD accepts ``Replace`` and ``replace``). A field RelabelConfig does not have is an error here;
    the API server would drop it, and the relabelling would silently do less."""
    configs = []
    for relabeling in relabelings:
        unknown = set(relabeling) - set(_RELABEL_FIELDS)
        if unknown:
            raise ValueError(f"relabelings: unknown field(s) {sorted(unknown)}; RelabelConfig has "
                             f"{sorted(_RELABEL_FIELDS)}")
        config = {_RELABEL_FIELDS[k]: v for k, v in relabeling.items()}
        if "action" in config:
            config["action"] = str(config["action"]).lower()
        configs.append(config)
    return configs


# The rate window and for: the end-to-end tests generate the bundle with: short enough for a test to see a
# verdict fire, long enough for a few scrapes.
RATE_WINDOW = "20s"
FOR = "10s"
# The rule groups' interval in those tests: the bundle's 1m would leave a test waiting a minute per evaluation.
RULE_INTERVAL = "1s"


def alerts_of(prometheus: Prometheus, job: str) -> list[dict[str, Any]]:
    """The alerts of training job ``job`` (pending or firing)."""
    return [a for a in prometheus.alerts() if a["labels"].get("training_job") == job]
