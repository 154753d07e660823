"""Real CPU-limited cgroups made on this machine (root may create them), for the tests that run a real trainer
under a CPU limit: a child of the cpu controller's root with a CFS quota, cgroup v1's cpu hierarchy where it is
mounted, else v2's. Stands in for the container a Kubernetes CPU limit (or ``docker run --cpus``) puts a
trainer in."""

from __future__ import annotations

import itertools
import os
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from tests.conftest import wait_until

CPU_V1 = Path("/sys/fs/cgroup/cpu")
CPU_V2 = Path("/sys/fs/cgroup")
PERIOD_US = 100_000
_MADE = itertools.count()  # several at once in one thread (a test may run two jobs, each in its own)


@contextmanager
def cpu_limited_cgroup(cores: float) -> Iterator[Path]:
    """A child cgroup of the cpu controller's root with a CFS quota of ``cores``. Processes still in it at the
    end go back to the root."""
    name = f"bottleneck-test-{os.getpid()}-{threading.get_ident() % 10000}-{next(_MADE)}"
    if (CPU_V1 / "cpu.cfs_quota_us").exists():
        root, path = CPU_V1, CPU_V1 / name
        path.mkdir()
        (path / "cpu.cfs_period_us").write_text(f"{PERIOD_US}\n")
        (path / "cpu.cfs_quota_us").write_text(f"{round(cores * PERIOD_US)}\n")
    else:
        assert "cpu" in (CPU_V2 / "cgroup.controllers").read_text().split(), "no cgroup cpu controller here"
        root, path = CPU_V2, CPU_V2 / name
        (CPU_V2 / "cgroup.subtree_control").write_text("+cpu\n")
        path.mkdir()
        (path / "cpu.max").write_text(f"{round(cores * PERIOD_US)} {PERIOD_US}\n")
    try:
        yield path
    finally:
        def emptied() -> bool:
            for pid in (path / "cgroup.procs").read_text().split():
                with suppress(ProcessLookupError):  # it exited meanwhile
                    (root / "cgroup.procs").write_text(pid)
            try:
                path.rmdir()
            except OSError:
                return False
            return True

        wait_until(emptied, 10, f"cgroup {path} removed")


def move_into(cgroup: Path, process: subprocess.Popen[Any]) -> list[int]:
    """The process and its children (a trainer's DataLoader workers, once it has them) moved into ``cgroup``;
    returns the children's PIDs. Children it forks later start in the cgroup."""
    children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
    for pid in [str(process.pid), *children]:
        (cgroup / "cgroup.procs").write_text(pid)
    return [int(pid) for pid in children]
