"""Shared test helpers: golden files, real external tools, and a real exporter process on a free port."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

ROOT = Path(__file__).resolve().parent.parent
# The import name of the source folder exporter/ (pyproject.toml: package-dir).
PACKAGE = "bottleneck_exporter"
FIXTURES = ROOT / "tests" / "fixtures"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", help="rewrite golden files instead of diffing")


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


def require_tool(name: str) -> str:
    """Path of an external tool the test needs. Missing = the test fails (never skips): CI installs it."""
    path = shutil.which(name) or shutil.which(name, path="/usr/bin:/usr/sbin:/usr/local/bin")
    if path is None:
        pytest.fail(f"{name} is not installed; .ci/run installs it (apt-get install prometheus "
                    "prometheus-alertmanager prometheus-node-exporter)")
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_http(url: str, timeout: float = 20.0, **kwargs: object) -> requests.Response:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            return requests.get(url, timeout=2, **kwargs)  # type: ignore[arg-type]
        except requests.RequestException as err:
            last = err
            time.sleep(0.1)
    raise AssertionError(f"{url} did not answer within {timeout}s: {last}")


class ExporterProcess:
    def __init__(self, args: list[str], env: dict[str, str] | None = None,
                 listen: str = "127.0.0.1:{port}") -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "bottleneck_exporter", f"--web.listen-address={listen.format(port=self.port)}",
               *args]
        # Output goes to a file, not a pipe: a pipe nobody drains would block a chatty exporter. The file
        # lives as long as this object (output() reads it after stop()), hence no context manager.
        self.log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, text=True,
                                     env={**os.environ, **(env or {})})

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read()

    def wait_ready(self) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"exporter exited {self.proc.returncode}: {self.output()}")
            try:
                if requests.get(f"{self.url}/-/ready", timeout=1).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.1)
        raise AssertionError("exporter did not become ready")

    def scrape(self) -> str:
        response = requests.get(f"{self.url}/metrics", timeout=10)
        response.raise_for_status()
        return response.text

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        # Idempotent: a test may stop an exporter itself (to restart it) before the fixture does.
        return self.output()


@pytest.fixture
def start_exporter() -> Iterator[object]:
    """``start_exporter(args)`` → a running ExporterProcess (plain HTTP), stopped after the test."""
    started: list[ExporterProcess] = []

    def start(args: list[str] | None = None, env: dict[str, str] | None = None, wait: bool = True) -> ExporterProcess:
        exporter = ExporterProcess(args or [], env)
        started.append(exporter)
        if wait:
            exporter.wait_ready()
        return exporter

    yield start
    for exporter in started:
        exporter.stop()
