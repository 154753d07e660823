"""End to end on three "nodes": exporter → Prometheus → rules → Alertmanager → Slack and email.

Three real exporters on separate ports stand for three nodes (Prometheus gives them the instance labels
node-a, node-b and node-c by relabelling); one real Prometheus scrapes them every second and evaluates the
rules generated from the catalogue (``for:`` shortened to 5s and the rate window to 20s, so that a verdict
fires and resolves within the test); one real Alertmanager runs the shipped alerts/alertmanager.yml and
templates, its endpoints pointed at loopback sinks for Slack (HTTP) and email (SMTP). Real PyTorch jobs
push through the real hook:

- a three-rank torch.distributed (gloo, CPU) job, one rank per node, the rank on node-c slowed: the
  straggler verdict reaches both sinks naming rank 2 and node-c, and no other rank;
- the same job where rank 0 spends extra time between steps (host work, as rank-0 logging): step times
  are equal, the others wait for it inside backward, and the straggler verdict names rank 0 and says its
  time goes between the phases;
- an input-bound job on node-a: the input-bound verdict reaches both sinks, and once its slow input stops
  a resolved notice follows on both.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, ExporterProcess, free_port, wait_until
from tests.promstack import RULE_INTERVAL, Alertmanager, Prometheus, Target
from tests.sinks import SlackSink, SmtpSink

pytestmark = [pytest.mark.tools, pytest.mark.torch, pytest.mark.live]

NODES = ("node-a", "node-b", "node-c")
TRAINER = ROOT / "tests" / "e2e_train.py"
SHORT_FOR = "5s"
RATE_WINDOW = "20s"  # at least four of Prometheus' 1 s scrape intervals
ALERT_TIMEOUT = 150


class Stack:
    def __init__(self, workdir: Path, prometheus: Prometheus, slack: SlackSink, mail: SmtpSink,
                 sockets: dict[str, Path]) -> None:
        self.workdir, self.prometheus, self.slack, self.mail, self.sockets = workdir, prometheus, slack, mail, sockets


def generate_rules(out: Path) -> list[Path]:
    """The committed catalogue's rules, with the test's short ``for:`` and window (the generator's options)."""
    result = subprocess.run([sys.executable, "-m", "bottleneck_exporter.heuristics.generate", "--out", str(out),
                             "--for", SHORT_FOR, "--set", f"rate_window={RATE_WINDOW}", "--set",
                             f"rule_interval={RULE_INTERVAL}", "--no-tests"],
                            capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    return [out / "prometheus" / "recording-rules.yml", out / "alerts" / "alert-rules.yml"]


def alertmanager_config(workdir: Path, slack: SlackSink, mail: SmtpSink) -> Path:
    """alerts/alertmanager.yml with its routes, receivers and templates as shipped; only the endpoints (and
    the waits, so the test runs in seconds) change."""
    config = yaml.safe_load((ROOT / "alerts" / "alertmanager.yml").read_text())
    shipped = copy.deepcopy(config)
    glob = config["global"]
    for key in ("slack_api_url_file", "smtp_auth_username", "smtp_auth_password_file", "smtp_auth_password"):
        glob.pop(key, None)
    glob.update({"slack_api_url": slack.url, "smtp_smarthost": mail.address, "smtp_require_tls": False})
    config["templates"] = [str(ROOT / "alerts" / pattern) for pattern in shipped["templates"]]
    config["route"].update({"group_wait": "1s", "group_interval": "1s"})
    path = workdir / "alertmanager.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("e2e")
    slack, mail = SlackSink().start(), SmtpSink().start()
    rules = generate_rules(workdir / "generated")
    alertmanager = Alertmanager(workdir, alertmanager_config(workdir, slack, mail))
    sockets = {node: workdir / f"{node}.sock" for node in NODES}
    # CPU-only "nodes": no GPU collector (there is no NVML here, and GPU verdicts are not under test).
    exporters = [ExporterProcess([f"--push.socket={sockets[node]}", "--no-collector.gpu"]) for node in NODES]
    prometheus: Prometheus | None = None
    try:
        alertmanager.start()
        for exporter in exporters:
            exporter.wait_ready()
        targets = [Target(f"127.0.0.1:{e.port}", node) for e, node in zip(exporters, NODES, strict=True)]
        prometheus = Prometheus(workdir, targets, rules, alertmanager_url=alertmanager.url).start()
        wait_until(lambda: len(prometheus.query('up{job="bottleneck-exporter"} == 1')) == 3, 30,
                   "Prometheus to scrape the three exporters")
        yield Stack(workdir, prometheus, slack, mail, sockets)
    finally:
        if prometheus is not None:
            prometheus.stop()
        alertmanager.stop()
        for exporter in exporters:
            exporter.stop()
        slack.stop()
        mail.stop()


class Job:
    """Training processes started for one test, stopped (and waited for) at the end."""

    def __init__(self, workdir: Path, name: str) -> None:
        self.name = name
        self.stop_file = workdir / f"{name}.stop"
        self.processes: list[subprocess.Popen[bytes]] = []
        self.logs: list[Path] = []

    def spawn(self, args: list[str], env: dict[str, str]) -> None:
        log = self.stop_file.with_name(f"{self.name}-{len(self.processes)}.log")
        self.logs.append(log)
        with log.open("wb") as out:
            self.processes.append(subprocess.Popen(
                [sys.executable, str(TRAINER), *args, "--stop-file", str(self.stop_file)],
                env={**os.environ, "BOTTLENECK_JOB": self.name, "BOTTLENECK_PUSH_INTERVAL": "0.5", **env},
                stdout=out, stderr=subprocess.STDOUT, cwd=ROOT))

    def spawn_ddp(self, stack: Stack, args: list[str]) -> None:
        """One gloo rank per node, each pushing to its own node's exporter."""
        master_port = str(free_port())
        for rank, node in enumerate(NODES):
            self.spawn(["ddp", *args], {
                "RANK": str(rank), "LOCAL_RANK": "0", "WORLD_SIZE": str(len(NODES)),
                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": master_port, "GLOO_SOCKET_IFNAME": "lo",
                "BOTTLENECK_PUSH_ADDRESS": f"unix://{stack.sockets[node]}"})

    def check_alive(self) -> None:
        for process, log in zip(self.processes, self.logs, strict=True):
            if process.poll() is not None:
                raise AssertionError(f"{self.name} exited {process.returncode}:\n{log.read_text()[-3000:]}")

    def stop(self) -> None:
        self.stop_file.touch()
        for process in self.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def notified(sink_texts: Callable[[], list[str]], *needles: str) -> Callable[[], list[str]]:
    return lambda: [text for text in sink_texts() if all(needle in text for needle in needles)]


def wait_for_notice(stack: Stack, job: Job, *needles: str) -> tuple[list[str], list[str]]:
    """Both sinks' messages that contain every needle; fails naming the sink that got none."""

    def both() -> tuple[list[str], list[str]] | None:
        job.check_alive()
        slack, mail = notified(stack.slack.texts, *needles)(), notified(stack.mail.texts, *needles)()
        return (slack, mail) if slack and mail else None

    try:
        found = wait_until(both, ALERT_TIMEOUT, f"a notice with {needles} in Slack and in email")
    except AssertionError as err:
        alerts = [(a["labels"].get("alertname"), a["labels"].get("training_job"), a["labels"].get("rank"), a["state"])
                  for a in stack.prometheus.alerts()]
        raise AssertionError(f"{err}\nPrometheus alerts: {alerts}\nSlack: {stack.slack.texts()[-3:]}\n"
                             f"mail: {stack.mail.texts()[-3:]}") from None
    return found


def test_straggler_rank_reaches_slack_and_email_naming_the_rank_and_its_node(stack: Stack) -> None:
    job = Job(stack.workdir, "e2e-ddp")
    try:
        job.spawn_ddp(stack, ["--slow-rank", "2", "--slow-seconds", "0.2"])
        slack, mail = wait_for_notice(stack, job, "BottleneckStragglerRank", "e2e-ddp", "FIRING")
        # The templates name the subject "on <instance> job <job> rank <rank>", and the description again.
        for text in slack + mail:
            assert "on node-c job e2e-ddp rank 2" in text, text
            assert "Rank 2 of job e2e-ddp on node-c" in text, text
        firing = stack.prometheus.query('ALERTS{alertname="BottleneckStragglerRank", training_job="e2e-ddp"}')
        assert {(a["metric"]["rank"], a["metric"]["instance"]) for a in firing} == {("2", "node-c")}
        assert {a["metric"]["phase"] for a in firing} == {"forward"}, firing
        # Each rank's telemetry arrived through its own node's exporter.
        ranks = stack.prometheus.query('bottleneck_train_info{training_job="e2e-ddp"}')
        assert {(r["metric"]["rank"], r["metric"]["instance"]) for r in ranks} == {
            ("0", "node-a"), ("1", "node-b"), ("2", "node-c")}
    finally:
        job.stop()


def test_rank_0_working_between_steps_is_named_straggler_with_its_time_between_phases(stack: Stack) -> None:
    """Regression: a rank doing host work between steps (rank-0 logging) got no verdict: step times are equal
    and its extra time is in no phase; the others wait for it inside backward's all-reduce."""
    job = Job(stack.workdir, "e2e-log0")
    try:
        job.spawn_ddp(stack, ["--slow-rank", "0", "--between-seconds", "0.2"])
        slack, mail = wait_for_notice(stack, job, "BottleneckStragglerRank", "e2e-log0", "FIRING")
        for text in slack + mail:
            assert "Rank 0 of job e2e-log0 on node-a" in text and "goes to between_phases" in text, text
        firing = stack.prometheus.query('ALERTS{alertname="BottleneckStragglerRank", training_job="e2e-log0"}')
        assert {(a["metric"]["rank"], a["metric"]["phase"]) for a in firing} == {("0", "between_phases")}
        # What the rule saw: equal step times, rank 0's own work well above its peers'.
        steps = stack.prometheus.query(f'job_rank:bottleneck_train_step_seconds:ratio_to_job_median{RATE_WINDOW}'
                                       '{training_job="e2e-log0"}')
        assert all(float(s["value"][1]) < 1.2 for s in steps), steps
    finally:
        job.stop()


def test_input_bound_job_alerts_both_sinks_then_resolves_when_the_cause_stops(stack: Stack) -> None:
    job = Job(stack.workdir, "e2e-input")
    cause = stack.workdir / "slow-input"
    cause.touch()
    try:
        job.spawn(["input", "--cause-file", str(cause), "--item-seconds", "0.01"],
                  {"BOTTLENECK_PUSH_ADDRESS": f"unix://{stack.sockets['node-a']}"})
        slack, mail = wait_for_notice(stack, job, "BottleneckInputBound", "e2e-input", "FIRING")
        for text in slack + mail:
            assert "on node-a job e2e-input rank 0" in text and "num_workers" in text, text
        cause.unlink()  # the input is fast from now on
        wait_for_notice(stack, job, "BottleneckInputBound", "e2e-input", "RESOLVED")
    finally:
        job.stop()
