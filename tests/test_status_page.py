"""The status page on ``/`` and its JSON twin, against a real exporter and a real instrumented training run.

The headless-Chromium test loads the page as a person would (``--dump-dom`` after layout, ``--screenshot``) and
checks what is on it: the job, its rank, the phase bar, the verdict. ``--update-golden`` copies the screenshot
to docs/status-page.png, the picture in the README.
"""

from __future__ import annotations

import array
import http.server
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from bottleneck_exporter.status import model
from bottleneck_exporter.status.page import REFRESH_SECONDS, render
from bottleneck_exporter.status.recorder import MAX_SNAPSHOTS, Recorder, Snapshot
from bottleneck_exporter.status.renders import FRESH_SECONDS, Renders
from bottleneck_exporter.status.verdicts import Verdicts
from bottleneck_exporter.wire.encode import encode
from tests.conftest import ROOT, require_tool, wait_until
from tests.datagrams import hook_payload

PROFILE = ROOT / "tests" / "fixtures" / "gpu-profiles" / "hopper-4x-h100.yaml"
SCREENSHOT = ROOT / "docs" / "status-page.png"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars"]


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    profile = tmp_path / f"chromium-{time.monotonic_ns()}"  # a fresh profile: nothing cached from a former run
    return subprocess.run([require_tool("chromium"), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=120)


def _visible_text(dom: str) -> str:
    body = re.sub(r"<(style|title)[^>]*>.*?</\1>", " ", dom, flags=re.S)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", body))


@pytest.mark.live
@pytest.mark.torch
def input_bound_trainer(sock: Path, job: str, stop: Path) -> subprocess.Popen[str]:
    """A real input-bound CPU job (num_workers=0, a slow dataset) pushing to ``sock`` until ``stop`` exists."""
    return subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "hook_trainer.py"), "--dataset", "slow", "--workers", "0",
         "--stop-file", str(stop)],
        env={**os.environ, "BOTTLENECK_PUSH_ADDRESS": f"unix://{sock}", "BOTTLENECK_JOB": job},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.mark.golden
def test_a_person_sees_the_input_bound_job_its_rank_phase_bar_and_verdict(start_exporter, tmp_path: Path,
                                                                          update_golden: bool) -> None:
    sock = tmp_path / "push.sock"
    exporter = start_exporter([f"--push.socket={sock}", f"--collector.gpu.profile={PROFILE}",
                               "--web.status-interval=1"])
    stop = tmp_path / "stop"
    trainer = input_bound_trainer(sock, "resnet-input-bound", stop)
    try:
        def verdict_for_the_job() -> dict | None:
            status = requests.get(f"{exporter.url}/status.json", timeout=30).json()
            alerts = {f["alert"] for f in status["verdicts"]["findings"]
                      if f["labels"].get("training_job") == "resnet-input-bound"}
            return status if "BottleneckInputBound" in alerts else None

        status = wait_until(verdict_for_the_job, 120, "the input-bound verdict in /status.json")
        rank = status["jobs"][0]["ranks"][0]
        assert (status["jobs"][0]["job"], rank["rank"], rank["num_workers"]) == ("resnet-input-bound", "0", 0)
        assert rank["phase_ratios"]["data_wait"] > 0.5, rank
        assert abs(sum(rank["phase_ratios"].values()) - 1) < 1e-6, rank
        assert 0 <= rank["last_step_age_seconds"] < 30, rank
        assert status["push"]["unix_socket"] == str(sock) and status["push"]["datagrams"] > 0
        assert status["gpu"]["state"] == "ok" and len(status["gpu"]["gpus"]) == 4
        assert {c["name"] for c in status["collectors"]} >= {"cpu", "gpu", "push", "training"}

        shot = tmp_path / "status.png"
        # Well inside the page's meta refresh: at its end chromium would dump the DOM of the reload in flight,
        # empty (a race this test lost 2 times in 3 on a loaded machine with the budget at the refresh).
        dumped = _chromium(tmp_path, f"--virtual-time-budget={REFRESH_SECONDS * 1000 // 5}", "--dump-dom",
                           f"{exporter.url}/")
        shown = _chromium(tmp_path, "--window-size=1280,1480", f"--screenshot={shot}", f"{exporter.url}/")
    finally:
        stop.touch()
        trainer.wait(timeout=60)
    assert dumped.returncode == 0, dumped.stderr
    text = _visible_text(dumped.stdout)
    assert "resnet-input-bound" in text and "input-bound (data loading)" in text, text
    assert re.search(r"resnet-input-bound 0 \d+ [\d.]+ ms \d+s ago 0 ", text), "job, rank, steps, step time, " \
        "last step, workers: " + text
    assert re.search(r"data wait \d+%", text), text
    bar = re.search(r'<svg class="phasebar"[^>]*aria-label="([^"]*)"[^>]*>(.*?)</svg>', dumped.stdout, re.S)
    assert bar is not None and bar.group(1).startswith("data wait"), dumped.stdout
    widths = [float(w) for w in re.findall(r'<rect[^>]*width="([\d.]+)"', bar.group(2))]
    assert widths[0] > 200 and abs(sum(widths) - 400) < 1, widths  # data wait, the widest, first
    assert shown.returncode == 0 and shot.exists(), shown.stderr
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    if update_golden:
        shutil.copyfile(shot, SCREENSHOT)


