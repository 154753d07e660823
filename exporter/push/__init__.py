"""The push receiver: per-step timings that the in-process PyTorch hook sends to this node's exporter.

Not built yet (issue 3): ``build_receiver`` returns None, so the exporter runs without it.
"""

from __future__ import annotations

import argparse
from typing import Any

from exporter.training_registry import TrainingRegistry


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--push.*`` flags."""


def build_receiver(args: argparse.Namespace, file_config: dict[str, Any], training: TrainingRegistry) -> Any:
    return None
