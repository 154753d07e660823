"""Peers (node_exporter, dcgm-exporter) for standalone diagnose and the status page: which bundle the exporters
given make, the errors for a wrong choice or a bad URL, the labels a scrape gives, the status page's settings.
The live runs are in tests/test_e2e_bundles.py and tests/test_status_page.py."""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.server
import io
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bottleneck_exporter import cli, diagnose
from bottleneck_exporter.config import ConfigError
from bottleneck_exporter.heuristics.sources import BUNDLES, DCGM, NODE_EXPORTER
from bottleneck_exporter.status import peers as status_peers
from bottleneck_exporter.verdicts import peers
from bottleneck_exporter.verdicts.sampling import HttpSource
from bottleneck_exporter.verdicts.scrape import Unreachable


@pytest.mark.parametrize(("given", "bundle"), [((), "bottleneck"), ((NODE_EXPORTER,), "node-exporter"),
                                               ((NODE_EXPORTER, DCGM), "node-exporter-dcgm")])
def test_the_bundle_follows_the_exporters_given(given: tuple[str, ...], bundle: str) -> None:
    assert peers.bundle_for(given) == bundle
    peers.check_bundle(bundle, given)


def test_every_bundle_reads_the_peers_its_sources_name() -> None:
    assert {name: peers.peers_of(name) for name in BUNDLES} == {
        "bottleneck": (), "node-exporter": (NODE_EXPORTER,), "node-exporter-dcgm": (NODE_EXPORTER, DCGM),
        "node-exporter-dcgm-only": (NODE_EXPORTER, DCGM)}


@pytest.mark.parametrize(("args", "message"), [
    (["--dcgm-exporter.url", "http://h:9400"], "no rule bundle reads dcgm-exporter alone"),
    (["--bundle", "node-exporter"], "bundle node-exporter reads node_exporter: give --node-exporter.url"),
    (["--bundle", "node-exporter-dcgm", "--node-exporter.url", "http://h:9100"],
     "bundle node-exporter-dcgm reads dcgm-exporter: give --dcgm-exporter.url"),
    (["--bundle", "bottleneck", "--node-exporter.url", "http://h:9100"],
     "bundle bottleneck does not read node_exporter, yet --node-exporter.url was given; pick a bundle that does "
     "(--bundle node-exporter)"),
    (["--node-exporter.url", "localhost:9100"], "node_exporter URL: expected http://HOST:PORT/metrics"),
    (["--prometheus.url", "http://p:9090", "--node-exporter.url", "http://h:9100"], "are for standalone diagnose"),
])
def test_a_wrong_bundle_or_url_is_a_usage_error_before_any_sampling(args: list[str], message: str) -> None:
    err = io.StringIO()
    assert diagnose.main(args, stdout=io.StringIO(), stderr=err) == diagnose.EXIT_USAGE
    assert message in err.getvalue()
    assert "sampling" not in err.getvalue()


def test_a_scrape_labels_samples_as_prometheus_with_honor_labels_false() -> None:
    points = peers.Points("node-1")
    points.add(10.0, "dcgm-exporter", [("DCGM_FI_DEV_GPU_UTIL", {"gpu": "0", "job": "theirs", "instance": "x"}, 41.0)])
    points.add(10.0, "node-exporter", [], up=False)
    series = {tuple(sorted(labels.items())): list(values) for labels, _, values in points.store().series()}
    assert series == {
        (("__name__", "DCGM_FI_DEV_GPU_UTIL"), ("exported_instance", "x"), ("exported_job", "theirs"), ("gpu", "0"),
         ("instance", "node-1"), ("job", "dcgm-exporter")): [41.0],
        (("__name__", "up"), ("instance", "node-1"), ("job", "dcgm-exporter")): [1.0],
        (("__name__", "up"), ("instance", "node-1"), ("job", "node-exporter")): [0.0],
    }