def _status(jobs: list | None = None, findings: list | None = None) -> dict:
    return {
        "exporter": {"version": "0.1.0", "instance": "node-1", "uptime_seconds": 30, "ready": True,
                     "telemetry_path": "/metrics"},
        "collection": {"at": 1.0, "age_seconds": 2.0, "snapshots": 3, "span_seconds": 10.0},
        "collectors": [{"name": "cpu", "success": False, "duration_seconds": 0.001}],
        "gpu": {"state": "unavailable", "detail": "NVML not available", "gpus": []},
        "push": {"state": "off", "detail": "not running"},
        "jobs": jobs or [],
        "verdicts": {"window_seconds": 10.0, "snapshots": 3, "findings": findings or [], "errors": [],
                     "missing": [], "bundle": "bottleneck", "peers": []},
    }


def test_page_has_no_script_and_no_external_asset() -> None:
    page = render(_status()).decode()
    assert "<script" not in page and " src=" not in page and "<link" not in page
    assert '<span class="badge fail">failed</span>' in page  # a failed collector is visible


def test_hostile_job_name_is_escaped_on_the_page() -> None:
    jobs = [{"job": '<img src=x onerror="alert(1)">', "ranks": [{"rank": "0", "steps": 1.0}]}]
    page = render(_status(jobs=jobs)).decode()
    assert "<img" not in page and "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in page


class _Counting:
    """A collector with one series the page reads and one it does not."""

    def __init__(self) -> None:
        self.n = 0

    def collect(self):
        from prometheus_client.metrics_core import GaugeMetricFamily

        self.n += 1
        kept = GaugeMetricFamily("bottleneck_push_jobs", "kept", value=self.n)
        dropped = GaugeMetricFamily("bottleneck_cpu_frequency_hertz", "not read by the page", value=1)
        return [kept, dropped]


def test_recorder_ring_stays_bounded_and_keeps_only_read_series() -> None:
    clock = iter(range(10_000))
    recorder = Recorder(_Counting(), {"bottleneck_push_jobs"}, spacing=1.0, clock=lambda: float(next(clock)))
    for _ in range(MAX_SNAPSHOTS * 3):
        families = list(recorder.collect())
        assert len(families) == 2  # the scrape itself still gets everything
    snapshots = recorder.snapshots()
    assert len(snapshots) == MAX_SNAPSHOTS
    assert {name for snap in snapshots for name, _, _ in snap.samples} == {"bottleneck_push_jobs"}
    assert next(iter(snapshots[-1].samples))[2] == MAX_SNAPSHOTS * 3  # the newest kept, the oldest dropped
    assert all(snap.series is snapshots[0].series for snap in snapshots), "unchanged series are not shared"


