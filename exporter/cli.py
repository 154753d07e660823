"""Command line of ``bottleneck-exporter``: node_exporter-style flags, the YAML config, and subcommands.

    bottleneck-exporter [flags]                   run the exporter (default)
    bottleneck-exporter diagnose [flags]          print bottleneck verdicts (see ``diagnose --help``)
    bottleneck-exporter run [flags] -- COMMAND    run a training command and report what holds it back
    bottleneck-exporter bundle COMMAND            list or write the rules, alerts and dashboards (``bundle --help``)

The flags of the parts (``--[no-]collector.<name>``, ``--collector.<name>.<option>``, ``--push.<option>``) come from
each part's registration (``bottleneck_exporter.parts``); this module adds the web and logging flags, runs the parts
behind the HTTP server, and hands ``diagnose`` and ``run`` their own command lines.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from bottleneck_exporter import __version__, parts
from bottleneck_exporter.collectors.orchestrator import Orchestrator
from bottleneck_exporter.config import ConfigError, Parser, load_yaml
from bottleneck_exporter.options import argument_type, format_duration, positive_duration
from bottleneck_exporter.parts import build_collectors
from bottleneck_exporter.status import Status, logs
from bottleneck_exporter.status import peers as status_peers
from bottleneck_exporter.training.registry import TrainingRegistry
from bottleneck_exporter.web.config import load_web_config
from bottleneck_exporter.web.server import DEFAULT_MAX_REQUESTS, parse_listen_address, serve, start_in_thread

log = logging.getLogger(__name__)

# Not taken by a well-known exporter (node 9100, process 9256, dcgm 9400, pushgateway 9091, ...).
DEFAULT_PORT = 9847
DEFAULT_STATUS_INTERVAL = 15.0

__all__ = ["DEFAULT_PORT", "build_collectors", "build_parser", "main", "run_exporter"]

_USAGE = """
  bottleneck-exporter [FLAGS]                         run the exporter
  bottleneck-exporter diagnose [FLAGS]                print bottleneck verdicts
  bottleneck-exporter run [FLAGS] -- COMMAND [ARGS]   run a training command, report what holds it back
  bottleneck-exporter bundle COMMAND                  list or write the rules, alerts and dashboards"""

_DESCRIPTION = """\
Exports GPU, CPU, memory, disk, network and training-step metrics that tell why training is slow,
and shows what it finds on http://HOST:9847/ (a status page with verdicts).

Subcommands: 'bottleneck-exporter diagnose --help' prints verdicts in a terminal; 'bottleneck-exporter run
--help' runs a training script unchanged and reports what holds it back."""

_EPILOG = """\
examples:
  bottleneck-exporter
  bottleneck-exporter --web.listen-address=127.0.0.1:9847 --no-collector.gpu
  bottleneck-exporter --collector.disk.device-exclude='^(loop|ram)\\d+$' --log.format=json
  bottleneck-exporter --config.file=/etc/bottleneck-exporter/config.yml"""


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="bottleneck-exporter", usage=_USAGE, description=_DESCRIPTION, epilog=_EPILOG)
    parser.add_argument("--version", action="version", version=f"bottleneck-exporter {__version__}")
    web = parser.add_argument_group("web", "The HTTP side: /metrics, the status page on /, /-/healthy, /-/ready.")
    web.add_argument("--web.listen-address", dest="listen_address", default=f":{DEFAULT_PORT}", metavar="ADDRESS",
                     help=f"[host]:port to listen on; :{DEFAULT_PORT} is every address, IPv4 and IPv6 "
                     f"(default: :{DEFAULT_PORT})")
    web.add_argument("--web.telemetry-path", dest="telemetry_path", default="/metrics", metavar="PATH",
                     help="Path under which to expose metrics (default: /metrics)")
    web.add_argument("--web.config.file", dest="web_config_file", default=None, metavar="FILE",
                     help="Exporter-toolkit web config: TLS, mutual TLS, basic auth (default: plain HTTP, no auth)")
    web.add_argument("--web.max-requests", dest="max_requests", type=_max_requests, default=DEFAULT_MAX_REQUESTS,
                     metavar="N", help="Scrapes served at once; more are answered 503, 0 means no limit "
                     f"(default: {DEFAULT_MAX_REQUESTS})")
    web.add_argument("--web.disable-exporter-metrics", dest="disable_exporter_metrics", action="store_true",
                     help="Leave out the exporter's own process_* and python_* metrics")
    web.add_argument("--web.status-interval", dest="status_interval",
                     type=argument_type(positive_duration(3600)), default=DEFAULT_STATUS_INTERVAL,
                     metavar="DURATION", help="The status page samples the exporter itself when nothing scraped it "
                     f"for this long, at most 1h (default: {format_duration(DEFAULT_STATUS_INTERVAL)})")
    parts.add_arguments(parser)
    status_peers.add_arguments(parser)
    logging_group = parser.add_argument_group("logging")
    logging_group.add_argument("--log.level", dest="log_level", default="info", choices=list(logs.LEVELS),
                               type=str.lower,  # DEBUG as well as debug, as Prometheus accepts
                               help="Only log messages with this severity or above (default: info)")
    logging_group.add_argument("--log.format", dest="log_format", default="logfmt", choices=list(logs.FORMATS),
                               help="Log line format (default: logfmt)")
    return parser


