"""The shipped Alertmanager config (alerts/alertmanager.yml) and templates (alerts/templates/), with the real tools.

amtool checks the config, routes every severity and renders the templates with alerts built from the catalogue;
then a real Alertmanager runs the shipped routes, inhibitions and templates against a loopback HTTP sink that
stands in for Slack and a loopback SMTP sink that stands in for the mail server (tests/sinks.py).
"""

from __future__ import annotations

import datetime
import email.message
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from bottleneck_exporter.heuristics import gotemplate
from bottleneck_exporter.heuristics.catalogue import AlertRule, resolve
from tests.conftest import ROOT, require_tool, wait_until
from tests.promstack import Alertmanager
from tests.sinks import SlackSink, SmtpSink

pytestmark = pytest.mark.tools

CONFIG = ROOT / "alerts" / "alertmanager.yml"
TEMPLATES = ROOT / "alerts" / "templates"
CATALOGUE = resolve()


def alert(name: str, severity: str, labels: dict[str, str], value: float) -> dict[str, Any]:
    """An alert as Prometheus would send it: the catalogue's annotations, the description rendered."""
    rule: AlertRule = CATALOGUE.alert(name, severity)
    annotations = dict(rule.annotations)
    annotations["summary"] = gotemplate.render(rule.summary, labels, value)
    annotations["description"] = gotemplate.render(rule.description, labels, value)
    return {"labels": {"alertname": rule.alert, "severity": severity, **labels}, "annotations": annotations}


# As Prometheus labels them with honor_labels: false: job is the scrape job, training_job the training job.
SCRAPED = {"job": "bottleneck-exporter"}
INPUT_BOUND_A = alert("InputBound", "warning", {"instance": "node-a", **SCRAPED, "training_job": "resnet50",
                                                "rank": "3"}, 0.82)
MEMORY_WARNING_A = alert("MemoryPressure", "warning", {"instance": "node-a", "job": "bottleneck-exporter"}, 0.03)
MEMORY_CRITICAL_A = alert("MemoryPressure", "critical", {"instance": "node-a", "job": "bottleneck-exporter"}, 0.03)
EXPORTER_DOWN_B = alert("ExporterDown", "critical", {"instance": "node-b", "job": "bottleneck-exporter"}, 0)
INPUT_BOUND_B = alert("InputBound", "warning", {"instance": "node-b", **SCRAPED, "training_job": "resnet50",
                                                "rank": "5"}, 0.7)
SAWTOOTH_A = alert("GpuSawtooth", "info", {"instance": "node-a", "job": "bottleneck-exporter", "gpu": "0",
                                           "uuid": "GPU-1"}, 0.4)


def amtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([require_tool("amtool"), *args], capture_output=True, text=True, timeout=60)


def test_amtool_check_config_accepts_the_shipped_config_and_finds_the_templates() -> None:
    result = amtool("check-config", str(CONFIG))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 templates" in result.stdout, result.stdout
    assert "2 inhibit rules" in result.stdout, result.stdout


@pytest.mark.parametrize(("severity", "receiver"), [
    ("critical", "critical"),
    ("warning", "warning"),
    ("info", "info"),
])
def test_routes_send_each_severity_to_its_receiver(severity: str, receiver: str) -> None:
    result = amtool("config", "routes", "test", f"--config.file={CONFIG}", "alertname=BottleneckInputBound",
                    "instance=node-a", f"severity={severity}")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == receiver


def test_every_severity_the_catalogue_uses_has_its_own_route() -> None:
    config = yaml.safe_load(CONFIG.read_text())
    routed = {m for route in config["route"]["routes"] for m in route["matchers"]}
    assert {f'severity="{rule.severity}"' for rule in CATALOGUE.alerts} <= routed


