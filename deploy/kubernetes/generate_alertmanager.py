"""Write the Alertmanager routing for kube-prometheus-stack from alerts/alertmanager.yml and alerts/templates/.

    python deploy/kubernetes/generate_alertmanager.py           # rewrite the files below
    python deploy/kubernetes/generate_alertmanager.py --check   # exit 1 if one is stale

Two ways to route the verdicts to Slack and email by severity, with the grouping and inhibitions of
alerts/alertmanager.yml (docs/deploy.md, "Alertmanager in kube-prometheus-stack"):

* ``alertmanager/alertmanagerconfig.yaml``: an AlertmanagerConfig (monitoring.coreos.com/v1alpha1), the
  namespaced object the Prometheus Operator merges into the chart's Alertmanager. Its receivers read the Slack
  webhook URL and the SMTP password from the Secret ``bottleneck-alertmanager`` in its own namespace.
* ``alertmanager/values-routing.yaml``: Helm values for the chart's ``alertmanager.config``, the whole
  configuration: the chart's defaults (the Watchdog route, its InfoInhibitor and severity inhibitions) with our
  route, receivers and inhibitions added; secrets as files of the Secret mounted by ``alertmanagerSpec.secrets``.

Either needs ``alertmanager/values-templates.yaml``: our notification templates as the chart's
``alertmanager.templateFiles`` (an AlertmanagerConfig cannot carry templates).
tests/test_alertmanager.py translates the AlertmanagerConfig as the operator does and runs both configurations
in a real Alertmanager; tests/test_kubernetes.py fails when a file drifts from its sources.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import yaml
from generate_prometheusrule import ROOT, _BlockStyleDumper, write_or_check

SOURCE = ROOT / "alerts" / "alertmanager.yml"
TEMPLATES = ROOT / "alerts" / "templates"
FOLDER = ROOT / "deploy" / "kubernetes" / "alertmanager"
REGENERATE = "python deploy/kubernetes/generate_alertmanager.py"
# The Secret both ways read: its keys are the file names alerts/alertmanager.yml reads its secrets from.
SECRET = "bottleneck-alertmanager"
SLACK_KEY, SMTP_KEY = "slack-webhook-url", "smtp-password"
# Where the operator mounts a Secret listed in alertmanagerSpec.secrets, and the chart's templateFiles.
SECRETS_MOUNT = f"/etc/alertmanager/secrets/{SECRET}"
CHART_TEMPLATES = "/etc/alertmanager/config/*.tmpl"
# Our receivers' names in the chart's configuration, where other teams' receivers live too.
RECEIVER_PREFIX = "bottleneck-"
# Only our alerts take our routes: the chart's own alerts (Kube*, Node*, TargetDown) keep the chart's.
OURS = 'alertname=~"Bottleneck.+"'
# kube-prometheus-stack's default alertmanager.config (its values.yaml): a values file replaces lists whole, so
# ours repeats them; the InfoInhibitor rule (equal: [namespace]) is why our alerts carry the workload's namespace.
CHART_DEFAULT: dict[str, Any] = {
    "global": {"resolve_timeout": "5m"},
    "inhibit_rules": [
        {"source_matchers": ["severity = critical"], "target_matchers": ["severity =~ warning|info"],
         "equal": ["namespace", "alertname"]},
        {"source_matchers": ["severity = warning"], "target_matchers": ["severity = info"],
         "equal": ["namespace", "alertname"]},
        {"source_matchers": ["alertname = InfoInhibitor"], "target_matchers": ["severity = info"],
         "equal": ["namespace"]},
        {"target_matchers": ["alertname = InfoInhibitor"]},
    ],
    "route": {"group_by": ["namespace"], "group_wait": "30s", "group_interval": "5m", "repeat_interval": "12h",
              "receiver": "null", "routes": [{"receiver": "null", "matchers": ['alertname = "Watchdog"']}]},
    "receivers": [{"name": "null"}],
    "templates": [CHART_TEMPLATES],
}
_MATCHER = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*')


def source() -> dict[str, Any]:
    config = yaml.safe_load(SOURCE.read_text())
    if not isinstance(config, dict) or not isinstance(config.get("route"), dict):
        raise ValueError(f"{SOURCE}: route: expected a routing tree")
    return config


def matcher(text: str) -> dict[str, str]:
    """``severity="critical"`` as an AlertmanagerConfig matcher ``{name, value, matchType}``."""
    found = _MATCHER.fullmatch(text)
    if not found:
        raise ValueError(f"{SOURCE}: matchers: {text!r} is not name<op>\"value\"")
    name, op, value = found.groups()
    return {"name": name, "value": yaml.safe_load(f'"{value}"'), "matchType": op}


_ROUTE_KEYS = {"receiver": "receiver", "group_by": "groupBy", "group_wait": "groupWait",
               "group_interval": "groupInterval", "repeat_interval": "repeatInterval", "continue": "continue"}


def cr_route(route: dict[str, Any]) -> dict[str, Any]:
    unknown = set(route) - set(_ROUTE_KEYS) - {"matchers", "routes"}
    if unknown:
        raise ValueError(f"{SOURCE}: route: {sorted(unknown)} not translated to an AlertmanagerConfig")
    out: dict[str, Any] = {_ROUTE_KEYS[k]: v for k, v in route.items() if k in _ROUTE_KEYS}
    if "matchers" in route:
        out["matchers"] = [matcher(m) for m in route["matchers"]]
    if "routes" in route:
        out["routes"] = [cr_route(r) for r in route["routes"]]
    return out


def cr_receiver(receiver: dict[str, Any], smtp: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"name": receiver["name"]}
    slack = [{"apiURL": {"name": SECRET, "key": SLACK_KEY}, "channel": c["channel"],
              "sendResolved": c["send_resolved"], "color": c["color"], "title": c["title"],
              "titleLink": c["title_link"], "text": c["text"]} for c in receiver.get("slack_configs", [])]
    # The chart's global section has no SMTP settings: each email config carries them.
    email = [{"to": c["to"], "from": smtp["smtp_from"], "smarthost": smtp["smtp_smarthost"],
              "authUsername": smtp["smtp_auth_username"], "authPassword": {"name": SECRET, "key": SMTP_KEY},
              "requireTLS": smtp["smtp_require_tls"], "sendResolved": c["send_resolved"],
              "headers": [{"key": k, "value": v} for k, v in c.get("headers", {}).items()],
              "html": c["html"], "text": c["text"]} for c in receiver.get("email_configs", [])]
    if slack:
        out["slackConfigs"] = slack
    if email:
        out["emailConfigs"] = email
    return out


def alertmanager_config() -> dict[str, Any]:
    config = source()
    route = cr_route(config["route"])
    # Namespaced: the operator adds namespace="<its namespace>" to this route and to every inhibition.
    route["matchers"] = [matcher(OURS)]
    return {
        "apiVersion": "monitoring.coreos.com/v1alpha1",
        "kind": "AlertmanagerConfig",
        "metadata": {"name": "bottleneck-exporter",
                     "labels": {"app.kubernetes.io/name": "bottleneck-exporter",
                                "app.kubernetes.io/component": "alerting"}},
        "spec": {
            "route": route,
            "receivers": [cr_receiver(r, config["global"]) for r in config["receivers"]],
            "inhibitRules": [{"sourceMatch": [matcher(m) for m in rule.get("source_matchers", [])],
                              "targetMatch": [matcher(m) for m in rule.get("target_matchers", [])],
                              "equal": rule.get("equal", [])} for rule in config["inhibit_rules"]],
        },
    }


def _renamed(route: dict[str, Any]) -> dict[str, Any]:
    out = {**route, "receiver": RECEIVER_PREFIX + route["receiver"]}
    if "routes" in route:
        out["routes"] = [_renamed(r) for r in route["routes"]]
    return out


def chart_config() -> dict[str, Any]:
    """The chart's alertmanager.config: its defaults, with our route, inhibitions and receivers added."""
    config = source()
    ours_global = {k: v for k, v in config["global"].items() if k.startswith("smtp_") and not k.endswith("_file")}
    ours_global["slack_api_url_file"] = f"{SECRETS_MOUNT}/{SLACK_KEY}"
    ours_global["smtp_auth_password_file"] = f"{SECRETS_MOUNT}/{SMTP_KEY}"
    route = _renamed(config["route"])
    route["matchers"] = [OURS]
    chart_route = dict(CHART_DEFAULT["route"])
    chart_route["routes"] = [*CHART_DEFAULT["route"]["routes"], route]
    receivers = [{**r, "name": RECEIVER_PREFIX + r["name"]} for r in config["receivers"]]
    return {
        "global": {**CHART_DEFAULT["global"], **ours_global},
        "inhibit_rules": [*CHART_DEFAULT["inhibit_rules"], *config["inhibit_rules"]],
        "route": chart_route,
        "receivers": [*CHART_DEFAULT["receivers"], *receivers],
        "templates": CHART_DEFAULT["templates"],
    }


