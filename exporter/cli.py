"""Command line of ``bottleneck-exporter``: node_exporter-style flags, the YAML config, and subcommands.

    bottleneck-exporter [flags]            run the exporter (default)
    bottleneck-exporter diagnose [flags]   print bottleneck verdicts (see ``diagnose --help``)

``--[no-]collector.<name>`` and ``--collector.<name>.<option>`` come from each collector's registration.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from exporter import __version__
from exporter.collectors import REGISTRY, Collector, Context
from exporter.config import ConfigError, collector_settings, load_yaml
from exporter.orchestrator import Orchestrator
from exporter.training_registry import TrainingRegistry
from exporter.web import DEFAULT_MAX_REQUESTS, parse_listen_address, serve, start_in_thread
from exporter.webconfig import load_web_config

log = logging.getLogger("exporter")

# Not taken by a well-known exporter (node 9100, process 9256, dcgm 9400, pushgateway 9091, ...).
DEFAULT_PORT = 9847
LOG_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING, "error": logging.ERROR}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bottleneck-exporter",
        description="Exports GPU, CPU, memory, disk, network and training-step metrics that tell why "
        "training is slow. Subcommand: 'diagnose' prints verdicts.",
    )
    add = parser.add_argument
    add("--web.listen-address", dest="listen_address", default=f":{DEFAULT_PORT}",
        help="Address to listen on for the web interface and telemetry (default: %(default)s).")
    add("--web.telemetry-path", dest="telemetry_path", default="/metrics",
        help="Path under which to expose metrics (default: %(default)s).")
    add("--web.config.file", dest="web_config_file", default=None,
        help="Exporter-toolkit web config (TLS, mTLS, basic auth).")
    add("--web.max-requests", dest="max_requests", type=_max_requests, default=DEFAULT_MAX_REQUESTS,
        help="Maximum number of scrapes served at once, more are answered 503; 0 means no limit "
        "(default: %(default)s).")
    add("--web.disable-exporter-metrics", dest="disable_exporter_metrics", action="store_true",
        help="Exclude the exporter's own process_* and python_* metrics.")
    add("--config.file", dest="config_file", default=None, help="YAML config file for collector options.")
    add("--path.procfs", dest="procfs", default="/proc", help="procfs mountpoint (default: %(default)s).")
    add("--path.sysfs", dest="sysfs", default="/sys", help="sysfs mountpoint (default: %(default)s).")
    add("--path.rootfs", dest="rootfs", default="/", help="rootfs mountpoint (default: %(default)s).")
    add("--collector.disable-defaults", dest="disable_defaults", action="store_true",
        help="Disable all collectors by default; enable them one by one with --collector.<name>.")
    add("--log.level", dest="log_level", default="info", choices=sorted(LOG_LEVELS),
        help="Only log messages with this severity or above (default: %(default)s).")
    add("--log.format", dest="log_format", default="logfmt", choices=["logfmt", "json"],
        help="Log format (default: %(default)s).")
    add("--version", action="version", version=f"bottleneck-exporter {__version__}")
    for reg in sorted(REGISTRY.values(), key=lambda r: r.name):
        state = "enabled" if reg.default_enabled else "disabled"
        add(f"--collector.{reg.name}", dest=f"collector_{reg.name}", action=argparse.BooleanOptionalAction,
            default=None, help=f"{reg.help} (default: {state})")
        for opt in reg.options:
            add(f"--collector.{reg.name}.{opt.name}", dest=f"option_{reg.name}_{opt.name}", default=None,
                metavar="VALUE", help=f"{opt.help} (default: {opt.default!r})")
    from exporter.push import add_arguments as add_push_arguments

    add_push_arguments(parser)
    return parser


def _max_requests(value: str) -> int:
    if not value.isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number (0 = no limit), got {value!r}")
    return int(value)


def configure_logging(level: str, fmt: str) -> None:
    class Formatter(logging.Formatter):
        def format(self, record: logging.LogRecord) -> str:
            fields: dict[str, Any] = {
                "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
                + f".{int(record.msecs):03d}Z",
                "level": record.levelname.lower().replace("warning", "warn"),
                "source": record.name,
                "msg": record.getMessage(),
            }
            if record.exc_info:
                fields["err"] = self.formatException(record.exc_info)
            if fmt == "json":
                return json.dumps(fields)
            return " ".join(f"{k}={json.dumps(v) if (' ' in str(v) or not v) else v}" for k, v in fields.items())

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(Formatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(LOG_LEVELS[level])


def build_collectors(
    args: argparse.Namespace, file_config: dict[str, Any], training: TrainingRegistry
) -> dict[str, Collector]:
    """Decide which collectors run and with which options: registration default < config file < flags."""
    enabled_in_file, options_in_file = collector_settings(file_config, REGISTRY, args.config_file)
    collectors: dict[str, Collector] = {}
    for name, reg in sorted(REGISTRY.items()):
        enabled = False if args.disable_defaults else reg.default_enabled
        enabled = enabled_in_file.get(name, enabled)
        flag = getattr(args, f"collector_{name}")
        if flag is not None:
            enabled = flag
        options = {opt.name: opt.default for opt in reg.options}
        options.update(options_in_file.get(name, {}))
        for opt in reg.options:
            raw = getattr(args, f"option_{name}_{opt.name}")
            if raw is not None:
                try:
                    options[opt.name] = opt.parse(raw)
                except ValueError as err:
                    raise ConfigError(f"--collector.{name}.{opt.name}: {err}") from None
        if enabled:
            ctx = Context(procfs=args.procfs, sysfs=args.sysfs, rootfs=args.rootfs, options=options,
                          training=training)
            collectors[name] = reg.factory(ctx)
    return collectors


def run_exporter(argv: Sequence[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args.log_level, args.log_format)
    training = TrainingRegistry()
    try:
        parse_listen_address(args.listen_address)
        if not args.telemetry_path.startswith("/") or args.telemetry_path in ("/", "/-/healthy", "/-/ready"):
            # Otherwise no request would ever match it, or it would hide the landing page or a probe.
            raise ConfigError(f"--web.telemetry-path: expected a path such as /metrics, got "
                              f"{args.telemetry_path!r}")
        file_config = load_yaml(args.config_file) if args.config_file else {}
        collectors = build_collectors(args, file_config, training)
        web_config = load_web_config(args.web_config_file) if args.web_config_file else None
        from exporter.push import build_receiver

        receiver = build_receiver(args, file_config, training)
    except (ConfigError, ValueError) as err:
        # Refuse to start: a half-applied config is worse than none. The message names key and problem.
        print(f"bottleneck-exporter: error: {err}", file=sys.stderr)
        return 2

    registry = CollectorRegistry(auto_describe=False)
    if not args.disable_exporter_metrics:
        for extra in (ProcessCollector, PlatformCollector, GCCollector):
            extra(registry=registry)
    registry.register(Orchestrator(collectors))
    if receiver is not None:
        registry.register(receiver)

    try:
        server = serve(args.listen_address, registry, args.telemetry_path, web_config,
                       max_requests=args.max_requests)
    except OSError as err:
        print(f"bottleneck-exporter: error: --web.listen-address={args.listen_address}: {err}", file=sys.stderr)
        return 2
    if receiver is not None:
        receiver.start()
    start_in_thread(server)
    log.info("listening on %s%s, collectors: %s", args.listen_address, args.telemetry_path,
             ", ".join(collectors) or "none")

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    log.info("shutting down")
    server.shutdown()
    if receiver is not None:
        receiver.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "diagnose":
        from exporter.diagnose import main as diagnose_main

        return diagnose_main(argv[1:])
    return run_exporter(argv)


if __name__ == "__main__":
    sys.exit(main())
