"""``bottleneck-exporter diagnose`` run as a person runs it on a node beside real trainers: a child process whose
in-process push receiver binds the socket the trainers send to, samples for a window and prints its JSON report.

The live hook tests wait for the trainers' steps first (``tests.datagrams.stepped``, which lets the socket go),
then diagnose them with ``diagnosed`` and judge the report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from bottleneck_exporter import diagnose
from tests.conftest import PACKAGE, ROOT

# What diagnose may take beyond its window: its imports and first sample, minutes on a shared machine that
# runs several trainers beside it.
STARTUP_SECONDS = 200


def diagnosed(socket_path: Path, window: int, *options: str, interval: int = 1) -> dict[str, Any]:
    """The JSON report of ``diagnose`` over ``window`` seconds, a sample every ``interval``, its push receiver
    bound at ``socket_path``; none of the node's collectors unless ``options`` turn them on (they follow
    ``--collector.disable-defaults``, so ``--collector.memory`` adds one). Fails with diagnose's stderr unless
    it exits as a run that evaluated (no verdict, or a critical one)."""
    diag = subprocess.Popen(
        [sys.executable, "-m", PACKAGE, "diagnose", "--window", str(window), "--interval", str(interval), "--json",
         f"--push.socket={socket_path}", "--collector.disable-defaults", *options],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = diag.communicate(timeout=window + STARTUP_SECONDS)
    finally:
        if diag.poll() is None:
            diag.kill()
            diag.communicate()
    assert diag.returncode in (diagnose.EXIT_OK, diagnose.EXIT_CRITICAL), err
    report: dict[str, Any] = json.loads(out)
    return report