def _max_requests(value: str) -> int:
    if not value.isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number (0 = no limit), got {value!r}")
    return int(value)


def run_exporter(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(argv)
    logs.configure(args.log_level, args.log_format)
    training = TrainingRegistry()
    try:
        try:
            parse_listen_address(args.listen_address)
        except ValueError as err:
            raise ConfigError(f"--web.listen-address: {err}") from None
        if not args.telemetry_path.startswith("/") or args.telemetry_path in (
                "/", "/-/healthy", "/-/ready", "/status.json"):
            # Otherwise no request would ever match it, or it would hide the status page or a probe.
            raise ConfigError(f"--web.telemetry-path: expected a path such as /metrics, got "
                              f"{args.telemetry_path!r}")
        file_config = load_yaml(args.config_file) if args.config_file else {}
        web_config = load_web_config(args.web_config_file) if args.web_config_file else None
        bundle, peers = status_peers.settings(args, file_config, args.config_file or "")
        running = parts.build_parts(args, file_config, training, args.config_file or "")
    except (ConfigError, ValueError) as err:
        # Refuse to start: a half-applied config is worse than none. The message names the flag or file and key.
        print(f"bottleneck-exporter: error: {err}", file=sys.stderr)
        return 2

    registry = CollectorRegistry(auto_describe=False)
    if not args.disable_exporter_metrics:
        for extra in (ProcessCollector, PlatformCollector, GCCollector):
            extra(registry=registry)
    status = Status(Orchestrator(running), running, listen_address=args.listen_address,
                    telemetry_path=args.telemetry_path, interval=args.status_interval, bundle=bundle, peers=peers)
    registry.register(status.recorder)

    try:
        server = serve(args.listen_address, registry, args.telemetry_path, web_config, ready=status.ready,
                       pages=status.pages(), max_requests=args.max_requests)
    except OSError as err:
        print(f"bottleneck-exporter: error: --web.listen-address={args.listen_address}: {err}", file=sys.stderr)
        parts.stop(running)
        return 2
    parts.start(running)
    start_in_thread(server)
    status.start()
    log.info("listening", extra={"address": args.listen_address, "telemetry_path": args.telemetry_path})

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    log.info("shutting down")
    status.stop()
    server.shutdown()
    parts.stop(running)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "diagnose":
        from bottleneck_exporter.diagnose import main as diagnose_main

        return diagnose_main(argv[1:])
    if argv and argv[0] == "bundle":
        from bottleneck_exporter.bundle.command import main as bundle_main

        return bundle_main(argv[1:])
    if argv and argv[0] == "run":
        from bottleneck_exporter.run.command import main as run_main

        return run_main(argv[1:])
    return run_exporter(argv)


if __name__ == "__main__":
    sys.exit(main())