def test_snapshots_older_than_the_rate_window_drop_out() -> None:
    times = iter([0.0, 100.0, 200.0, 300.0, 301.0, 450.0])
    recorder = Recorder(_Counting(), {"bottleneck_push_jobs"}, spacing=1.0, max_age=300.0,
                        clock=lambda: next(times))
    for _ in range(6):
        list(recorder.collect())
    assert [snap.at for snap in recorder.snapshots()] == [200.0, 300.0, 301.0, 450.0]


def test_a_fast_scraper_does_not_fill_the_ring_faster_than_the_spacing() -> None:
    times = iter([0.0, 0.1, 0.2, 5.0, 5.1])
    recorder = Recorder(_Counting(), {"bottleneck_push_jobs"}, spacing=5.0, clock=lambda: next(times))
    for _ in range(5):
        list(recorder.collect())
    assert [snap.at for snap in recorder.snapshots()] == [0.0, 5.0]


def test_status_json_is_valid_json_before_the_first_collection() -> None:
    from bottleneck_exporter.status import model

    data = model.build([], {}, {"version": "0.1.0", "started_at": 0.0}, now=5.0)
    json.dumps(data)
    assert data["verdicts"]["snapshots"] == 0 and data["jobs"] == [] and data["gpu"]["state"] == "off"
    assert "Collecting samples" in render({**data, "exporter": {**data["exporter"], "instance": "n"}}).decode()


# -- fresh when asked -------------------------------------------------------------------------------------------
class _Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class _Gated(_Counting):
    """A _Counting collector whose collections wait at a gate (open unless closed), saying when one has begun."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()

    def collect(self):
        self.entered.set()
        assert self.gate.wait(60)
        return super().collect()


def _renders(collector: _Counting, clock: _Clock) -> tuple[Recorder, Renders]:
    recorder = Recorder(collector, {"bottleneck_push_jobs"}, spacing=5.0, clock=clock)
    facts = {"version": "0.1.0", "instance": "node-1", "started_at": 0.0}
    verdicts = Verdicts(0.0, 0, [], [], [])
    return recorder, Renders(recorder, lambda: model.build(
        [s for s in (recorder.latest(),) if s is not None], {}, facts, now=clock(), verdicts=verdicts), clock=clock)


def test_a_page_takes_a_new_collection_only_when_the_last_is_older_than_the_fresh_interval() -> None:
    """Regression: the page showed the collection taken at start until the sampler's next, 15 s later. Now a
    request takes one when the last is 2 s old, at most one per 2 s however many ask, and a scrape's young
    collection serves as well as its own."""
    clock, collector = _Clock(), _Counting()
    recorder, renders = _renders(collector, clock)
    first = {renders.page("json").etag for _ in range(50)}
    assert (collector.n, renders.count, len(first)) == (1, 1, 1)
    clock.now += FRESH_SECONDS - 0.1
    assert renders.page("html").etag in first and collector.n == 1, "a fresh render is served as it is"
    clock.now += 0.1
    second = renders.page("json")
    assert (collector.n, renders.count) == (2, 2) and second.etag not in first
    assert json.loads(second.body)["collection"]["at"] == clock.now
    clock.now += 1.0
    list(recorder.collect())  # a scrape's collection
    clock.now += FRESH_SECONDS - 1.0
    third = renders.page("json")
    assert (collector.n, renders.count) == (3, 3), "a scrape's collection 1 s old needs no other"
    assert json.loads(third.body)["collection"]["at"] == clock.now - 1.0


def test_concurrent_page_requests_share_one_collection_and_one_render() -> None:
    clock, collector = _Clock(), _Gated()
    _, renders = _renders(collector, clock)
    collector.gate.clear()
    with ThreadPoolExecutor(12) as pool:
        asked = [pool.submit(renders.page, "html" if n % 2 else "json") for n in range(12)]
        assert collector.entered.wait(30)  # one request collects; the others wait for it
        collector.gate.set()
        pages = [future.result(timeout=60) for future in asked]
    assert (collector.n, renders.count) == (1, 1)
    assert len({page.etag for page in pages}) == 1
    assert len({page.body for page in pages}) == 2, "each form made once, the same bytes for every request"


def test_a_job_that_pushed_after_the_last_collection_is_on_the_next_page(start_exporter, tmp_path: Path) -> None:
    """Regression: "No training process has pushed its step timings" for a job whose series had been on /metrics
    for 6 s: the page showed the collection taken at start until the sampler's next one."""
    sock = tmp_path / "push.sock"
    exporter = start_exporter(["--collector.disable-defaults", f"--push.socket={sock}",
                               "--web.status-interval=1h"])  # the sampler will not collect again
    assert requests.get(f"{exporter.url}/status.json", timeout=30).json()["jobs"] == []
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
        sender.sendto(encode(hook_payload("pushed-just-now", steps=5)), str(sock))

    def on_the_page() -> list:
        return requests.get(f"{exporter.url}/status.json", timeout=30).json()["jobs"]

    jobs = wait_until(on_the_page, 30, "the job on /status.json")
    assert [(job["job"], [rank["steps"] for rank in job["ranks"]]) for job in jobs] == [("pushed-just-now", [5.0])]
    assert "pushed-just-now" in requests.get(f"{exporter.url}/", timeout=30).text