def header(what: str) -> str:
    return (f"# Generated by `{REGENERATE}` from alerts/alertmanager.yml and alerts/templates/: edit those, not "
            f"this file.\n# {what}\n")


def dump(document: dict[str, Any]) -> str:
    return yaml.dump(document, Dumper=_BlockStyleDumper, sort_keys=False, width=110, allow_unicode=True)


def render_alertmanager_config() -> str:
    return header(f"Needs the Secret {SECRET} (keys {SLACK_KEY}, {SMTP_KEY}) in its namespace and "
                  "values-templates.yaml; docs/deploy.md.") + dump(alertmanager_config())


def render_values_routing() -> str:
    values = {"alertmanager": {"config": chart_config(), "alertmanagerSpec": {"secrets": [SECRET]}}}
    return header(f"helm upgrade ... -f values-templates.yaml -f values-routing.yaml; needs the Secret {SECRET} "
                  "in the chart's namespace; docs/deploy.md.") + dump(values)


def render_values_templates() -> str:
    files = sorted(TEMPLATES.glob("*.tmpl"))
    if not files:
        raise ValueError(f"{TEMPLATES}: no templates (*.tmpl)")
    values = {"alertmanager": {"templateFiles": {f.name: f.read_text() for f in files}}}
    return header("The notification templates, loaded from /etc/alertmanager/config/ by either way of routing; "
                  "docs/deploy.md.") + dump(values)


def committed_files() -> dict[Path, Any]:
    """Every file this generator writes (and --check compares), with what renders it."""
    return {FOLDER / "alertmanagerconfig.yaml": render_alertmanager_config,
            FOLDER / "values-routing.yaml": render_values_routing,
            FOLDER / "values-templates.yaml": render_values_templates}


def main(argv: list[str] | None = None) -> int:
    FOLDER.mkdir(exist_ok=True)
    return max(write_or_check(argv, __doc__, target, REGENERATE, render_text)
               for target, render_text in committed_files().items())


if __name__ == "__main__":
    sys.exit(main())
