"""``bottleneck-exporter diagnose``: the catalogue's verdicts, with evidence and advice, in a terminal.

Two ways to get the data, one set of rules (exporter/heuristics/catalogue.py):

* ``--prometheus.url URL``: runs every alert expression as an instant query against a Prometheus that
  scrapes the exporters (recording rules spelled out, so our rule files need not be installed); the ALERTS series
  tells which verdicts fire or are pending, and where it does not know one, how many rule intervals of the last
  ``for:`` its condition held does (``bottleneck_exporter.verdicts.prometheus``).
* standalone (no Prometheus): samples this node for ``--window`` seconds (a running exporter found at
  ``--exporter.url``, else the collectors and the push receiver in this process, so a training run instrumented with the
  hook is seen; and node_exporter and dcgm-exporter where ``--node-exporter.url`` and ``--dcgm-exporter.url`` say they
  are, labelled as Prometheus labels them: ``bottleneck_exporter.verdicts.peers``), then evaluates the expressions of
  the bundle those exporters feed (``--bundle`` picks another) over the samples with the Python evaluator
  (exporter/heuristics/promql.py), rate windows being the sampled window. The expressions are evaluated at every
  sample, so each verdict says how long its condition held within the window (throughout, the last N seconds, or
  briefly: set apart, it may be noise); ``for:`` stays the alerts' (the JSON says what a Prometheus would make of
  the same samples). Before the verdicts, the report shows each training rank's step breakdown and each GPU's
  utilization over the window.

This module is the command line; the engine (sampling, evaluation, report) is ``bottleneck_exporter.verdicts``.

Exit status: 0 no critical verdict, 1 at least one critical verdict (standalone: one that held for at least half of
the window, not briefly), 2 usage or configuration error, 3 Prometheus or the exporter could not be reached (or
every query failed), 4 internal error (a bug).
"""

from __future__ import annotations

import argparse
import socket
import sys
import traceback
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from typing import TextIO

from bottleneck_exporter.config import Parser
from bottleneck_exporter.heuristics import (
    BUNDLES,
    DEFAULT_BUNDLE,
    SEVERITIES,
    CatalogueError,
    parse_sets,
    resolve,
)
from bottleneck_exporter.options import argument_type, positive_duration
from bottleneck_exporter.verdicts import standalone
from bottleneck_exporter.verdicts.evaluation import exporter_job
from bottleneck_exporter.verdicts.peers import (
    DEFAULT_URLS,
    PEER_NAMES,
    URL_FLAGS,
    Peer,
    PeerError,
    add_url_flags,
    bundle_for,
    check_bundle,
    peers_given,
    scrape,
)
from bottleneck_exporter.verdicts.prometheus import PrometheusClient, judge
from bottleneck_exporter.verdicts.report import Report, render_json, render_text
from bottleneck_exporter.verdicts.sampling import PEER_TIMEOUT, HttpSource, InProcessSource, Sampler, Source
from bottleneck_exporter.verdicts.scrape import Unreachable

# Flags that take a duration: the exporter's syntax (README, "Durations"), longer than zero.
DURATION = argument_type(positive_duration())

EXIT_OK, EXIT_CRITICAL, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_INTERNAL = 0, 1, 2, 3, 4
DEFAULT_EXPORTER_URL = "http://127.0.0.1:9847/metrics"
LONGER = "sample longer with --window"  # said where a condition held too briefly to weigh


_EXAMPLES = """\
examples:
  bottleneck-exporter diagnose --prometheus.url=http://prometheus:9090
  bottleneck-exporter diagnose --window=60          # this node: the running exporter, else in-process
  bottleneck-exporter diagnose --severity=critical --json
  bottleneck-exporter diagnose --set data_wait_ratio=0.3 --window=30 --no-collector.gpu
  bottleneck-exporter diagnose --node-exporter.url=http://localhost:9100/metrics   # bundle node-exporter
  bottleneck-exporter diagnose --node-exporter.url=http://localhost:9100/metrics \\
      --dcgm-exporter.url=http://localhost:9400/metrics                          # bundle node-exporter-dcgm

Standalone without a running exporter, the exporter's own flags (--path.procfs, --no-collector.gpu,
--push.socket, ...; see bottleneck-exporter --help) configure the collectors sampled in this process.

exit status: 0 no critical verdict, 1 a critical verdict, 2 usage error, 3 Prometheus or the exporter
unreachable, 4 internal error."""