def _train_snapshot(at: float, ranks: dict[str, tuple[float, float, float]]) -> Snapshot:
    """A snapshot of job "j": per rank, (steps, step seconds, data wait seconds) so far."""
    series, numbers = [], []
    for rank, (steps, step, data_wait) in ranks.items():
        labels = (("rank", rank), ("training_job", "j"))
        series.append(("bottleneck_train_steps_total", labels))
        numbers.append(steps)
        for phase, seconds in (("step", step), ("data_wait", data_wait)):
            series.append(("bottleneck_train_phase_seconds_total", (("phase", phase), *labels)))
            numbers.append(seconds)
    return Snapshot(at, tuple(series), array.array("d", numbers))


def test_a_rank_that_joined_after_the_oldest_snapshot_is_split_from_its_own_first() -> None:
    snapshots = [_train_snapshot(0.0, {"0": (10, 10.0, 5.0)}),
                 _train_snapshot(5.0, {"0": (20, 20.0, 10.0), "1": (4, 4.0, 1.0)}),
                 _train_snapshot(10.0, {"0": (30, 30.0, 12.0), "1": (8, 8.0, 3.0)})]
    data = model.build(snapshots, {}, {"started_at": 0.0}, now=10.0, verdicts=Verdicts(10.0, 3, [], [], []))
    ranks = {rank["rank"]: rank for rank in data["jobs"][0]["ranks"]}
    assert (ranks["0"]["window_steps"], ranks["0"]["phase_ratios"]["data_wait"]) == (20, 0.35)
    assert (ranks["1"]["window_steps"], ranks["1"]["phase_ratios"]["data_wait"]) == (4, 0.5)
    assert ranks["0"]["phases_over"] == ranks["1"]["phases_over"] == "recent"


