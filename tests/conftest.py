"""Shared test helpers: golden files, real external tools, and a real exporter process on a free port."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pytest
import requests

if TYPE_CHECKING:
    from tests.promstack import Process

ROOT = Path(__file__).resolve().parent.parent
# The import name of the source folder exporter/ (pyproject.toml: package-dir).
PACKAGE = "bottleneck_exporter"
FIXTURES = ROOT / "tests" / "fixtures"
# A recorded dcgm-exporter scrape of 4x H100: the peer series the dcgm bundles read.
DCGM_FIXTURE = FIXTURES / "dcgm-exporter" / "hopper-4x-h100.prom"


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
                    "prometheus-alertmanager prometheus-node-exporter victoria-metrics)")
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


T = TypeVar("T")


def stop_all(processes: Iterable[subprocess.Popen[Any] | None], timeout: float = 120) -> None:
    """Wait for each process (told to stop, by a stop file say) to end, and kill the ones that do not."""
    for process in processes:
        if process is None:
            continue
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()


def wait_until(check: Callable[[], T], timeout: float, what: str, interval: float = 0.2,
               ignoring: tuple[type[Exception], ...] = ()) -> T:
    """Poll ``check`` until it returns something truthy, and return that. After ``timeout`` seconds, an
    AssertionError naming ``what`` and the last value (or the last of the ``ignoring`` errors, which count as
    "not yet"). The one poller of the suite: a test never sleeps a fixed time for something to happen."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = check()
        except ignoring as err:
            last = err
        else:
            if last:
                return last
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what} (last: {last!r})")
        time.sleep(interval)


def wait_http(url: str, timeout: float = 20.0, **kwargs: object) -> requests.Response:
    """The first answer of ``url``, whatever its status, once it listens."""
    # In a list: a Response is falsy for an error status, and any status is an answer here.
    return wait_until(lambda: [requests.get(url, timeout=2, **kwargs)],  # type: ignore[arg-type]
                      timeout, f"{url} to answer", interval=0.1, ignoring=(requests.RequestException,))[0]


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
        def ready() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"exporter exited {self.proc.returncode}: {self.output()}")
            return requests.get(f"{self.url}/-/ready", timeout=1).status_code == 200

        wait_until(ready, 30, "the exporter to become ready", interval=0.1, ignoring=(requests.RequestException,))

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


@pytest.fixture
def rx(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    """A receiving socket (non-blocking, for tests.datagrams.received) and the address a hook sends to it."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(tmp_path / "rx.sock"))
    sock.setblocking(False)
    yield sock, f"unix://{tmp_path}/rx.sock"
    sock.close()


@pytest.fixture
def trainers(tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """``trainers(job, dataset, socket_path, *flags)`` → a running tests/hook_trainer.py (num_workers=0) pushing
    to ``socket_path`` as training job ``job``; all of them are stopped after the test."""
    started: list[subprocess.Popen[str]] = []
    stop = tmp_path / "stop-trainers"

    def start(job: str, dataset: str, socket_path: Path, *extra: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "hook_trainer.py"), "--dataset", dataset, "--workers", "0",
             "--stop-file", str(stop), *extra],
            env={**os.environ, "BOTTLENECK_PUSH_ADDRESS": f"unix://{socket_path}", "BOTTLENECK_JOB": job},
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        started.append(proc)
        return proc

    yield start
    stop.touch()
    stop_all(started, timeout=60)


@pytest.fixture
def node_exporter(tmp_path: Path) -> Iterator[Process]:
    """A real node_exporter (Debian's prometheus-node-exporter) on a free port."""
    from tests.promstack import start_node_exporter  # promstack imports this module

    exporter = start_node_exporter(tmp_path)
    yield exporter
    exporter.stop()


@pytest.fixture
def dcgm_exporter() -> Iterator[str]:
    """The recorded dcgm-exporter scrape as a static target: host:port."""
    from tests.promstack import static_target

    with static_target(DCGM_FIXTURE) as address:
        yield address