def test_a_url_that_is_not_an_exposition_is_reported_and_the_rest_still_evaluated(tmp_path: Path) -> None:
    """A peer URL that answers 404 (a wrong path): named in the report with its HTTP status; exit is not 3."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    out = io.StringIO()
    try:
        code = diagnose.main(["--window", "1", "--interval", "1", "--node-exporter.url",
                              f"http://127.0.0.1:{server.server_address[1]}/metrics", "--no-collector.gpu",
                              f"--push.socket={tmp_path}/push.sock"], stdout=out, stderr=io.StringIO())
    finally:
        server.shutdown()
        server.server_close()
    assert code in (diagnose.EXIT_OK, diagnose.EXIT_CRITICAL)
    text = out.getvalue()
    assert "bundle node-exporter" in text and "node_exporter did not answer 2 of 2 scrapes" in text
    assert "HTTP 404" in text and "BottleneckCpuSaturated" in text


def _status_args(argv: list[str]) -> argparse.Namespace:
    return cli.build_parser().parse_args(argv)


def test_the_status_page_evaluates_the_presets_bundle_with_its_peers() -> None:
    assert status_peers.settings(_status_args([]), {}) == ("bottleneck", [])
    bundle, found = status_peers.settings(_status_args(["--collector.preset=beside-node-exporter"]), {})
    assert (bundle, found) == ("node-exporter", [peers.Peer(NODE_EXPORTER, "http://localhost:9100/metrics")])
    bundle, found = status_peers.settings(_status_args(["--collector.preset=beside-node-exporter-and-dcgm",
                                                        "--dcgm-exporter.url=http://gpu:9400"]),
                                          {"status": {"node-exporter-url": ""}})
    assert (bundle, found) == ("node-exporter-dcgm", [peers.Peer(DCGM, "http://gpu:9400/metrics")])


def test_a_flag_wins_over_the_config_file_and_an_empty_one_reads_no_peer() -> None:
    preset = "--collector.preset=beside-node-exporter"
    in_file = {"status": {"node-exporter-url": "http://file:9100"}}
    assert status_peers.settings(_status_args([preset]), in_file)[1] == [peers.Peer(NODE_EXPORTER,
                                                                                    "http://file:9100/metrics")]
    assert status_peers.settings(_status_args([preset, "--node-exporter.url=http://flag:9100"]), in_file)[1] == [
        peers.Peer(NODE_EXPORTER, "http://flag:9100/metrics")]
    assert status_peers.settings(_status_args([preset, "--node-exporter.url="]), in_file)[1] == []


def test_diagnose_and_the_exporter_spell_each_peer_url_one_way() -> None:
    """Regression: the status page's flags were --status.node-exporter-url, diagnose's --node-exporter.url."""
    def url_flags(flags: list[str]) -> set[str]:
        return {f for f in flags if "node-exporter" in f or "dcgm-exporter" in f}

    assert url_flags(diagnose.build_parser().flags()) == url_flags(cli.build_parser().flags()) == set(
        peers.URL_FLAGS.values())


def test_a_bad_status_url_names_the_flag_or_the_key() -> None:
    with pytest.raises(ConfigError, match=r"--node-exporter\.url: node_exporter URL: expected"):
        status_peers.settings(_status_args(["--collector.preset=beside-node-exporter",
                                            "--node-exporter.url=localhost:9100"]), {})
    with pytest.raises(ConfigError, match=r"exporter\.yml: status\.node-exporter-url: node_exporter URL: expected"):
        status_peers.settings(_status_args(["--collector.preset=beside-node-exporter"]),
                              {"status": {"node-exporter-url": "localhost:9100"}}, "exporter.yml")
    with pytest.raises(ConfigError, match=r"exporter\.yml: status\.node-exporter-ur: unknown setting"):
        status_peers.settings(_status_args([]), {"status": {"node-exporter-ur": "x"}}, "exporter.yml")


class _Peer(http.server.BaseHTTPRequestHandler):
    """A broken peer: ``mode`` "trickle" sends a valid header, then one byte of body every 0.2 s for ever;
    "garbage" answers something that is not HTTP at all."""

    mode = "trickle"

    def do_GET(self) -> None:
        if self.mode == "garbage":
            self.wfile.write(b"\x00\x01 not http\r\n\r\n")
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        try:
            for _ in range(300):
                self.wfile.write(b"#")
                self.wfile.flush()
                threading.Event().wait(0.2)
        except OSError:
            pass

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize("mode", ["trickle", "garbage"])
def test_a_peer_that_trickles_or_answers_garbage_is_a_peer_error_within_the_timeout(mode: str) -> None:
    """urlopen's timeout bounds each socket read only, and a reply that is not HTTP raises an HTTPException
    (not an OSError): both become a PeerError, the trickle within the timeout, not after the whole body."""
    with _serving(mode) as url, pytest.raises(peers.PeerError) as err:
        peers.scrape(peers.peer(NODE_EXPORTER, url), timeout=1.0)
    assert ("within 1s" if mode == "trickle" else "node_exporter") in str(err.value)


@pytest.mark.parametrize("mode", ["trickle", "garbage"])
def test_our_exporter_trickling_or_answering_garbage_is_unreachable_within_the_timeout(mode: str) -> None:
    """Regression: diagnose read our own exporter with a bare urlopen, without the peers' bounds: a trickling
    exporter held it for ever, and garbage escaped as an HTTPException (a crash, exit 4)."""
    started = time.monotonic()
    with _serving(mode) as url, pytest.raises(Unreachable) as err:
        HttpSource(url, timeout=1.0).samples()
    assert time.monotonic() - started < 10
    assert str(err.value).startswith(url) and ("within 1s" if mode == "trickle" else url) in str(err.value)


@contextlib.contextmanager
def _serving(mode: str) -> Iterator[str]:
    handler = type("Handler", (_Peer,), {"mode": mode})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()
