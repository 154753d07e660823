"""What reading node_exporter costs the status page under ``--collector.preset=beside-node-exporter``.

    .venv/bin/python benchmarks/status_peers.py [--repeat 30]

Starts Debian's ``prometheus-node-exporter`` on a free loopback port, then prints the median and p90 of:
one read of it by the status sampler (HTTP, parse, keep the series the node-exporter bundle reads), the series
kept of those it exposes; and one evaluation of the status page's verdicts over full rings (64 snapshots) for
(a) the default bundle over our own host collectors and (b) the node-exporter bundle over our collectors under
the preset plus node_exporter's ring. The rings' timestamps are spaced 5 s apart by a fake clock (the values
are real reads), so the evaluation sees what a page would after five minutes.
"""

from __future__ import annotations

import argparse
import itertools
import shutil
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable

from bottleneck_exporter import cli, parts
from bottleneck_exporter.collectors.orchestrator import Orchestrator
from bottleneck_exporter.heuristics.sources import NODE_EXPORTER
from bottleneck_exporter.status.peers import PeerCollector
from bottleneck_exporter.status.recorder import MAX_SNAPSHOTS, Recorder, Snapshot
from bottleneck_exporter.status.verdicts import catalogue_names, evaluate
from bottleneck_exporter.training.registry import TrainingRegistry
from bottleneck_exporter.verdicts.peers import peer


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def timed(fn: Callable[[], object], repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000)
    return out


def show(what: str, ms: list[float]) -> None:
    ms = sorted(ms)
    print(f"{what:<62} median {statistics.median(ms):7.2f} ms  p90 {ms[int(0.9 * (len(ms) - 1))]:7.2f} ms")


def ring(inner: object, names: frozenset[str]) -> list[Snapshot]:
    clock = itertools.count(0.0, 5.0)
    recorder = Recorder(inner, names, spacing=1.0, clock=lambda: next(clock))  # type: ignore[arg-type]
    for _ in range(MAX_SNAPSHOTS):
        recorder.collect()
    return recorder.snapshots()


def ours(preset: list[str], bundle: str) -> list[Snapshot]:
    args = cli.build_parser().parse_args(["--no-collector.gpu", "--push.disable", *preset])
    running = parts.build_parts(args, {}, TrainingRegistry())
    return ring(Orchestrator(running), catalogue_names(bundle))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=30)
    repeat = parser.parse_args().repeat
    binary = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
    if binary is None:
        sys.exit("prometheus-node-exporter is not installed")
    port = free_port()
    proc = subprocess.Popen([binary, f"--web.listen-address=127.0.0.1:{port}"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        for _ in range(100):
            try:
                exposed = urllib.request.urlopen(url, timeout=2).read().decode()
                break
            except OSError:
                time.sleep(0.1)
        target = peer(NODE_EXPORTER, url)
        names = catalogue_names("node-exporter")
        collector = PeerCollector(target)
        kept = Recorder(collector, names | {"up"}, spacing=0.0)
        show("status sampler: one read of node_exporter", timed(kept.collect, repeat))
        samples = sum(1 for line in exposed.splitlines() if line and not line.startswith("#"))
        print(f"series kept per read: {len(kept.snapshots()[-1].series)} of {samples} exposed")

        full = ours([], "bottleneck")
        beside = ours(["--collector.preset=beside-node-exporter"], "node-exporter")
        theirs = ring(PeerCollector(target), names | {"up"})
        show("page verdicts, bundle bottleneck (our host collectors)",
             timed(lambda: evaluate(full, "node-1"), max(3, repeat // 3)))
        show("page verdicts, bundle node-exporter (preset + node_exporter)",
             timed(lambda: evaluate(beside, "node-1", "node-exporter", [(target, theirs, None)]),
                   max(3, repeat // 3)))
    finally:
        proc.terminate()
        proc.wait(timeout=10)


if __name__ == "__main__":
    main()
