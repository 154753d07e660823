"""The datagrams the hook sends, as the tests build and read them: one built by a real session, one with every
optional part, what a socket received, what the exporter exports for one, and a wait for real trainers' steps."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Callable, Collection, Iterable
from pathlib import Path
from typing import Any

from bottleneck_exporter.hook.session import Session
from bottleneck_exporter.hook.timing import BACKWARD, DATA_WAIT, FORWARD, OPTIMIZER
from bottleneck_exporter.wire.schema import Snapshot, validate
from tests.conftest import wait_until


def received(sock: socket.socket) -> list[Snapshot]:
    """Every datagram waiting on the non-blocking receiving socket ``sock``, validated."""
    out = []
    while True:
        try:
            out.append(validate(sock.recv(65536)))
        except BlockingIOError:
            return out


def stepped(socket_path: Path, processes: Iterable[subprocess.Popen[str]], ranks: Collection[tuple[str, int]],
            steps: int, timeout: float, check: Callable[[Snapshot], None] | None = None,
            ) -> dict[tuple[str, int], Snapshot]:
    """Listen on ``socket_path`` (bound here, removed after, for an exporter or diagnose to bind next) until
    every (job, rank) of ``ranks`` reported ``steps`` steps: their start-up, slow on a loaded machine, is then
    behind them. ``check`` sees every datagram on the way. The last datagram of each rank."""
    processes = list(processes)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(socket_path))
    sock.settimeout(1.0)
    last: dict[tuple[str, int], Snapshot] = {}

    def every_rank_stepped() -> bool:
        assert all(p.poll() is None for p in processes), "a trainer exited during start-up"
        snapshot = validate(sock.recv(65536))
        if check is not None:
            check(snapshot)
        last[snapshot.job, snapshot.rank] = snapshot
        return all(key in last and last[key].steps >= steps for key in ranks)

    try:
        wait_until(every_rank_stepped, timeout, f"every rank to report {steps} steps", interval=0,
                   ignoring=(TimeoutError,))
    except AssertionError as err:
        raise AssertionError(f"{err}; the ranks' steps: {({k: s.steps for k, s in last.items()})}") from None
    finally:
        sock.close()
        socket_path.unlink()
    return last


def exported(sent: Snapshot, name: str, **labels: str) -> float | None:
    """The value of series ``name`` (with ``labels`` beside the rank's) that the exporter's push receiver
    exports for the datagram ``sent``."""
    from prometheus_client import CollectorRegistry

    from bottleneck_exporter.push.receiver import PushReceiver
    from bottleneck_exporter.push.store import JobStore

    receiver = PushReceiver(JobStore(max_jobs=4, max_ranks=4, expiry=600))
    receiver.store.accept(sent)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(receiver)
    return registry.get_sample_value(name, {"training_job": sent.job, "rank": str(sent.rank), **labels})


def hook_payload(job: str = "job-a", steps: int = 3, loader: bool = True) -> dict[str, Any]:
    """A datagram exactly as the hook builds it, after ``steps`` steps through every phase."""
    session = Session(job=job, address="off", samples=1)
    for _ in range(steps):
        for phase in (DATA_WAIT, FORWARD, BACKWARD, OPTIMIZER):
            session.mark(phase)
        session.add_batch(None)
        session.end_step()
    if loader:
        session.loader = {"num_workers": 2, "pin_memory": True, "batch_size": 8, "prefetch_factor": 2,
                          "persistent_workers": False, "worker_pids": []}
        session.worker_pids = [os.getpid()]
    payload = session.payload()
    session.close()
    return payload


def full_payload(job: str, rank: int) -> dict[str, Any]:
    """A datagram with every optional part (GPU and its allocator, DataLoader, host batches, the collectives'
    exposed wait, torch.compile, the setup): the most series one rank can add."""
    payload = hook_payload(job=job)
    payload["rank"] = rank
    payload["gpu"] = {"phase_seconds": {"forward": 0.1, "backward": 0.2, "optimizer": 0.05}, "busy_seconds": 0.35,
                      "idle_seconds": 0.5, "memory_allocated_bytes": 1e9, "memory_reserved_bytes": 2e9,
                      "memory_peak_bytes": 1.5e9, "memory_total_bytes": 80e9}
    payload["host_batches"] = {"pinned": 0, "pageable": 12}
    payload["host_to_device"] = {"seconds": 0.6, "copies": 12}  # the Lightning callback's
    payload["gpu"].update(allocator_retries=3, allocator_ooms=0)  # torch.cuda.memory_stats()
    payload["phase_seconds"]["collective"] = 0.2
    payload["collective_exposed_seconds"] = 0.1  # a gloo DDP rank's
    payload["compile"] = {"compiles": 3, "recompiles": 2, "seconds": 4.5}  # sent once dynamo is loaded
    payload["setup"] = {"data_parallel_devices": 2, "sampled_forwards": 40, "autocast_forwards": 0,
                        "loader_iterators": 3, "loader_worker_starts": 3, "process_group_backend": "gloo",
                        "parameters_dtype": "float32", "compute_capability": 8.0,
                        "float32_matmul_precision": "high"}  # a CUDA rank's, all known
    return payload