def build_parser() -> Parser:
    parser = Parser(
        prog="bottleneck-exporter diagnose",
        description="Print bottleneck verdicts with their evidence and advice, per node and training job.",
        epilog=_EXAMPLES,
    )
    add = parser.add_argument
    add("--prometheus.url", dest="prometheus_url", metavar="URL",
        help="evaluate the rules with this Prometheus (e.g. http://prometheus:9090)")
    add("--bundle", choices=list(BUNDLES), default=None,
        help="the rule bundle matching the exporters, e.g. node-exporter where node_exporter provides the host "
        "series (default: with --prometheus.url bottleneck; standalone, the bundle the exporters given feed: "
        "bottleneck, node-exporter with --node-exporter.url, node-exporter-dcgm with both; docs/runbook.md#bundles)")
    add("--prometheus.timeout", dest="timeout", type=DURATION, default=30.0, metavar="DURATION",
        help="per-query timeout (default: 30s)")
    add("--exporter.url", dest="exporter_url", metavar="URL",
        help=f"standalone: sample this running exporter (default: {DEFAULT_EXPORTER_URL} when it answers, "
        "else the collectors and push receiver in this process)")
    add_url_flags(parser, lambda source: f"standalone: also sample {PEER_NAMES[source]} here, e.g. "
                  f"{DEFAULT_URLS[source]}")
    add("--window", type=DURATION, default=60.0, metavar="DURATION",
        help="standalone: how long to sample, e.g. 60s or 5m (default: 1m)")
    add("--interval", type=DURATION, default=5.0, metavar="DURATION",
        help="standalone: time between samples (default: 5s)")
    add("--set", dest="sets", action="append", default=[], metavar="NAME=VALUE",
        help="override a rule parameter, e.g. --set data_wait_ratio=0.3 (see docs/runbook.md#parameters)")
    add("--severity", choices=list(reversed(SEVERITIES)), default="info",
        help="show verdicts of this severity and above (default: info)")
    add("--json", action="store_true", help="print JSON instead of a table")
    return parser


def exporter_parser() -> Parser:
    """The exporter's part flags, for the collectors and push receiver diagnose runs in-process; a misspelled
    flag is matched against diagnose's own flags as well."""
    return standalone.exporter_parser("bottleneck-exporter diagnose", build_parser().flags())