def render(template: str, alerts: list[dict[str, Any]], tmp_path: Path) -> str:
    common = {k: v for k, v in alerts[0]["labels"].items() if all(a["labels"].get(k) == v for a in alerts)}
    common_annotations = {k: v for k, v in alerts[0]["annotations"].items()
                          if all(a["annotations"].get(k) == v for a in alerts)}
    data = {
        "receiver": "test", "status": "firing", "externalURL": "http://alertmanager.example", "version": "4",
        "groupKey": "{}", "groupLabels": {"alertname": alerts[0]["labels"]["alertname"]},
        "commonLabels": common, "commonAnnotations": common_annotations,
        "alerts": [{**a, "status": "firing", "startsAt": "2024-05-01T10:00:00Z",
                    "endsAt": "0001-01-01T00:00:00Z", "generatorURL": "", "fingerprint": str(i)}
                   for i, a in enumerate(alerts)],
    }
    path = tmp_path / "data.json"
    path.write_text(json.dumps(data))
    result = amtool("template", "render", f"--template.glob={TEMPLATES}/*.tmpl",
                    f"--template.text={{{{ template \"{template}\" . }}}}", f"--template.data={path}")
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize("template", ["bottleneck.slack.text", "bottleneck.email.text", "bottleneck.email.html"])
def test_templates_show_verdict_evidence_and_advice(template: str, tmp_path: Path) -> None:
    text = render(template, [INPUT_BOUND_A], tmp_path)
    assert "input-bound (data loading)" in text
    assert "waits for the next batch 82% of every step" in text  # the evidence, with its value
    assert "Raise DataLoader num_workers" in text
    assert CATALOGUE.alert("InputBound").runbook_url in text
    assert "node-a" in text and "resnet50" in text and "rank 3" in text


def test_title_counts_the_firing_alerts_of_a_group(tmp_path: Path) -> None:
    second = alert("InputBound", "warning", {"instance": "node-a", **SCRAPED, "training_job": "resnet50", "rank": "4"},
                   0.9)
    title = render("bottleneck.title", [INPUT_BOUND_A, second], tmp_path)
    assert title == "[FIRING:2] BottleneckInputBound: input-bound (data loading) (resnet50)"


# ---------------------------------------------------------------------------------------------- real Alertmanager


@pytest.fixture
def sinks() -> Iterator[tuple[SlackSink, SmtpSink]]:
    slack, smtp = SlackSink().start(), SmtpSink().start()
    yield slack, smtp
    slack.stop()
    smtp.stop()


def local_config(tmp_path: Path, slack: SlackSink, smtp: SmtpSink) -> Path:
    """The shipped config with only the endpoints (and the wait before the first notification) changed."""
    config = yaml.safe_load(CONFIG.read_text())
    config["global"].pop("slack_api_url_file")
    config["global"].pop("smtp_auth_username")
    config["global"].pop("smtp_auth_password_file")
    config["global"].update({
        "slack_api_url": slack.url,
        "smtp_smarthost": smtp.address,
        "smtp_require_tls": False,
    })
    config["route"]["group_wait"] = "1s"
    config["templates"] = [str(TEMPLATES / "*.tmpl")]
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def slack_text(message: dict[str, Any]) -> str:
    return "\n".join(f"{a.get('title', '')}\n{a.get('text', '')}" for a in message.get("attachments", []))


