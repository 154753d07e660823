"""The push receiver as a registered part of the daemon: options by the same precedence as a collector's, its
own success and duration series, failures confined to it, started and stopped with the daemon; and
``/-/ready`` held at 503 until the first collection."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import requests
from prometheus_client import CollectorRegistry, generate_latest

from bottleneck_exporter.cli import build_parser
from bottleneck_exporter.collectors.orchestrator import Orchestrator
from bottleneck_exporter.parts import PUSH, build_parts
from bottleneck_exporter.push import settings as push_settings
from bottleneck_exporter.status import Status
from bottleneck_exporter.training.registry import TrainingRegistry
from bottleneck_exporter.web.server import serve, start_in_thread
from tests.conftest import FIXTURES, free_port, wait_http

PROFILE = FIXTURES / "gpu-profiles" / "hopper-4x-h100.yaml"


def _parts(tmp_path: Path, argv: list[str], file_config: dict | None = None) -> dict:
    args = build_parser().parse_args(["--collector.disable-defaults", f"--push.socket={tmp_path / 'push.sock'}",
                                      *argv])
    return build_parts(args, file_config or {}, TrainingRegistry(), "exporter.yml")


def _stop(parts: dict) -> None:
    if PUSH in parts:
        parts[PUSH].stop()


def test_push_and_collector_options_take_one_precedence_default_file_flag(tmp_path: Path) -> None:
    file_config = {"push": {"max-jobs": 5, "job-expiry": "90s"}, "collectors": {"gpu": {"max-processes": 3}}}
    gpu = [f"--collector.gpu.profile={PROFILE}", "--collector.gpu"]
    parts = _parts(tmp_path, gpu)
    defaults = {option.name: option.default for option in push_settings.OPTIONS}
    assert (parts[PUSH].store.max_jobs, parts[PUSH].store.expiry, parts["gpu"].max_processes) == \
        (defaults["max-jobs"], 600.0, 5)
    _stop(parts)
    parts = _parts(tmp_path, gpu, file_config)
    assert (parts[PUSH].store.max_jobs, parts[PUSH].store.expiry, parts["gpu"].max_processes) == (5, 90.0, 3)
    _stop(parts)
    parts = _parts(tmp_path, [*gpu, "--push.max-jobs=7", "--collector.gpu.max-processes=4"], file_config)
    assert (parts[PUSH].store.max_jobs, parts[PUSH].store.expiry, parts["gpu"].max_processes) == (7, 90.0, 4)
    _stop(parts)


def test_push_option_errors_name_the_file_and_key_like_a_collector_s(tmp_path: Path) -> None:
    from bottleneck_exporter.config import ConfigError

    for file_config, message in (({"push": {"max-jobs": 0}}, "exporter.yml: push.max-jobs: expected a positive"),
                                 ({"collectors": {"gpu": {"max-processes": 0}}},
                                  "exporter.yml: collectors.gpu.max-processes: expected a positive")):
        try:
            _parts(tmp_path, [], file_config)
        except ConfigError as err:
            assert str(err).startswith(message), err
        else:
            raise AssertionError(f"{file_config} was accepted")


class _BrokenExposition(Exception):
    pass


def test_an_exception_in_the_push_exposition_fails_push_not_the_scrape(tmp_path: Path, monkeypatch) -> None:
    parts = _parts(tmp_path, ["--collector.pressure", f"--path.procfs={FIXTURES / 'host' / 'proc'}"])
    try:
        def broken() -> list:
            raise _BrokenExposition("a bug in the exposition")

        monkeypatch.setattr(parts[PUSH].store, "ranks", broken)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(Orchestrator(parts))
        text = generate_latest(registry).decode()
    finally:
        _stop(parts)
    assert 'bottleneck_scrape_collector_success{collector="push"} 0.0' in text
    assert 'bottleneck_scrape_collector_success{collector="pressure"} 1.0' in text
    assert 'bottleneck_scrape_collector_duration_seconds{collector="push"}' in text
    assert "bottleneck_push_datagrams_total" not in text


def test_the_push_part_has_its_own_series_and_starts_and_stops_with_the_daemon(start_exporter,
                                                                              tmp_path: Path) -> None:
    sock = tmp_path / "push.sock"
    exporter = start_exporter(["--collector.disable-defaults", f"--push.socket={sock}"])
    text = exporter.scrape()
    assert 'bottleneck_scrape_collector_success{collector="push"} 1.0' in text
    assert 'bottleneck_scrape_collector_duration_seconds{collector="push"}' in text
    assert sock.is_socket()
    exporter.proc.send_signal(signal.SIGTERM)
    assert exporter.proc.wait(timeout=30) == 0
    assert not sock.exists(), "the daemon stopped but its push socket stayed"


def test_push_disable_leaves_the_part_out(tmp_path: Path) -> None:
    parts = _parts(tmp_path, ["--push.disable"])
    assert PUSH not in parts and not (tmp_path / "push.sock").exists()
    assert push_settings.settings(build_parser().parse_args(["--push.disable"]), {})["disable"] is True


class _Gate:
    """A collector whose first collection waits until the test opens the gate."""

    def __init__(self) -> None:
        self.open = threading.Event()

    def collect(self) -> list:
        self.open.wait(timeout=60)
        return []


def test_ready_is_503_until_the_first_collection() -> None:
    gate = _Gate()
    parts = {"slow": gate}
    status = Status(Orchestrator(parts), parts, listen_address="127.0.0.1:0", telemetry_path="/metrics",
                    interval=1.0)
    port = free_port()
    server = serve(f"127.0.0.1:{port}", CollectorRegistry(), ready=status.ready, pages=status.pages())
    start_in_thread(server)
    try:
        status.start()  # its first collection is held by the gate
        assert wait_http(f"http://127.0.0.1:{port}/-/ready").status_code == 503
        assert requests.get(f"http://127.0.0.1:{port}/status.json", timeout=10).json()["exporter"]["ready"] is False
        gate.open.set()
        assert status.recorder.collected.wait(timeout=30)
        assert requests.get(f"http://127.0.0.1:{port}/-/ready", timeout=10).status_code == 200
    finally:
        gate.open.set()
        status.stop()
        server.shutdown()
