"""Command line of ``bottleneck-exporter bundle``: list the bundles, write one out for Prometheus, Alertmanager and
Grafana to load.

    bottleneck-exporter bundle list
    bottleneck-exporter bundle write /etc/bottleneck-exporter/bundle --bundle node-exporter

``write`` prints what it did and which flag of each tool to point where (the same lines as DIR/README.md).
Exit status: 0 written, 1 not written (DIR not writable, or it holds files a person edited: ``--force``),
2 usage error (an unknown bundle names the closest one).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from bottleneck_exporter.bundle import layout
from bottleneck_exporter.bundle.layout import LayoutError
from bottleneck_exporter.bundle.writer import WriteError, write
from bottleneck_exporter.config import Parser
from bottleneck_exporter.heuristics.sources import BUNDLES, DEFAULT_BUNDLE

PROG = "bottleneck-exporter bundle"
EXIT_OK, EXIT_NOT_WRITTEN, EXIT_USAGE = 0, 1, 2

_EPILOG = """\
examples:
  bottleneck-exporter bundle list
  bottleneck-exporter bundle write ./bottleneck-bundle
  bottleneck-exporter bundle write /etc/bottleneck-exporter/bundle --bundle node-exporter-dcgm

exit status: 0 written, 1 not written (DIR not writable, or files there edited since the last write: --force),
2 usage error."""


def build_parser() -> Parser:
    parser = Parser(prog=PROG, epilog=_EPILOG,
                    description="The Prometheus rules and their promtool tests, the Alertmanager config and "
                    "templates, the Grafana dashboards and the recorded GPU profiles this package carries.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=Parser)
    commands.add_parser("list", help="name the bundles and the exporters each reads",
                        description="Name the bundles and the exporters each reads.")
    writing = commands.add_parser(
        "write", help="write a bundle into DIR", epilog=_EPILOG,
        description="Write a bundle into DIR: prometheus/ (a prometheus.yml for this machine, rules/, "
        "rules/tests/), alertmanager/, grafana/ (dashboards/, provisioning/), gpu-profiles/, README.md. "
        "Writing again replaces only what bundle write wrote and nobody edited since (DIR/SHA256SUMS).")
    writing.add_argument("dir", type=Path, metavar="DIR", help="the folder to write into (created if absent)")
    writing.add_argument("--bundle", choices=list(BUNDLES), default=DEFAULT_BUNDLE, metavar="NAME",
                         help=f"which exporters the rules and dashboards read: {', '.join(BUNDLES)} "
                         f"(default: {DEFAULT_BUNDLE}; bottleneck-exporter bundle list)")
    writing.add_argument("--force", action="store_true",
                         help="replace or remove files of DIR that differ from the bundle even where edited")
    return parser


def list_bundles() -> str:
    width = max(map(len, BUNDLES)) + 2
    return "".join(f"{name:<{width}}{bundle.sentence}\n" for name, bundle in BUNDLES.items())


def write_bundle(directory: Path, bundle: str, force: bool) -> int:
    root = Path(os.path.abspath(directory))  # the provisioning and README name it, wherever they are read from
    try:
        files = layout.render(bundle, root)
    except (LayoutError, OSError) as err:  # a package built without its bundle, or with a file out of shape
        print(f"{PROG} write: error: this installation's bundle is incomplete ({err}): reinstall "
              "bottleneck-exporter", file=sys.stderr)
        return EXIT_NOT_WRITTEN
    try:
        outcome = write(root, files, force)
    except WriteError as err:
        print(f"{PROG} write: error: {err}", file=sys.stderr)
        return EXIT_NOT_WRITTEN
    print(f"bundle {bundle} in {root}: {outcome.summary()}")
    print(layout.format_pointers(layout.pointers(bundle, root)), end="")
    return EXIT_OK


def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    try:
        if args.command == "list":
            print(list_bundles(), end="")
            return EXIT_OK
        return write_bundle(args.dir, args.bundle, args.force)
    except BrokenPipeError:
        # `bundle list | head -1`: the reader left, which is no error; the interpreter's flush at exit would
        # raise again on the closed pipe, hence the descriptor pointed at /dev/null (as Python's docs advise).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
