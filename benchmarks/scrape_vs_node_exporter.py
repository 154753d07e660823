"""Scrape cost of bottleneck-exporter next to prometheus-node-exporter and prometheus-process-exporter.

    .venv/bin/python benchmarks/scrape_vs_node_exporter.py [--scrapes 200] [--fresh 50] [--warmup 5] [--workers 8]

Starts each exporter on a free loopback port, scrapes it ``--scrapes`` times one after the other on one
kept-alive connection (as Prometheus scrapes, with its Accept header, but without gzip: compression would
measure zlib), then ``--fresh`` times on a new connection each, and prints per exporter: the median and p90 latency
seen by the client on the kept-alive connection, the median on fresh ones, CPU seconds the exporter process
spent per kept-alive scrape (utime + stime from /proc/PID/stat, difference over those scrapes / scrapes), its
RSS after the scrapes (VmRSS), and samples and bytes per scrape. Like for like:

  host      bottleneck-exporter with whichever of cpu, memory, pressure, disk, network are registered,
            against node_exporter with the collectors that read the same files (cpu, stat, loadavg,
            schedstat; meminfo, vmstat; pressure; diskstats; netdev, netclass, infiniband), once with
            netclass and once without (ours reads two files of /sys/class/net per interface, netclass ~20).
  training  bottleneck-exporter's training collector against process-exporter following the same
            stand-in trainer (tests/fixtures/training/burn_roles.py: named pin thread, ``--workers``
            pt_data_worker children, idle threads) with per-thread-name metrics, smaps off.

Both sides run without their own runtime metrics where they can (process-exporter cannot turn its off).
Then it times the training collector's discovery in-process: the first scan, which reads every process's
command line and fd links, and the scans after it, which read one stat file per process.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bottleneck_exporter import procfs
from bottleneck_exporter.collectors import REGISTRY
from bottleneck_exporter.training.discovery import Discovery

ROOT = Path(__file__).resolve().parent.parent
NODE_EXPORTER = "/usr/bin/prometheus-node-exporter"
# What Prometheus 2.x asks a target for: both exporters answer it with the text format.
PROMETHEUS_ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
                     "text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
PROCESS_EXPORTER = "/usr/bin/prometheus-process-exporter"
# Our host collector -> the node_exporter collectors that read the same files.
NODE_EQUIVALENTS = {
    "cpu": ("cpu", "stat", "loadavg", "schedstat"),
    "memory": ("meminfo", "vmstat"),
    "pressure": ("pressure",),
    "disk": ("diskstats",),
    "network": ("netdev", "netclass", "infiniband"),
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    stat = procfs.read_stat("/proc", pid)
    return (stat.utime + stat.stime) / procfs.USER_HZ if stat is not None else 0.0


def rss_bytes(pid: int) -> int:
    status = procfs.read_status("/proc", pid)
    return (status.rss_bytes or 0) if status is not None else 0


@dataclass
class Result:
    name: str
    what: str
    latencies: list[float]  # on one kept-alive connection
    fresh: list[float]  # on a new connection each
    cpu_per_scrape: float
    rss: int
    samples: int
    size: int
    body: str


@contextmanager
def running(cmd: list[str]) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_for(port: int, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            raise SystemExit(f"{proc.args!r} exited with {proc.returncode}: {err[-2000:]}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/metrics")
            if conn.getresponse().status == 200:
                conn.close()
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"{proc.args!r} did not answer on port {port}")


def scrape(name: str, conn: http.client.HTTPConnection) -> bytes:
    conn.request("GET", "/metrics", headers={"Accept": PROMETHEUS_ACCEPT})
    response = conn.getresponse()
    body = response.read()
    if response.status != 200:
        raise SystemExit(f"{name}: HTTP {response.status}")
    return body


def measure(name: str, what: str, cmd: list[str], port: int, scrapes: int, fresh: int, warmup: int) -> Result:
    with running(cmd) as proc:
        wait_for(port, proc)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        for _ in range(warmup):
            scrape(name, conn)
        latencies = []
        start_cpu = cpu_seconds(proc.pid)
        body = b""
        for _ in range(scrapes):
            t0 = time.perf_counter()
            body = scrape(name, conn)
            latencies.append(time.perf_counter() - t0)
        used = cpu_seconds(proc.pid) - start_cpu
        conn.close()
        fresh_latencies = []
        for _ in range(fresh):
            t0 = time.perf_counter()
            with contextlib.closing(http.client.HTTPConnection("127.0.0.1", port, timeout=30)) as new:
                scrape(name, new)
            fresh_latencies.append(time.perf_counter() - t0)
        rss = rss_bytes(proc.pid)
    text = body.decode()
    samples = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
    return Result(name, what, latencies, fresh_latencies, used / scrapes, rss, samples, len(body), text)


def ours(port: int, collectors: list[str]) -> list[str]:
    return [sys.executable, "-m", "bottleneck_exporter", f"--web.listen-address=127.0.0.1:{port}",
            "--web.disable-exporter-metrics", "--collector.disable-defaults",
            *(f"--collector.{name}" for name in collectors)]


def print_table(results: list[Result]) -> None:
    header = (f"{'':<3} {'exporter':<20} {'kept-alive median ms':>20} {'p90 ms':>7} {'fresh median ms':>15} "
              f"{'CPU ms/scrape':>13} {'RSS MiB':>7} {'samples':>7} {'bytes':>7}")
    print(header)
    print("-" * len(header))
    for index, r in enumerate(results, start=1):
        lat = sorted(r.latencies)
        p90 = lat[min(len(lat) - 1, int(0.9 * len(lat)))]
        fresh = f"{statistics.median(r.fresh) * 1e3:.2f}" if r.fresh else "-"
        print(f"{f'[{index}]':<3} {r.name:<20} {statistics.median(lat) * 1e3:>20.2f} {p90 * 1e3:>7.2f} {fresh:>15} "
              f"{r.cpu_per_scrape * 1e3:>13.2f} {r.rss / 2**20:>7.1f} {r.samples:>7} {r.size:>7}")
    print()
    for index, r in enumerate(results, start=1):
        print(f"[{index}] {r.what}")


def discovery_cost(rounds: int = 20) -> str:
    processes = sum(1 for name in os.listdir("/proc") if name.isdigit())
    discovery = Discovery("/proc", own_pid=os.getpid())
    t0 = time.perf_counter()
    found = discovery.find()
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(rounds):
        discovery.find()
    later = (time.perf_counter() - t0) / rounds
    return (f"training discovery over {processes} processes (/proc entries), {len(found)} trainer(s) found: "
            f"first scan (every cmdline, environ and fd list) {first * 1e3:.1f} ms, "
            f"later scans (one stat per process; fd lists again only after 30 s) {later * 1e3:.1f} ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scrapes", type=int, default=200, help="scrapes per exporter (default %(default)s)")
    parser.add_argument("--fresh", type=int, default=50,
                        help="scrapes per exporter on a new connection each (default %(default)s)")
    parser.add_argument("--warmup", type=int, default=5, help="scrapes before measuring (default %(default)s)")
    parser.add_argument("--workers", type=int, default=8,
                        help="pt_data_worker children of the stand-in trainer (default %(default)s)")
    parser.add_argument("--idle-threads", type=int, default=16,
                        help="extra idle threads in the stand-in trainer (default %(default)s)")
    args = parser.parse_args()

    print(f"{os.cpu_count()} CPUs, {sum(1 for n in os.listdir('/proc') if n.isdigit())} processes, "
          f"Python {sys.version.split()[0]}, {args.scrapes} scrapes each after {args.warmup} warm-up\n")
    results: list[Result] = []

    host = [name for name in NODE_EQUIVALENTS if name in REGISTRY]
    if host:
        port = free_port()
        results.append(measure("bottleneck-exporter", "host collectors: " + ",".join(host), ours(port, host),
                               port, args.scrapes, args.fresh, args.warmup))
        if shutil.which(NODE_EXPORTER):
            node = [c for name in host for c in NODE_EQUIVALENTS[name]]
            # With and without netclass: ours reads two of its files per interface (speed, operstate), it reads
            # about twenty, so the row without it is the closer like for like.
            for collectors in (node, [c for c in node if c != "netclass"]):
                port = free_port()
                cmd = [NODE_EXPORTER, f"--web.listen-address=127.0.0.1:{port}", "--web.disable-exporter-metrics",
                       "--collector.disable-defaults", *(f"--collector.{c}" for c in collectors)]
                results.append(measure("node_exporter", "node_exporter collectors: " + ",".join(collectors), cmd,
                                       port, args.scrapes, args.fresh, args.warmup))
        else:
            print(f"({NODE_EXPORTER} not installed: apt-get install prometheus-node-exporter)")

    if "training" in REGISTRY:
        with tempfile.TemporaryDirectory() as tmp:
            script = Path(tmp) / f"bench_trainer_{os.getpid()}.py"
            shutil.copy(ROOT / "tests" / "fixtures" / "training" / "burn_roles.py", script)
            trainer = subprocess.Popen(
                [sys.executable, str(script), "--workers", str(args.workers), "--busy-workers", "0",
                 "--burn", "0", "--idle-threads", str(args.idle_threads)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            try:
                trainer.stdout.readline()  # type: ignore[union-attr]
                port = free_port()
                result = measure("bottleneck-exporter", "", ours(port, ["training"]), port, args.scrapes,
                                 args.fresh, args.warmup)
                trainers = result.body.count("bottleneck_training_process_info{")
                result.what = (f"training collector; {trainers} trainer(s) on the node, among them the "
                               f"stand-in with {args.workers} workers and {args.idle_threads + 2} threads")
                results.append(result)
                if shutil.which(PROCESS_EXPORTER):
                    config = Path(tmp) / "process-exporter.yml"
                    config.write_text(f"process_names:\n  - name: trainer\n    cmdline:\n"
                                      f"      - '{script.name}'\n")
                    port = free_port()
                    cmd = [PROCESS_EXPORTER, f"-web.listen-address=127.0.0.1:{port}", f"-config.path={config}",
                           "-threads=true", "-children=true", "-gather-smaps=false"]
                    results.append(measure("process-exporter", "process-exporter following the stand-in "
                                           "trainer and its children, -threads=true, -gather-smaps=false", cmd,
                                           port, args.scrapes, args.fresh, args.warmup))
                else:
                    print(f"({PROCESS_EXPORTER} not installed: apt-get install prometheus-process-exporter)")
                discovery_line = discovery_cost()
            finally:
                trainer.stdin.close()  # type: ignore[union-attr]
                trainer.wait(timeout=10)
    else:
        discovery_line = ""

    print_table(results)
    if discovery_line:
        print("\n" + discovery_line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
