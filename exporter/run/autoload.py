"""What ``bottleneck-exporter run`` puts first on the command's ``PYTHONPATH``: a directory holding a
``sitecustomize.py`` that starts the automatic instrumentation (``bottleneck_exporter.hook.auto``) in every Python
interpreter of the command (torchrun's ranks, multiprocessing children, anything they start: they inherit the
environment), then runs the ``sitecustomize`` it hides, so that the user's own still runs.

The directory also holds ``bottleneck_exporter``, a link to this very package: the command's interpreter may be
another environment's, and the hook it loads must write the datagrams this receiver reads.

    PYTHONPATH=/tmp/bottleneck-run-k2j4/site:$PYTHONPATH
    BOTTLENECK_PUSH_ADDRESS=unix:///tmp/bottleneck-run-k2j4/push.sock
    BOTTLENECK_JOB=train
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import bottleneck_exporter

# Runs at the start of every interpreter of the command: the standard library only, nothing that can raise
# (an interpreter whose Python is too old for the hook runs without it), then the user's own sitecustomize,
# whose errors Python's site module reports as it always would.
SITECUSTOMIZE = '''\
"""Written by bottleneck-exporter run: starts its automatic instrumentation (bottleneck_exporter.hook.auto) here,
then runs the sitecustomize this one hides, if any. Removed when the run ends."""


def _start_instrumentation():
    try:
        from bottleneck_exporter.hook import auto
        auto.start()
    except Exception:
        pass


def _run_hidden_sitecustomize():
    import importlib.machinery
    import importlib.util
    import os
    import sys

    here = os.path.realpath(os.path.dirname(__file__))
    rest = [p for p in sys.path if os.path.realpath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_start_instrumentation()
_run_hidden_sitecustomize()
'''


def prepare(directory: str) -> str:
    """Write the directory (created, mode 0700) and return it."""
    os.makedirs(directory, mode=0o700, exist_ok=True)
    with open(os.path.join(directory, "sitecustomize.py"), "w", encoding="utf-8") as file:
        file.write(SITECUSTOMIZE)
    package = os.path.dirname(os.path.realpath(bottleneck_exporter.__file__))
    os.symlink(package, os.path.join(directory, "bottleneck_exporter"), target_is_directory=True)
    return directory


def child_environment(env: Mapping[str, str], directory: str, address: str, job: str) -> dict[str, str]:
    """``env`` with the directory first on ``PYTHONPATH``, the hook pointed at ``address`` and named ``job``."""
    path = env.get("PYTHONPATH", "")
    return {**env, "PYTHONPATH": directory + (os.pathsep + path if path else ""),
            "BOTTLENECK_PUSH_ADDRESS": address, "BOTTLENECK_JOB": job}
