"""The push receiver: per-step timings that the in-process hook (``exporter.hook``) sends to this exporter.

Modules: ``schema`` (the datagram, shared with the hook), ``paths`` (where the socket lives, shared with the
hook), ``settings`` (``--push.*`` flags, ``push:`` config), ``receiver`` (socket thread, collector),
``store`` (bounded job/rank table), ``exposition`` (metric families). This package's ``__init__`` imports
nothing heavy: the hook imports ``schema`` and ``paths`` inside training processes, and must not pull in the
daemon's collectors, YAML or prometheus_client.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from exporter.push.receiver import PushReceiver
    from exporter.training.registry import TrainingRegistry


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--push.*`` flags (see ``exporter.push.settings``)."""
    from exporter.push.settings import add_arguments as add

    add(parser)


def build_receiver(args: argparse.Namespace, file_config: dict[str, Any],
                   training: TrainingRegistry) -> PushReceiver | None:
    """A bound, not yet started receiver; None with --push.disable or when no socket could be bound."""
    from exporter.push.settings import build_receiver as build

    return build(args, file_config, training)
