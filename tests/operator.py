"""What prometheus-operator makes of an AlertmanagerConfig: the plain Alertmanager configuration it writes.

As its ConfigBuilder does (pkg/alertmanager/amcfg.go, release 0.93.0) under the default matcher strategy
``OnNamespace``, for the fields our AlertmanagerConfig uses: each receiver is renamed
``<namespace>/<name>/<receiver>`` and its secrets read from the Secret in the object's namespace; the object's
route becomes the first child of the base route with ``namespace="<namespace>"`` added to its matchers and
``continue: true``; each inhibition gets ``namespace="<namespace>"`` on its source and its target. Fields this
translation does not know are refused, so a new field in the generated object cannot pass untranslated.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

ROUTE_KEYS = {"receiver", "groupBy", "groupWait", "groupInterval", "repeatInterval", "continue", "matchers",
              "routes"}


def matcher(m: Mapping[str, str]) -> str:
    # openMetricsEscape: backslash, double quote and newline.
    value = m["value"].replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'{m["name"]}{m["matchType"]}"{value}"'


def _name(namespace: str, name: str, receiver: str) -> str:
    return f"{namespace}/{name}/{receiver}"


def _route(route: Mapping[str, Any], namespace: str, name: str) -> dict[str, Any]:
    unknown = set(route) - ROUTE_KEYS
    assert not unknown, f"route fields the translation does not know: {sorted(unknown)}"
    out: dict[str, Any] = {"receiver": _name(namespace, name, route["receiver"])}
    for ours, theirs in (("groupBy", "group_by"), ("groupWait", "group_wait"), ("groupInterval", "group_interval"),
                         ("repeatInterval", "repeat_interval"), ("continue", "continue")):
        if ours in route:
            out[theirs] = route[ours]
    if route.get("matchers"):
        out["matchers"] = [matcher(m) for m in route["matchers"]]
    if route.get("routes"):
        out["routes"] = [_route(r, namespace, name) for r in route["routes"]]
    return out


def _secret(secrets: Mapping[str, Mapping[str, str]], selector: Mapping[str, str]) -> str:
    return secrets[selector["name"]][selector["key"]].strip()


def _receiver(receiver: Mapping[str, Any], namespace: str, name: str,
              secrets: Mapping[str, Mapping[str, str]]) -> dict[str, Any]:
    unknown = set(receiver) - {"name", "slackConfigs", "emailConfigs"}
    assert not unknown, f"receiver fields the translation does not know: {sorted(unknown)}"
    out: dict[str, Any] = {"name": _name(namespace, name, receiver["name"])}
    slack_keys = {"apiURL", "channel", "sendResolved", "color", "title", "titleLink", "text"}
    email_keys = {"to", "from", "smarthost", "authUsername", "authPassword", "requireTLS", "sendResolved",
                  "headers", "html", "text"}
    for config in receiver.get("slackConfigs", []):
        assert set(config) <= slack_keys, sorted(set(config) - slack_keys)
        out.setdefault("slack_configs", []).append({
            "send_resolved": config["sendResolved"], "api_url": _secret(secrets, config["apiURL"]),
            "channel": config["channel"], "color": config["color"], "title": config["title"],
            "title_link": config["titleLink"], "text": config["text"]})
    for config in receiver.get("emailConfigs", []):
        assert set(config) <= email_keys, sorted(set(config) - email_keys)
        out.setdefault("email_configs", []).append({
            "send_resolved": config["sendResolved"], "to": config["to"], "from": config["from"],
            "smarthost": config["smarthost"], "auth_username": config["authUsername"],
            "auth_password": _secret(secrets, config["authPassword"]), "require_tls": config["requireTLS"],
            "headers": {h["key"]: h["value"] for h in config.get("headers", [])},
            "html": config["html"], "text": config["text"]})
    return out


def merge(base: Mapping[str, Any], resource: Mapping[str, Any], namespace: str,
          secrets: Mapping[str, Mapping[str, str]]) -> dict[str, Any]:
    """``base`` (the Alertmanager's own configuration) with the AlertmanagerConfig ``resource`` applied in
    ``namespace``; ``secrets``: that namespace's Secrets, name -> key -> value."""
    assert resource["apiVersion"] == "monitoring.coreos.com/v1alpha1" and resource["kind"] == "AlertmanagerConfig"
    name = resource["metadata"]["name"]
    spec = resource["spec"]
    assert set(spec) <= {"route", "receivers", "inhibitRules"}, sorted(spec)
    config = copy.deepcopy(dict(base))
    enforced = f'namespace="{namespace}"'
    for rule in spec.get("inhibitRules", []):
        config.setdefault("inhibit_rules", []).append({
            "source_matchers": [*(matcher(m) for m in rule.get("sourceMatch", [])), enforced],
            "target_matchers": [*(matcher(m) for m in rule.get("targetMatch", [])), enforced],
            "equal": rule.get("equal", [])})
    route = _route(spec["route"], namespace, name)
    route["matchers"] = [*route.get("matchers", []), enforced]
    route["continue"] = True
    config["route"]["routes"] = [route, *config["route"].get("routes", [])]
    config["receivers"] = [*config.get("receivers", []),
                           *(_receiver(r, namespace, name, secrets) for r in spec.get("receivers", []))]
    return config
