"""The push receiver: per-step timings that the in-process hook (``bottleneck_exporter.hook``) sends to this exporter.

Modules: ``settings`` (its registered options: ``--push.*`` flags, ``push:`` config), ``receiver`` (socket thread,
collector), ``store`` (bounded job/rank table), ``exposition`` (metric families); the datagram and the socket
paths it shares with the hook are ``bottleneck_exporter.wire``. The daemon runs the receiver as one of its
parts (``bottleneck_exporter.parts``): started and stopped with it, with its own
``bottleneck_scrape_collector_success{collector="push"}``. This package's ``__init__`` imports nothing heavy.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bottleneck_exporter.push.receiver import PushReceiver
    from bottleneck_exporter.training.registry import TrainingRegistry


def add_arguments(parser: argparse._ActionsContainer) -> None:
    """Add the ``--push.*`` flags from the receiver's registered options (``push.settings.OPTIONS``)."""
    from bottleneck_exporter.push.settings import add_arguments as add

    add(parser)


def build_receiver(args: argparse.Namespace, file_config: dict[str, Any], training: TrainingRegistry,
                   source: str = "") -> PushReceiver | None:
    """A bound, not yet started receiver; None with --push.disable or when no socket could be bound.
    ``source`` is the config file's path, named in errors about its ``push:`` keys."""
    from bottleneck_exporter.push.settings import build_receiver as build

    return build(args, file_config, training, source)