class _Held(http.server.BaseHTTPRequestHandler):
    """A node_exporter that never answers: each request waits until the test ends."""

    entered = threading.Event()
    release = threading.Event()

    def do_GET(self) -> None:
        type(self).entered.set()
        type(self).release.wait(60)

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.live
@pytest.mark.tools
@pytest.mark.torch
def test_under_the_preset_the_page_judges_host_verdicts_from_node_exporter(start_exporter, tmp_path: Path,
                                                                           node_exporter) -> None:
    """--collector.preset=beside-node-exporter: our host collectors are off; the page reads the real
    node_exporter (--node-exporter.url) and evaluates the node-exporter bundle."""
    sock = tmp_path / "push.sock"
    exporter = start_exporter([f"--push.socket={sock}", "--collector.preset=beside-node-exporter",
                               "--no-collector.gpu", "--web.status-interval=1",
                               f"--node-exporter.url=http://127.0.0.1:{node_exporter.port}/metrics"])
    stop = tmp_path / "stop"
    trainer = input_bound_trainer(sock, "beside", stop)
    try:
        def judged() -> dict | None:
            verdicts = requests.get(f"{exporter.url}/status.json", timeout=30).json()["verdicts"]
            alerts = {f["alert"] for f in verdicts["findings"] if f["labels"].get("training_job") == "beside"}
            return verdicts if "BottleneckInputBound" in alerts and verdicts["peers"] else None

        verdicts = wait_until(judged, 120, "the input-bound verdict with node_exporter read")
        assert verdicts["bundle"] == "node-exporter"
        assert [(p["name"], p["job"], p["up"]) for p in verdicts["peers"]] == [("node_exporter", "node-exporter", True)]
        # The host CPU series came from node_exporter: our cpu collector is off.
        assert not [m for m in verdicts["missing"] if m.startswith("host CPU")], verdicts["missing"]
        assert "bottleneck_cpu_seconds_total" not in requests.get(f"{exporter.url}/metrics", timeout=10).text
        page = requests.get(f"{exporter.url}/", timeout=30).text
        assert "Rule bundle node-exporter" in page and "did not answer" not in page
    finally:
        stop.touch()
        trainer.wait(timeout=60)


@pytest.mark.live
def test_a_node_exporter_that_hangs_is_named_on_the_page_and_never_holds_a_scrape(start_exporter) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Held)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        exporter = start_exporter(["--collector.preset=beside-node-exporter", "--no-collector.gpu",
                                   "--web.status-interval=1", "--push.disable",
                                   f"--node-exporter.url=http://127.0.0.1:{server.server_address[1]}"])
        assert _Held.entered.wait(60), "the status page never read node_exporter"
        # A scrape while the read of node_exporter hangs: answered, with our series.
        scrape = requests.get(f"{exporter.url}/metrics", timeout=30)
        assert scrape.status_code == 200 and "bottleneck_scrape_collector_success" in scrape.text
        assert not _Held.release.is_set()

        def named() -> dict | None:
            verdicts = requests.get(f"{exporter.url}/status.json", timeout=30).json()["verdicts"]
            return verdicts if verdicts["peers"] and not verdicts["peers"][0]["up"] else None

        peer = wait_until(named, 60, "node_exporter named as not answering")["peers"][0]
        assert "timed out" in peer["error"] and "BottleneckCpuSaturated" in peer["unjudged"]
        page = requests.get(f"{exporter.url}/", timeout=30).text
        assert "node_exporter did not answer" in page and "--node-exporter.url" in page
    finally:
        _Held.release.set()
        server.shutdown()
        server.server_close()


@pytest.mark.live
@pytest.mark.tools
def test_under_the_dcgm_preset_the_page_reads_dcgm_exporter_as_well(start_exporter, node_exporter,
                                                                    dcgm_exporter: str) -> None:
    """--collector.preset=beside-node-exporter-and-dcgm: node_exporter and the recorded dcgm-exporter scrape are
    read, the node-exporter-dcgm bundle evaluated; the GPU and host hints of missing data are gone."""
    exporter = start_exporter(["--collector.preset=beside-node-exporter-and-dcgm", "--no-collector.gpu",
                               "--web.status-interval=1", "--push.disable",
                               f"--node-exporter.url=http://127.0.0.1:{node_exporter.port}/metrics",
                               f"--dcgm-exporter.url=http://{dcgm_exporter}/metrics"])

    def read() -> dict | None:
        verdicts = requests.get(f"{exporter.url}/status.json", timeout=30).json()["verdicts"]
        return verdicts if verdicts["snapshots"] >= 2 and len(verdicts["peers"]) == 2 else None

    verdicts = wait_until(read, 60, "two peers read")
    assert verdicts["bundle"] == "node-exporter-dcgm"
    assert [(p["name"], p["up"]) for p in verdicts["peers"]] == [("node_exporter", True), ("dcgm-exporter", True)]
    assert not [m for m in verdicts["missing"] if m.startswith(("GPU", "host CPU"))], verdicts["missing"]
    assert "bundle=node-exporter-dcgm" in exporter.output()  # the start line says what the page reads
