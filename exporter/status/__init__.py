"""What the running exporter says about itself: the status page, its JSON twin, readiness, the startup line.

Modules: ``recorder`` (the bounded ring of its own recent collections), ``peers`` (node_exporter and
dcgm-exporter, read beside a ``beside-*`` preset), ``verdicts`` (the catalogue's rules
over that ring, evaluated on request), ``model`` (the page's data, served as ``/status.json``), ``page`` (the
HTML on ``/``), ``renders`` (one render of the latest collection, shared by the requests while it is fresh),
``logs`` (logfmt and JSON log lines).

``Status`` ties them to the daemon: a sampler thread collects when nothing scraped for ``interval`` seconds
(so the page has recent samples on a node Prometheus does not scrape, and costs nothing extra on one it does)
and reads the peers the bundle needs (never from a scrape of /metrics); a request for the page takes a new
collection when the last is older than ``renders.FRESH_SECONDS`` (``renders``);
``ready()`` holds ``/-/ready`` at 503 until the first collection (the parts, the push socket among them, are
started before it), and one log line says what the exporter found.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from bottleneck_exporter import __version__
from bottleneck_exporter.collectors.base import Collector
from bottleneck_exporter.heuristics.sources import DEFAULT_BUNDLE
from bottleneck_exporter.status import model
from bottleneck_exporter.status.peers import recorders
from bottleneck_exporter.status.recorder import Recorder
from bottleneck_exporter.status.renders import Page, Renders
from bottleneck_exporter.status.verdicts import Verdicts, catalogue_names, evaluate
from bottleneck_exporter.verdicts.peers import Peer

log = logging.getLogger(__name__)


class Status:
    def __init__(self, orchestrator: Collector, parts: Mapping[str, Collector], *, listen_address: str,
                 telemetry_path: str, interval: float, bundle: str = DEFAULT_BUNDLE,
                 peers: Sequence[Peer] = ()) -> None:
        self.parts = parts
        self.interval = interval
        self.bundle = bundle
        # At most one snapshot per third of the interval: a fast scraper does not shorten the recorded span.
        self.recorder = Recorder(orchestrator, catalogue_names(bundle) | model.PAGE_NAMES, spacing=interval / 3)
        self.peers = recorders(peers, catalogue_names(bundle), spacing=interval / 3)
        self.facts: dict[str, Any] = {"version": __version__, "instance": socket.gethostname(),
                                      "listen_address": listen_address, "telemetry_path": telemetry_path,
                                      "started_at": time.time()}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # The last verdicts and the ring they were computed over: a reload between two snapshots (or a second
        # browser tab) does not evaluate the catalogue again.
        self._verdicts: tuple[tuple[Any, ...], Verdicts] | None = None
        self._verdicts_lock = threading.Lock()
        self.renders = Renders(self.recorder, self.data)

    def ready(self) -> bool:
        return self.recorder.collected.is_set()

    def pages(self) -> dict[str, Callable[[], Page]]:
        return {"/": lambda: self.renders.page("html"), "/status.json": lambda: self.renders.page("json")}

    def data(self) -> dict[str, Any]:
        """The page's data: the ring and, after it, the latest collection if it is newer than the ring's last
        (jobs, collectors, GPUs as of now); the verdicts over the ring alone, so that they are evaluated
        once per snapshot the ring takes (every third of the interval), not once per render."""
        snapshots = self.recorder.snapshots()
        latest = self.recorder.latest()
        shown = [*snapshots, latest] if latest is not None and (not snapshots or latest.at > snapshots[-1].at) \
            else snapshots
        peers = [(collector.target, recorder.snapshots(), collector.error) for collector, recorder in self.peers]
        key = ((snapshots[0].at, snapshots[-1].at, len(snapshots)) if snapshots else (0.0, 0.0, 0),
               tuple((s[-1].at if s else 0.0, e) for _, s, e in peers))
        with self._verdicts_lock:
            if self._verdicts is None or self._verdicts[0] != key:
                self._verdicts = key, evaluate(snapshots, str(self.facts["instance"]), self.bundle, peers)
            verdicts = self._verdicts[1]
        return model.build(shown, self.parts, {**self.facts, "ready": self.ready()}, verdicts=verdicts)

    def start(self) -> None:
        """Start the sampler; call after the parts started (the push receiver listens before readiness)."""
        self._thread = threading.Thread(target=self._run, name="status-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        first = True
        while not self._stop.is_set():
            try:
                self.recorder.collect_if_idle(self.interval)
                for _, peer_recorder in self.peers:  # here, never in a scrape: a slow peer delays only this
                    peer_recorder.collect_if_idle(self.interval / 3)
                if first:
                    first = False
                    self._log_found()
            except Exception:  # the sampler must outlive a bug in one collection
                log.exception("status sampler: collection failed")
            self._stop.wait(self.interval / 3)

    def _log_found(self) -> None:
        found = self.data()
        gpu, push = found["gpu"], found["push"]
        failed = [c["name"] for c in found["collectors"] if not c["success"]]
        fields: dict[str, Any] = {
            "listen": self.facts["listen_address"],
            "nvml": {"ok": "ok", "degraded": "ok"}.get(gpu["state"], gpu["state"]),
            "gpus": len(gpu["gpus"]),
            "push_socket": push.get("unix_socket") or "none",
        }
        if push.get("udp"):
            fields["push_udp"] = push["udp"]
        fields["collectors"] = [name for name in self.parts if name != "push"]
        if self.peers:
            fields["bundle"] = self.bundle
            fields["peers"] = [f"{collector.target.name}={collector.target.url}" for collector, _ in self.peers]
        if failed:
            fields["failed"] = failed
        log.info("exporter ready", extra=fields)
