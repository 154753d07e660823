"""The pod a rank runs in, as the hook sees it from inside the pod, through the datagram to
``bottleneck_train_kubernetes_info``. The hook's own Session builds the datagrams (no torch needed)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from bottleneck_exporter.hook.identity import identify, kubernetes_identity
from bottleneck_exporter.hook.session import Session
from bottleneck_exporter.hook.timing import BACKWARD, DATA_WAIT, FORWARD, OPTIMIZER
from bottleneck_exporter.push.receiver import PushReceiver
from bottleneck_exporter.push.store import JobStore
from bottleneck_exporter.wire.encode import encode
from bottleneck_exporter.wire.schema import MAX_DATAGRAM_BYTES, Rejected, validate

POD_ENV = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "HOSTNAME": "bert-worker-3", "POD_NAMESPACE": "ml",
           "CONTAINER_NAME": "trainer"}


def test_downward_api_variables_win_over_the_hostname() -> None:
    env = {**POD_ENV, "POD_NAME": "bert-worker-3-real", "HOSTNAME": "node-17"}
    assert kubernetes_identity(env) == {"namespace": "ml", "pod": "bert-worker-3-real", "container": "trainer"}


def test_namespace_from_the_service_account_file_when_not_in_the_environment(tmp_path: Path) -> None:
    namespace = tmp_path / "namespace"
    namespace.write_text("research")  # the kubelet writes it without a newline
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "HOSTNAME": "nb-0"}
    assert kubernetes_identity(env, str(namespace)) == {"namespace": "research", "pod": "nb-0"}
    assert kubernetes_identity(env, str(tmp_path / "absent")) == {"pod": "nb-0"}


def test_outside_kubernetes_there_is_no_pod() -> None:
    assert kubernetes_identity({"HOSTNAME": "workstation"}) is None
    assert identify(env={"HOSTNAME": "workstation"}).kubernetes is None


def test_names_kubernetes_would_not_accept_are_left_out_not_sent() -> None:
    env = {"POD_NAME": "Bad_Name", "POD_NAMESPACE": "x" * 64, "CONTAINER_NAME": "ok"}
    assert kubernetes_identity(env, "/nonexistent") == {"container": "ok"}


def session_payload(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> dict[str, Any]:
    for key in ("KUBERNETES_SERVICE_HOST", "POD_NAME", "POD_NAMESPACE", "CONTAINER_NAME"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    session = Session(job="bert", address="off", samples=1)
    for phase in (DATA_WAIT, FORWARD, BACKWARD, OPTIMIZER):
        session.mark(phase)
    session.end_step()
    payload = session.payload()
    session.close()
    return payload


def kubernetes_series(payload: dict[str, Any]) -> list[dict[str, str]]:
    rx = PushReceiver(JobStore(8, 8, 600.0), None)
    assert rx.handle(encode(payload))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(rx)
    text = generate_latest(registry).decode()
    return [s.labels for f in text_string_to_metric_families(text) for s in f.samples
            if s.name == "bottleneck_train_kubernetes_info"]


def test_rank_in_a_pod_is_exposed_with_its_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    payload = session_payload(monkeypatch, POD_ENV)
    assert payload["kubernetes"] == {"namespace": "ml", "pod": "bert-worker-3", "container": "trainer"}
    assert kubernetes_series(payload) == [{"training_job": "bert", "rank": "0", "namespace": "ml",
                                           "pod": "bert-worker-3", "container": "trainer"}]


def test_rank_outside_kubernetes_sends_and_exposes_nothing_new(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HOSTNAME", raising=False)
    payload = session_payload(monkeypatch, {})
    assert "kubernetes" not in payload
    assert kubernetes_series(payload) == []


def test_longest_kubernetes_names_fit_in_a_datagram(monkeypatch: pytest.MonkeyPatch) -> None:
    payload = session_payload(monkeypatch, {**POD_ENV, "POD_NAME": "p" * 253, "POD_NAMESPACE": "n" * 63,
                                            "CONTAINER_NAME": "c" * 63})
    assert len(payload["kubernetes"]["pod"]) == 253
    assert len(encode(payload)) < MAX_DATAGRAM_BYTES
    assert validate(encode(payload)).kubernetes is not None


@pytest.mark.parametrize(("kubernetes", "reason"), [
    ("ml/bert", "bad_schema"),
    ({"namespace": 3}, "bad_schema"),
    ({"node": "n1"}, "bad_schema"),
    ({"pod": 'bert"} 1\nfake_series{a="'}, "bad_label"),
    ({"namespace": "UPPER"}, "bad_label"),
    ({"container": "c" * 64}, "bad_label"),
])
def test_receiver_refuses_a_kubernetes_identity_that_is_not_one(
        monkeypatch: pytest.MonkeyPatch, kubernetes: Any, reason: str) -> None:
    payload = {**session_payload(monkeypatch, {}), "kubernetes": kubernetes}
    with pytest.raises(Rejected) as refused:
        validate(encode(payload))
    assert refused.value.reason == reason and "kubernetes" in str(refused.value)


def test_hook_in_this_process_does_not_claim_a_pod() -> None:
    """The test machine is no pod: the real environment must give no identity (or a valid one, under CI in k8s)."""
    identity = kubernetes_identity()
    assert identity is None or set(identity) <= {"namespace", "pod", "container"}
    assert os.environ.get("KUBERNETES_SERVICE_HOST") or identity is None
