"""The daemon's parts: every registered collector and the push receiver, built from their options.

A part's flags and YAML keys come from its registration: a collector's from ``@register`` in ``exporter/collectors``
(``--[no-]collector.<name>``, ``--collector.<name>.<option>``, ``collectors.<name>``), the push receiver's from
``bottleneck_exporter.push.settings.OPTIONS`` (``--push.<option>``, ``push.<option>``). Every option takes its value by
one precedence, ``bottleneck_exporter.config.option_values``: registered default < config file < flag. The exporter
(``bottleneck_exporter.cli``) and ``diagnose`` standalone build the same parts from the same flags.

``--collector.preset`` (``bottleneck_exporter.collectors.coexistence.PRESETS``) changes defaults only: it turns
collectors off and sets collector options below the config file and the flags.

The orchestrator runs every part on each collection and reports it, the push receiver included::

    bottleneck_scrape_collector_success{collector="push"} 1.0
    bottleneck_scrape_collector_duration_seconds{collector="push"} 0.0004

so an exception in the receiver's exposition costs its own series, not the scrape. A part with ``start()`` and
``stop()`` (the receiver's socket thread) starts and stops with the daemon.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from bottleneck_exporter.collectors import REGISTRY, Collector, Context
from bottleneck_exporter.collectors.coexistence import PRESETS, Preset
from bottleneck_exporter.config import add_option_flags, collector_settings, option_values
from bottleneck_exporter.options import Option
from bottleneck_exporter.push.settings import add_arguments as add_push_arguments
from bottleneck_exporter.push.settings import build_receiver
from bottleneck_exporter.training.registry import TrainingRegistry

PUSH = "push"


@runtime_checkable
class Service(Protocol):
    """A part that runs beside the collections (a socket thread): started after the HTTP server binds."""

    def start(self) -> None: ...

    def stop(self) -> None: ...


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``paths``, ``collectors`` and ``push`` groups of flags."""
    paths = parser.add_argument_group("paths", "Where the host's files and the config file are.")
    paths.add_argument("--path.procfs", dest="procfs", default="/proc", metavar="PATH",
                       help="procfs mountpoint (default: /proc)")
    paths.add_argument("--path.sysfs", dest="sysfs", default="/sys", metavar="PATH",
                       help="sysfs mountpoint (default: /sys)")
    paths.add_argument("--path.rootfs", dest="rootfs", default="/", metavar="PATH",
                       help="rootfs mountpoint (default: /)")
    paths.add_argument("--config.file", dest="config_file", default=None, metavar="FILE",
                       help="YAML file with collector and push options (collectors: and push:); flags win over it")

    collectors = parser.add_argument_group(
        "collectors", "--[no-]collector.<name> turns a collector on or off; --collector.<name>.<option>=VALUE sets "
        "one of its\noptions (in --config.file: collectors.<name>.<option>).")
    collectors.add_argument("--collector.disable-defaults", dest="disable_defaults", action="store_true",
                            help="Turn every collector off unless named with --collector.<name>")
    collectors.add_argument("--collector.preset", dest="preset", choices=sorted(PRESETS), default=None,
                            metavar="PRESET", help="Leave to node_exporter and dcgm-exporter what they export "
                            "(docs/coexistence.md): " + "; ".join(f"{name}: {preset.help}"
                                                                   for name, preset in sorted(PRESETS.items()))
                            + ". Flags and the config file still win (default: none)")
    for reg in sorted(REGISTRY.values(), key=lambda r: r.name):
        collectors.add_argument(f"--collector.{reg.name}", dest=f"collector_{reg.name}",
                                action=argparse.BooleanOptionalAction, default=None,
                                help=f"{reg.help} (default: {'on' if reg.default_enabled else 'off'})")
        add_option_flags(collectors, reg.options, f"collector.{reg.name}", f"collector_{reg.name}")

    push = parser.add_argument_group(
        "push", "The receiver of the training hook's per-step timings (in --config.file: push.<option>).")
    add_push_arguments(push)


def build_collectors(args: argparse.Namespace, file_config: dict[str, Any], training: TrainingRegistry,
                     source: str = "") -> dict[str, Collector]:
    """The enabled collectors, each with its options; ``source`` (the config file) is named in errors."""
    enabled_in_file, sections = collector_settings(file_config, REGISTRY, source)
    at = f"{source}: " if source else ""
    preset = PRESETS[args.preset] if getattr(args, "preset", None) else Preset("", ())
    collectors: dict[str, Collector] = {}
    for name, reg in sorted(REGISTRY.items()):
        enabled = False if args.disable_defaults or name in preset.collectors_off else reg.default_enabled
        enabled = enabled_in_file.get(name, enabled)
        flag = getattr(args, f"collector_{name}")
        if flag is not None:
            enabled = flag
        options, _ = option_values(_preset_defaults(reg.options, preset.options.get(name, {})),
                                   sections.get(name, {}), f"{at}collectors.{name}", args,
                                   f"collector.{name}", f"collector_{name}")
        if enabled:
            ctx = Context(procfs=args.procfs, sysfs=args.sysfs, rootfs=args.rootfs, options=options,
                          training=training)
            collectors[name] = reg.factory(ctx)
    return collectors


def _preset_defaults(options: tuple[Option, ...], defaults: Mapping[str, object]) -> tuple[Option, ...]:
    """The options with the preset's values as their defaults: the config file and flags still win."""
    return tuple(dataclasses.replace(option, default=defaults[option.name]) if option.name in defaults else option
                 for option in options)


def build_parts(args: argparse.Namespace, file_config: dict[str, Any], training: TrainingRegistry,
                source: str = "") -> dict[str, Collector]:
    """Every enabled part by name: the collectors, and ``push`` when the receiver is on and bound a socket."""
    parts = build_collectors(args, file_config, training, source)
    receiver = build_receiver(args, file_config, training, source)
    if receiver is not None:
        parts[PUSH] = receiver
    return parts


def start(parts: Mapping[str, Collector]) -> None:
    for part in parts.values():
        if isinstance(part, Service):
            part.start()


def stop(parts: Mapping[str, Collector]) -> None:
    for part in reversed(list(parts.values())):
        if isinstance(part, Service):
            part.stop()