def test_real_alertmanager_routes_inhibits_and_renders_to_slack_and_email(
        tmp_path: Path, sinks: tuple[SlackSink, SmtpSink]) -> None:
    slack, smtp = sinks
    manager = Alertmanager(tmp_path, local_config(tmp_path, slack, smtp)).start()
    try:
        now = datetime.datetime.now(datetime.timezone.utc)
        ends = (now + datetime.timedelta(minutes=10)).isoformat()
        posted = [INPUT_BOUND_A, MEMORY_WARNING_A, MEMORY_CRITICAL_A, EXPORTER_DOWN_B, INPUT_BOUND_B, SAWTOOTH_A]
        response = requests.post(f"{manager.url}/api/v2/alerts",
                                 json=[{**a, "startsAt": now.isoformat(), "endsAt": ends} for a in posted], timeout=10)
        assert response.status_code == 200, response.text

        def state() -> dict[tuple[str, str, str], list[str]]:
            alerts = requests.get(f"{manager.url}/api/v2/alerts", timeout=10).json()
            return {(a["labels"]["alertname"], a["labels"]["severity"], a["labels"]["instance"]):
                    a["status"]["inhibitedBy"] for a in alerts}

        inhibited = wait_until(lambda: (s := state()) and len(s) == len(posted) and s, 30, "all alerts received")
        assert inhibited[("BottleneckMemoryPressure", "warning", "node-a")], "the critical twin must inhibit it"
        assert inhibited[("BottleneckInputBound", "warning", "node-b")], "exporter down on node-b must inhibit it"
        assert not inhibited[("BottleneckInputBound", "warning", "node-a")]
        assert not inhibited[("BottleneckMemoryPressure", "critical", "node-a")]
        assert not inhibited[("BottleneckExporterDown", "critical", "node-b")]

        # Four notifications are not inhibited: InputBound(a), MemoryPressure critical(a), ExporterDown(b),
        # GpuSawtooth(a); all but the info-level sawtooth also go out by mail.
        wait_until(lambda: len(slack.payloads()) >= 4 and len(smtp.messages()) >= 3, 60, "notifications at the sinks")
        texts = [slack_text(m) for m in slack.payloads()]
        channels = {slack_text(m).split("\n")[0]: m.get("channel") for m in slack.payloads()}
        input_bound = [t for t in texts if t.startswith("[FIRING:1] BottleneckInputBound")]
        assert len(input_bound) == 1 and "node-a" in input_bound[0] and "node-b" not in input_bound[0]
        assert "*Verdict:* input-bound (data loading) (warning) on node-a job resnet50 rank 3" in input_bound[0]
        evidence = "*Evidence:* Rank 3 of job resnet50 on node-a waits for the next batch 82% of every step"
        assert evidence in input_bound[0]
        assert "*Advice:* Raise DataLoader num_workers" in input_bound[0]
        memory = [t for t in texts if t.startswith("[FIRING:1] BottleneckMemoryPressure")]
        assert len(memory) == 1 and "(critical)" in memory[0] and "(warning)" not in memory[0]
        assert any(t.startswith("[FIRING:1] BottleneckGpuSawtooth") for t in channels)
        assert channels[next(t for t in channels if "GpuSawtooth" in t)] == "#training-insights"

        mails = smtp.messages()
        recipients = {str(m["Subject"]).split("] ")[1].split(":")[0]: str(m["To"]) for m in mails}
        assert recipients == {"BottleneckExporterDown": "ml-oncall@example.org",
                              "BottleneckMemoryPressure": "ml-oncall@example.org",
                              "BottleneckInputBound": "ml-training@example.org"}
        mail = next(m for m in mails if "MemoryPressure" in str(m["Subject"]))
        assert isinstance(mail, email.message.EmailMessage)
        body = mail.get_body(preferencelist=("plain",))
        assert body is not None
        text = body.get_content()
        assert "Verdict:  memory pressure" in text
        assert "Evidence: Only 3% of the RAM of node-a is available" in text
        assert "Advice:   Smaller batch, fewer DataLoader workers" in text
        html = mail.get_body(preferencelist=("html",))
        assert html is not None and "<th align=\"left\">Advice</th>" in html.get_content()
    finally:
        manager.stop()


def test_real_alertmanager_groups_by_training_job_not_by_the_scrape_job(
        tmp_path: Path, sinks: tuple[SlackSink, SmtpSink]) -> None:
    """Every alert carries the same scrape job; grouping by it would put two training jobs on a node in one
    notification, and grouping by nothing would split a job's ranks."""
    slack, smtp = sinks
    manager = Alertmanager(tmp_path, local_config(tmp_path, slack, smtp)).start()
    try:
        now = datetime.datetime.now(datetime.timezone.utc)
        ends = (now + datetime.timedelta(minutes=10)).isoformat()
        rank_4 = alert("InputBound", "warning", {"instance": "node-a", **SCRAPED, "training_job": "resnet50",
                                                 "rank": "4"}, 0.9)
        bert = alert("InputBound", "warning", {"instance": "node-a", **SCRAPED, "training_job": "bert",
                                               "rank": "0"}, 0.7)
        posted = [INPUT_BOUND_A, rank_4, bert]
        response = requests.post(f"{manager.url}/api/v2/alerts",
                                 json=[{**a, "startsAt": now.isoformat(), "endsAt": ends} for a in posted], timeout=10)
        assert response.status_code == 200, response.text
        wait_until(lambda: len(slack.payloads()) >= 2, 60, "two notifications at the Slack sink")
        titles = sorted(slack_text(m).split("\n")[0] for m in slack.payloads())
        assert titles == ["[FIRING:1] BottleneckInputBound: input-bound (data loading) (bert)",
                          "[FIRING:2] BottleneckInputBound: input-bound (data loading) (resnet50)"]
    finally:
        manager.stop()
