"""How a datagram is written: the hook's formatting of its totals, and ``encode`` for a datagram held as a dict.

The hook formats its datagram from parts, not from a dict through ``json``: it runs at a step end, between
training steps whose work has pushed its code and data out of the caches, and what it costs then goes with how
much code and data it touches (``benchmarks/hook_overhead.py --parts`` times each part). The parts that seldom
change (``identity``, ``loader``) go through ``json`` once and are kept by the hook; ``totals`` and ``gpu`` are
formatted at every datagram; ``datagram`` joins them. Each writes the keys of ``wire.schema`` in its order::

    {"v":1,"job":"resnet","rank":0,...,"pid":4242,"seq":17,...,"phase_seconds":{"data_wait":10.2,...}}

Counts are formatted with ``%d``; the cumulative seconds and samples with ``%.12g`` (SECONDS), not with the
shortest repr ``json`` writes: finding the shortest digits that read back the same float is the dearest part of
formatting a number, and twelve significant digits keep a microsecond of a total of up to eleven days. Rounding
never makes a total smaller than the one sent before it. The Unix time of the last step is written to the
microsecond (``%.6f``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from bottleneck_exporter.wire.schema import GPU_PHASES, STEP_PHASES, VERSION

# One encoder for every use: json.dumps with options builds a new one per call.
_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)
# How a float total is written (see the module's docstring).
SECONDS = "%.12g"
_PHASES = "".join(f'"{name}":{SECONDS},' for name in STEP_PHASES)
_TOTALS = (f',"seq":%d,"time":%.6f,"dropped":%d,"steps":%d,"samples":{SECONDS},'
           f'"phase_seconds":{{%s"step":{SECONDS}%s}},"step_buckets":[%s]')
# (index in STEP_PHASES, name) of each GPU phase: the hook keeps its GPU totals by host phase index.
_GPU_INDEXED = tuple((STEP_PHASES.index(name), name) for name in GPU_PHASES)


def encode(payload: dict[str, Any]) -> bytes:
    """A whole datagram from a dict (tests, benchmarks); the hook formats its own from parts (below)."""
    return _ENCODER.encode(payload).encode()


def identity(job: str, rank: int, local_rank: int, world_size: int, device: str, pid: int,
             kubernetes: Mapping[str, str] | None) -> str:
    """``{"v":1,"job":..,...,"pid":..`` and the ``kubernetes`` object when known: the datagram's opening, left
    open for the totals that follow."""
    static: dict[str, Any] = {
        "v": VERSION, "job": job, "rank": rank, "local_rank": local_rank, "world_size": world_size,
        "device": device, "pid": pid,
    }
    if kubernetes:
        static["kubernetes"] = kubernetes
    return _ENCODER.encode(static)[:-1]


def totals(seq: int, time: float, dropped: int, steps: int, samples: float, phase_seconds: Sequence[float],
           step_seconds: float, collective_seconds: float | None, step_buckets: Sequence[int],
           skipped_steps: int | None, collective_dropped_timings: int | None,
           collective_exposed_seconds: float | None = None) -> str:
    """``,"seq":..`` to ``"step_buckets":[..]``, then ``skipped_steps``, ``collective_dropped_timings`` and
    ``collective_exposed_seconds`` when given. ``phase_seconds`` by STEP_PHASES index (what follows those is
    left out)."""
    phases = _PHASES % tuple(phase_seconds[:len(STEP_PHASES)])
    collective = f',"collective":{SECONDS}' % collective_seconds if collective_seconds is not None else ""
    text = _TOTALS % (seq, time, dropped, steps, samples, phases, step_seconds, collective,
                      ",".join(map(str, step_buckets)))
    if skipped_steps is not None:
        text += f',"skipped_steps":{skipped_steps}'
    if collective_dropped_timings is not None:
        text += f',"collective_dropped_timings":{collective_dropped_timings}'
    if collective_exposed_seconds is not None:
        text += f',"collective_exposed_seconds":{SECONDS}' % collective_exposed_seconds
    return text


def trainer(startup_seconds: float | None, long_steps: int, long_step_excess_seconds: float,
            median_step_seconds: float | None, checkpoint_seconds: float, checkpoint_saves: int,
            gc_seconds: Sequence[float], gc_collections: Sequence[int]) -> str:
    """``,"startup_seconds":..`` (once known), ``"long_steps"``, ``"checkpoint"`` and ``"gc"``: what the
    training thread loses besides its phases."""
    startup = f',"startup_seconds":{SECONDS}' % startup_seconds if startup_seconds is not None else ""
    median = f',"median_seconds":{SECONDS}' % median_step_seconds if median_step_seconds is not None else ""
    return (f'{startup},"long_steps":{{"count":{long_steps},"excess_seconds":{SECONDS % long_step_excess_seconds}'
            f'{median}}},"checkpoint":{{"seconds":{SECONDS % checkpoint_seconds},"saves":{checkpoint_saves}}},'
            f'"gc":{{"seconds":[{",".join([SECONDS] * len(gc_seconds)) % tuple(gc_seconds)}],'
            f'"collections":[{",".join(map(str, gc_collections))}]}}')


def compiles(compiles: int, recompiles: int, seconds: float) -> str:
    """``,"compile":{..}``: torch.compile's compilations so far, once the script has loaded dynamo."""
    return f',"compile":{{"compiles":{compiles},"recompiles":{recompiles},"seconds":{seconds}}}'


def gpu(phase_seconds: Sequence[float], busy_seconds: float, idle_seconds: float, dropped_timings: int,
        memory: Mapping[str, float]) -> str:
    """``,"gpu":{..}``; ``phase_seconds`` by STEP_PHASES index, as the host's; ``memory`` by GPU_MEMORY and
    GPU_ALLOCATOR key, those the hook could read."""
    phases = ",".join(f'"{name}":{phase_seconds[index]}' for index, name in _GPU_INDEXED)
    extra = "".join(f',"{key}":{value}' for key, value in memory.items())
    return (f',"gpu":{{"phase_seconds":{{{phases}}},"busy_seconds":{busy_seconds},"idle_seconds":{idle_seconds},'
            f'"dropped_timings":{dropped_timings}{extra}}}')


def host_to_device(seconds: float, copies: int) -> str:
    """``,"host_to_device":{..}``: the training loop's batch copies to the device, where the hook times them."""
    return f',"host_to_device":{{"seconds":{seconds},"copies":{copies}}}'


def host_batches(pinned: int, pageable: int) -> str:
    """``,"host_batches":{..}``: the batches the hook checked, by where their host tensors were."""
    return f',"host_batches":{{"pinned":{pinned},"pageable":{pageable}}}'


def setup(data_parallel_devices: int, sampled_forwards: int, autocast_forwards: int, loader_iterators: int,
          loader_worker_starts: int, process_group_backend: str | None, parameters_dtype: str | None,
          compute_capability: float | None, float32_matmul_precision: str | None) -> str:
    """``,"setup":{..}``: how the rank is set up (``hook.setup``), the facts not yet known left out."""
    facts: dict[str, Any] = {
        "data_parallel_devices": data_parallel_devices, "sampled_forwards": sampled_forwards,
        "autocast_forwards": autocast_forwards, "loader_iterators": loader_iterators,
        "loader_worker_starts": loader_worker_starts,
    }
    known = {"process_group_backend": process_group_backend, "parameters_dtype": parameters_dtype,
             "compute_capability": compute_capability, "float32_matmul_precision": float32_matmul_precision}
    facts.update((key, value) for key, value in known.items() if value is not None)
    return ',"setup":' + _ENCODER.encode(facts)


def loader(settings: Mapping[str, Any], worker_pids: Sequence[int]) -> str:
    """``,"loader":{..}``: the DataLoader's LOADER_SETTINGS and its workers' PIDs."""
    return ',"loader":' + _ENCODER.encode({**settings, "worker_pids": list(worker_pids)})


def datagram(identity: str, numbers: str, loader: str) -> bytes:
    """The datagram from its parts (``loader`` may be ""); raises ValueError when a number in ``numbers`` (the
    ``totals`` and ``gpu`` parts) is not finite, which the receiver would refuse."""
    if "inf" in numbers or "nan" in numbers:  # no key there holds either: a number is not finite
        raise ValueError(f"a datagram total is not a finite number: {numbers}")
    return f"{identity}{numbers}{loader}}}".encode()