def _progress(stream: TextIO) -> Callable[[float, float], None]:
    tty = stream.isatty()
    reported = [-1]

    def show(elapsed: float, window: float) -> None:
        done = min(elapsed, window)
        if tty:
            bar = "#" * int(30 * done / window) if window else "#" * 30
            stream.write(f"\rsampling [{bar:<30}] {done:4.0f}/{window:.0f}s")
            if done >= window:
                stream.write("\n")
        elif int(done // 10) != reported[0] or done >= window:
            reported[0] = int(done // 10)
            stream.write(f"sampling {done:.0f}/{window:.0f}s\n")
        stream.flush()

    return show


def _exporter_answers(url: str) -> bool:
    base = url.rsplit("/metrics", 1)[0] if url.endswith("/metrics") else url.rstrip("/")
    try:
        with urllib.request.urlopen(f"{base}/-/healthy", timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def main(argv: Sequence[str] | None = None, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    err = stderr or sys.stderr
    try:
        return _run(argv, stdout or sys.stdout, err)
    except Exception:
        # An uncaught exception would exit 1, which scripts read as "a critical verdict was found".
        traceback.print_exc(file=err)
        print("bottleneck-exporter diagnose: internal error (a bug; the traceback above says where)", file=err)
        return EXIT_INTERNAL


def _run(argv: Sequence[str] | None, out: TextIO, err: TextIO) -> int:
    parser = build_parser()
    try:
        args, rest = parser.parse_known_args(list(sys.argv[1:] if argv is None else argv))
        if args.prometheus_url is None and rest:
            exporter_parser().parse_args(rest)  # a misspelled flag stops here, before any sampling
    except SystemExit as exit_:
        return int(exit_.code or 0)
    try:
        overrides: dict[str, object] = dict(parse_sets(args.sets))
        if args.prometheus_url and rest:
            raise CatalogueError(f"unknown arguments with --prometheus.url: {' '.join(rest)}")
        peers = peers_given(args)
        if args.prometheus_url and peers:
            raise CatalogueError(f"{' and '.join(URL_FLAGS.values())} are for standalone diagnose; with "
                                 "--prometheus.url, Prometheus scrapes them (pick their bundle with --bundle)")
        if args.prometheus_url:
            args.bundle = args.bundle or DEFAULT_BUNDLE
        else:
            args.bundle = args.bundle or bundle_for(p.source for p in peers)
            check_bundle(args.bundle, (p.source for p in peers))
        catalogue = resolve(overrides, bundle=args.bundle)
    except (CatalogueError, ValueError) as error:
        print(f"bottleneck-exporter diagnose: error: {error}", file=err)
        return EXIT_USAGE
    try:
        if args.prometheus_url:
            report = judge(catalogue, PrometheusClient(args.prometheus_url, args.timeout))
        else:
            report = _standalone(args, rest, overrides, peers, err)
    except Unreachable as error:
        print(f"bottleneck-exporter diagnose: cannot reach {error}", file=err)
        return EXIT_UNREACHABLE
    except (CatalogueError, ValueError) as error:
        print(f"bottleneck-exporter diagnose: error: {error}", file=err)
        return EXIT_USAGE
    out.write(render_json(report, args.severity) if args.json
              else render_text(report, args.severity, longer=None if args.prometheus_url else LONGER))
    out.flush()
    return EXIT_CRITICAL if report.critical else EXIT_OK


def _standalone(args: argparse.Namespace, rest: list[str], overrides: dict[str, object], peers: list[Peer],
                err: TextIO) -> Report:
    source: Source
    if args.exporter_url:
        source = HttpSource(args.exporter_url)
    elif not rest and _exporter_answers(DEFAULT_EXPORTER_URL):
        source = HttpSource(DEFAULT_EXPORTER_URL)
    else:
        source = _in_process(rest)
    described = ", ".join([source.describe(), *(p.describe() for p in peers)])
    err.write(f"sampling {described} for {args.window:.0f}s, every {args.interval:g}s (bundle {args.bundle})\n")
    for given in peers:
        try:
            scrape(given, PEER_TIMEOUT)
        except PeerError as error:  # said now, and in the report: the rest is still worth sampling
            err.write(f"warning: {error}; the verdicts that read it cannot be judged\n")
    sampler = Sampler(source, socket.gethostname(), exporter_job(overrides), peers)
    source.start()
    try:
        # A first scrape primes collectors whose ratios are "since the previous scrape".
        sampler.run(args.window, args.interval, _progress(err))
    finally:
        source.stop()
    return standalone.judged(sampler, args.bundle, overrides)


def _in_process(exporter_args: Sequence[str]) -> InProcessSource:
    """The collectors and the push receiver, built from the exporter's own flags, to run in this process (no
    exporter running on the node)."""
    try:
        args = exporter_parser().parse_args(list(exporter_args))
    except SystemExit:  # argparse already said which of the exporter's flags is wrong
        raise CatalogueError(f"bad exporter flags: {' '.join(exporter_args)}") from None
    return standalone.in_process(args)


if __name__ == "__main__":
    sys.exit(main())
