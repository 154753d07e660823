"""The datagram the training hook sends and the exporter's receiver accepts (schema version 1).

Both sides import it (``bottleneck_exporter.hook`` writes a datagram with ``wire.encode``,
``bottleneck_exporter.push`` reads one), so it imports nothing but the standard library. ``validate`` turns
raw bytes into a ``Snapshot`` or raises ``Rejected`` with a reason that becomes
``bottleneck_push_rejected_total{reason="..."}``::

    bottleneck_push_rejected_total{reason="bad_number"} 3.0
    bottleneck_push_rejected_total{reason="too_many_jobs"} 120.0

All counters in a datagram are cumulative since the training process started, so a lost datagram costs
freshness, never data. See docs/hook.md for the field-by-field description.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from typing import Any

VERSION = 1
MAX_DATAGRAM_BYTES = 8192
MAX_WORKER_PIDS = 256
MAX_RANK = 1 << 20
# Upper bounds (seconds) of the step-time histogram; the hook counts steps per bucket with the same list.
STEP_BUCKETS: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)
# The phases that partition a step on the host, in the order the hook numbers them (hook.timing.DATA_WAIT to
# OPTIMIZER). Time in none of them (the loop's own code between steps) is part of STEP only, never sent apart.
STEP_PHASES = ("data_wait", "forward", "backward", "optimizer")
STEP = "step"
HOST_PHASES = (*STEP_PHASES, STEP)  # the keys of phase_seconds
# Time in collectives (DDP's all-reduce, FSDP's all-gathers and reduce-scatters): overlaps forward and
# backward, so it is no part of the step's partition; sent only by a rank whose collectives the hook times.
COLLECTIVE = "collective"
GPU_PHASES = ("forward", "backward", "optimizer")  # the keys of gpu.phase_seconds, each one of STEP_PHASES
LOADER_SETTINGS = ("num_workers", "pin_memory", "batch_size", "prefetch_factor", "persistent_workers")
# The last is the device's size (torch.cuda.get_device_properties().total_memory), against which a growth runs out.
GPU_MEMORY = ("memory_allocated_bytes", "memory_reserved_bytes", "memory_peak_bytes", "memory_total_bytes")
GC_GENERATIONS = 3  # Python's collector: generations 0, 1 and 2 (gc.callbacks' info["generation"])
# The CUDA caching allocator's cumulative counts (torch.cuda.memory_stats(): num_alloc_retries, num_ooms).
GPU_ALLOCATOR = ("allocator_retries", "allocator_ooms")

# The keys of a datagram and of its objects: those every one has, then those sent only when known
# (``wire.encode`` writes them).
KEYS = ("v", "job", "rank", "local_rank", "world_size", "device", "pid", "seq", "time", "dropped", "steps",
        "samples", "phase_seconds", "step_buckets")
OPTIONAL_KEYS = ("kubernetes", "skipped_steps", "collective_dropped_timings", "startup_seconds", "long_steps",
                 "checkpoint", "gc", "compile", "gpu", "loader", "host_batches", "collective_exposed_seconds",
                 "host_to_device", "setup")
# The keys of host_batches: batches the hook checked on a CUDA rank, by where their host tensors were.
HOST_MEMORY = ("pinned", "pageable")
LONG_STEP_KEYS = ("count", "excess_seconds")
LONG_STEP_OPTIONAL_KEYS = ("median_seconds",)  # sent once the hook has seen enough steps to tell
CHECKPOINT_KEYS = ("seconds", "saves")
# The training loop's batch copies to the device, where a framework moves batches in one place (hook.transfer).
HOST_TO_DEVICE_KEYS = ("seconds", "copies")
GC_KEYS = ("seconds", "collections")  # each a list by generation
COMPILE_KEYS = ("compiles", "recompiles", "seconds")
GPU_KEYS = ("phase_seconds", "busy_seconds", "idle_seconds")
GPU_OPTIONAL_KEYS = ("dropped_timings", *GPU_MEMORY, *GPU_ALLOCATOR)
LOADER_KEYS = (*LOADER_SETTINGS, "worker_pids")
# How the rank is set up (hook.setup): counts since the hook attached, then the facts sent once known.
SETUP_KEYS = ("data_parallel_devices", "sampled_forwards", "autocast_forwards", "loader_iterators",
              "loader_worker_starts")
SETUP_OPTIONAL_KEYS = ("process_group_backend", "parameters_dtype", "compute_capability", "float32_matmul_precision")
# torch.distributed.get_backend() ("nccl", "gloo", "cpu:gloo,cuda:nccl") and a dtype's name ("bfloat16"): labels.
BACKEND_PATTERN = re.compile(r"[a-z0-9_:,]{1,64}")
DTYPE_PATTERN = re.compile(r"[a-z0-9_]{1,32}")
# torch.get_float32_matmul_precision()'s answers: "highest" (float32 matmuls in full float32), "high" (TF32 on
# Tensor Cores, Ampere and later), "medium" (bfloat16 on Tensor Cores).
FLOAT32_MATMUL_PRECISIONS = ("highest", "high", "medium")

REASONS = (
    "too_large", "not_json", "bad_version", "bad_schema", "bad_number", "bad_label", "stale",
    "too_many_jobs", "too_many_ranks", "not_owner",
)

# The Prometheus label that carries the training job's name on every series the exporter derives from it.
# Not ``job``: Prometheus owns that one (the scrape config's name); with honor_labels: false (the default, and
# what prometheus-operator's overrideHonorLabels forces) an exported ``job`` becomes ``exported_job``.
JOB_LABEL = "training_job"
# Label values end up in every series of the job: bound their length and keep them printable and quote-free.
JOB_PATTERN = re.compile(r"[A-Za-z0-9_.:@+=/-]{1,128}")
DEVICE_PATTERN = re.compile(r"[A-Za-z0-9_.:@+=/-]{1,32}")
_JOB_UNSAFE = re.compile(r"[^A-Za-z0-9_.:@+=/-]")
# Kubernetes names: a namespace and a container are DNS labels, a pod a DNS subdomain.
KUBERNETES_PATTERNS = {
    "namespace": re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"),
    "pod": re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?"),
    "container": re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"),
}


class Rejected(ValueError):
    """A datagram that is not accepted; ``reason`` is one of REASONS."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


@dataclasses.dataclass(frozen=True)
class LoaderSettings:
    num_workers: int
    pin_memory: bool
    batch_size: int | None
    prefetch_factor: int | None
    persistent_workers: bool
    worker_pids: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class GpuTotals:
    phase_seconds: dict[str, float]
    busy_seconds: float
    idle_seconds: float
    memory: dict[str, float]  # GPU_MEMORY key -> bytes; keys absent when the hook could not read them
    dropped_timings: int | None = None  # steps whose CUDA events were given up unread, when sent
    allocator: dict[str, int] = dataclasses.field(default_factory=dict)  # GPU_ALLOCATOR key -> count, when sent


@dataclasses.dataclass(frozen=True)
class LongSteps:
    """Steps far longer than the rank's median step (hook.timing.RECENT_STEPS says how far)."""

    count: int
    excess_seconds: float  # their time above the median, all together
    median_seconds: float | None  # the median of the last steps; None until the hook has seen enough


@dataclasses.dataclass(frozen=True)
class CheckpointTotals:
    seconds: float  # in checkpoint saves on the training thread (hook.checkpoint)
    saves: int


@dataclasses.dataclass(frozen=True)
class CopyTotals:
    seconds: float  # moving training batches to the device, part of the data wait (hook.transfer)
    copies: int


@dataclasses.dataclass(frozen=True)
class GcTotals:
    seconds: tuple[float, ...]  # in Python's garbage collector, by generation (GC_GENERATIONS)
    collections: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class CompileTotals:
    compiles: int  # torch.compile's compilations of a frame (hook.compiles), recompilations included
    recompiles: int  # of those, compilations of a frame compiled before (a guard failed)
    seconds: float


@dataclasses.dataclass(frozen=True)
class SetupFacts:
    """How the rank is set up, as the hook sees it (hook.setup): what the profilers' setup advice reads."""

    data_parallel_devices: int  # GPUs a torch.nn.DataParallel wrapper splits each batch over; 0 without one
    sampled_forwards: int  # training forwards the hook looked at (the first after each datagram)
    autocast_forwards: int  # of those, forwards that ran under torch.autocast
    loader_iterators: int  # DataLoader iterators started (iter(loader): one per epoch)
    loader_worker_starts: int  # of those, iterators that started new worker processes
    process_group_backend: str | None = None  # torch.distributed.get_backend(), once initialised
    parameters_dtype: str | None = None  # the model's first parameter's dtype ("float32", "bfloat16")
    compute_capability: float | None = None  # the CUDA device's (8.0 for an A100), on CUDA only
    float32_matmul_precision: str | None = None  # torch.get_float32_matmul_precision(): "high" is TF32


@dataclasses.dataclass(frozen=True)
class KubernetesIdentity:
    """The pod the rank runs in, as the hook sees it from inside ("" for what it could not tell)."""

    namespace: str
    pod: str
    container: str


@dataclasses.dataclass(frozen=True)
class Snapshot:
    job: str
    rank: int
    local_rank: int
    world_size: int
    device: str
    pid: int
    seq: int
    time: float
    dropped: int
    steps: int
    samples: float
    phase_seconds: dict[str, float]
    step_buckets: tuple[int, ...]
    loader: LoaderSettings | None
    gpu: GpuTotals | None
    kubernetes: KubernetesIdentity | None = None
    collective_seconds: float | None = None  # phase_seconds.collective, when sent
    skipped_steps: int | None = None  # steps whose optimizer step AMP's GradScaler skipped, when counted
    collective_dropped_timings: int | None = None  # NCCL collectives whose CUDA events were given up, when sent
    host_batches: dict[str, int] | None = None  # HOST_MEMORY key -> checked batches, when sent
    startup_seconds: float | None = None  # from the process's start to its first step's end, once it ended
    long_steps: LongSteps | None = None
    checkpoint: CheckpointTotals | None = None
    host_to_device: CopyTotals | None = None
    gc: GcTotals | None = None
    compile: CompileTotals | None = None  # sent once the training script has loaded torch.compile's dynamo
    # The part of collective_seconds the training thread waited, not hidden by compute (gloo DDP), when sent.
    collective_exposed_seconds: float | None = None
    setup: SetupFacts | None = None


def sanitize_job(name: str) -> str:
    """A job name the receiver will accept: unsafe characters become ``_``, cut to 128 characters."""
    cleaned = _JOB_UNSAFE.sub("_", name)[:128]
    return cleaned or "unknown"


def _reject_constant(token: str) -> float:
    # json.loads accepts NaN/Infinity by default; they are never valid here.
    raise Rejected("bad_number", f"{token} is not a finite number")


def validate(data: bytes) -> Snapshot:
    """Parse and check one datagram; raises Rejected naming the reason and the offending key."""
    if len(data) > MAX_DATAGRAM_BYTES:
        raise Rejected("too_large", f"{len(data)} bytes > {MAX_DATAGRAM_BYTES}")
    try:
        obj = json.loads(data.decode("utf-8"), parse_constant=_reject_constant)
    except Rejected:
        raise
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise Rejected("not_json", str(err)[:80]) from None
    if not isinstance(obj, dict):
        raise Rejected("not_json", "top level is not an object")
    version = obj.get("v")
    if type(version) is not int or version != VERSION:
        raise Rejected("bad_version", f"v={version!r}, expected {VERSION}")
    _keys(obj, required=set(KEYS), optional=set(OPTIONAL_KEYS), where="")
    phases = _mapping(obj, "phase_seconds", HOST_PHASES, optional=(COLLECTIVE,))
    buckets = obj["step_buckets"]
    if not isinstance(buckets, list) or len(buckets) != len(STEP_BUCKETS) + 1:
        raise Rejected("bad_schema", f"step_buckets: expected a list of {len(STEP_BUCKETS) + 1} counts")
    snapshot = Snapshot(
        job=_label(obj, "job", JOB_PATTERN),
        rank=_int(obj, "rank", 0, MAX_RANK - 1),
        local_rank=_int(obj, "local_rank", 0, MAX_RANK - 1),
        world_size=_int(obj, "world_size", 1, MAX_RANK),
        device=_label(obj, "device", DEVICE_PATTERN),
        pid=_int(obj, "pid", 1, 1 << 31),
        seq=_int(obj, "seq", 0, 1 << 62),
        time=_number(obj, "time"),
        dropped=_int(obj, "dropped", 0, 1 << 62),
        steps=_int(obj, "steps", 0, 1 << 62),
        samples=_number(obj, "samples"),
        phase_seconds={name: _number(phases, name, "phase_seconds.") for name in HOST_PHASES},
        step_buckets=tuple(_int({"b": b}, "b", 0, 1 << 62, "step_buckets[]") for b in buckets),
        loader=_loader(obj["loader"]) if obj.get("loader") is not None else None,
        gpu=_gpu(obj["gpu"]) if obj.get("gpu") is not None else None,
        kubernetes=_kubernetes(obj["kubernetes"]) if obj.get("kubernetes") is not None else None,
        collective_seconds=_number(phases, COLLECTIVE, "phase_seconds.") if COLLECTIVE in phases else None,
        skipped_steps=_int(obj, "skipped_steps", 0, 1 << 62) if "skipped_steps" in obj else None,
        collective_dropped_timings=_int(obj, "collective_dropped_timings", 0, 1 << 62)
        if "collective_dropped_timings" in obj else None,
        host_batches=_host_batches(obj) if "host_batches" in obj else None,
        startup_seconds=_number(obj, "startup_seconds") if "startup_seconds" in obj else None,
        long_steps=_long_steps(obj["long_steps"]) if "long_steps" in obj else None,
        checkpoint=_checkpoint(obj["checkpoint"]) if "checkpoint" in obj else None,
        host_to_device=_host_to_device(obj["host_to_device"]) if "host_to_device" in obj else None,
        gc=_gc(obj["gc"]) if "gc" in obj else None,
        compile=_compile(obj["compile"]) if "compile" in obj else None,
        collective_exposed_seconds=_number(obj, "collective_exposed_seconds")
        if "collective_exposed_seconds" in obj else None,
        setup=_setup(obj["setup"]) if "setup" in obj else None,
    )
    if sum(snapshot.step_buckets) != snapshot.steps:
        raise Rejected("bad_number", "step_buckets do not add up to steps")
    if snapshot.skipped_steps is not None and snapshot.skipped_steps > snapshot.steps:
        raise Rejected("bad_number", "skipped_steps: more than steps")
    if snapshot.compile is not None and snapshot.compile.recompiles > snapshot.compile.compiles:
        raise Rejected("bad_number", "compile.recompiles: more than compiles")
    if snapshot.long_steps is not None and snapshot.long_steps.count > snapshot.steps:
        raise Rejected("bad_number", "long_steps.count: more than steps")
    if snapshot.setup is not None:
        if snapshot.setup.autocast_forwards > snapshot.setup.sampled_forwards:
            raise Rejected("bad_number", "setup.autocast_forwards: more than sampled_forwards")
        if snapshot.setup.loader_worker_starts > snapshot.setup.loader_iterators:
            raise Rejected("bad_number", "setup.loader_worker_starts: more than loader_iterators")
    return snapshot


def _keys(obj: dict[str, Any], required: set[str], optional: set[str], where: str) -> None:
    missing = required - obj.keys()
    if missing:
        raise Rejected("bad_schema", f"{where}{sorted(missing)[0]}: missing")
    unknown = obj.keys() - required - optional
    if unknown:
        raise Rejected("bad_schema", f"{where}{sorted(map(str, unknown))[0][:40]}: unknown key")


def _mapping(obj: dict[str, Any], key: str, names: tuple[str, ...], where: str = "",
             optional: tuple[str, ...] = ()) -> dict[str, Any]:
    value = obj[key]
    if not isinstance(value, dict):
        raise Rejected("bad_schema", f"{where}{key}: expected an object")
    _keys(value, required=set(names), optional=set(optional), where=f"{where}{key}.")
    return value


def _number(obj: dict[str, Any], key: str, where: str = "") -> float:
    value = obj[key]
    if type(value) not in (int, float):
        raise Rejected("bad_schema", f"{where}{key}: expected a number, got {type(value).__name__}")
    number = float(value)
    if not math.isfinite(number) or number < 0:
        raise Rejected("bad_number", f"{where}{key}: {value!r} is not a finite non-negative number")
    return number


def _int(obj: dict[str, Any], key: str, low: int, high: int, name: str | None = None) -> int:
    value = obj[key]
    name = name or key
    if type(value) is not int:
        raise Rejected("bad_schema", f"{name}: expected a whole number, got {type(value).__name__}")
    if not low <= value <= high:
        raise Rejected("bad_number", f"{name}: {value} outside {low}..{high}")
    return value


def _bool(obj: dict[str, Any], key: str, where: str) -> bool:
    value = obj[key]
    if type(value) is not bool:
        raise Rejected("bad_schema", f"{where}{key}: expected true or false")
    return value


def _label(obj: dict[str, Any], key: str, pattern: re.Pattern[str], where: str = "") -> str:
    value = obj[key]
    if not isinstance(value, str):
        raise Rejected("bad_schema", f"{where}{key}: expected a string")
    if not pattern.fullmatch(value):
        charset = pattern.pattern.split("]")[0].lstrip("[")
        raise Rejected("bad_label", f"{where}{key}: {value[:40]!r} is too long or has characters outside "
                       f"{charset}")
    return value


def _choice(obj: dict[str, Any], key: str, choices: tuple[str, ...], where: str = "") -> str:
    value = obj[key]
    if not isinstance(value, str):
        raise Rejected("bad_schema", f"{where}{key}: expected a string")
    if value not in choices:
        raise Rejected("bad_label", f"{where}{key}: {value[:40]!r} is none of {', '.join(choices)}")
    return value


def _optional_int(obj: dict[str, Any], key: str, where: str) -> int | None:
    if obj[key] is None:
        return None
    return _int(obj, key, 0, 1 << 31, f"{where}{key}")


def _loader(value: Any) -> LoaderSettings:
    if not isinstance(value, dict):
        raise Rejected("bad_schema", "loader: expected an object")
    _keys(value, required=set(LOADER_KEYS), optional=set(), where="loader.")
    pids = value["worker_pids"]
    if not isinstance(pids, list) or len(pids) > MAX_WORKER_PIDS:
        raise Rejected("bad_schema", f"loader.worker_pids: expected a list of at most {MAX_WORKER_PIDS} PIDs")
    return LoaderSettings(
        num_workers=_int(value, "num_workers", 0, 1 << 16, "loader.num_workers"),
        pin_memory=_bool(value, "pin_memory", "loader."),
        batch_size=_optional_int(value, "batch_size", "loader."),
        prefetch_factor=_optional_int(value, "prefetch_factor", "loader."),
        persistent_workers=_bool(value, "persistent_workers", "loader."),
        worker_pids=tuple(_int({"p": p}, "p", 1, 1 << 31, "loader.worker_pids[]") for p in pids),
    )


def _gpu(value: Any) -> GpuTotals:
    if not isinstance(value, dict):
        raise Rejected("bad_schema", "gpu: expected an object")
    _keys(value, required=set(GPU_KEYS), optional=set(GPU_OPTIONAL_KEYS), where="gpu.")
    phases = _mapping(value, "phase_seconds", GPU_PHASES, "gpu.")
    return GpuTotals(
        phase_seconds={name: _number(phases, name, "gpu.phase_seconds.") for name in GPU_PHASES},
        busy_seconds=_number(value, "busy_seconds", "gpu."),
        idle_seconds=_number(value, "idle_seconds", "gpu."),
        memory={key: _number(value, key, "gpu.") for key in GPU_MEMORY if key in value},
        dropped_timings=_int(value, "dropped_timings", 0, 1 << 62, "gpu.dropped_timings")
        if "dropped_timings" in value else None,
        allocator={key: _int(value, key, 0, 1 << 62, f"gpu.{key}") for key in GPU_ALLOCATOR if key in value},
    )


def _host_batches(obj: dict[str, Any]) -> dict[str, int]:
    counts = _mapping(obj, "host_batches", HOST_MEMORY)
    return {key: _int(counts, key, 0, 1 << 62, f"host_batches.{key}") for key in HOST_MEMORY}


def _object(value: Any, key: str, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise Rejected("bad_schema", f"{key}: expected an object")
    _keys(value, required=set(required), optional=set(optional), where=f"{key}.")
    return value


def _long_steps(value: Any) -> LongSteps:
    obj = _object(value, "long_steps", LONG_STEP_KEYS, LONG_STEP_OPTIONAL_KEYS)
    return LongSteps(
        count=_int(obj, "count", 0, 1 << 62, "long_steps.count"),
        excess_seconds=_number(obj, "excess_seconds", "long_steps."),
        median_seconds=_number(obj, "median_seconds", "long_steps.") if "median_seconds" in obj else None,
    )


def _checkpoint(value: Any) -> CheckpointTotals:
    obj = _object(value, "checkpoint", CHECKPOINT_KEYS)
    return CheckpointTotals(seconds=_number(obj, "seconds", "checkpoint."),
                            saves=_int(obj, "saves", 0, 1 << 62, "checkpoint.saves"))


def _host_to_device(value: Any) -> CopyTotals:
    obj = _object(value, "host_to_device", HOST_TO_DEVICE_KEYS)
    return CopyTotals(seconds=_number(obj, "seconds", "host_to_device."),
                      copies=_int(obj, "copies", 0, 1 << 62, "host_to_device.copies"))


def _gc(value: Any) -> GcTotals:
    obj = _object(value, "gc", GC_KEYS)
    for key in GC_KEYS:
        if not isinstance(obj[key], list) or len(obj[key]) != GC_GENERATIONS:
            raise Rejected("bad_schema", f"gc.{key}: expected a list of {GC_GENERATIONS} numbers, one per generation")
    return GcTotals(
        seconds=tuple(_number({"s": s}, "s", "gc.seconds[]") for s in obj["seconds"]),
        collections=tuple(_int({"c": c}, "c", 0, 1 << 62, "gc.collections[]") for c in obj["collections"]),
    )


def _compile(value: Any) -> CompileTotals:
    obj = _object(value, "compile", COMPILE_KEYS)
    return CompileTotals(compiles=_int(obj, "compiles", 0, 1 << 62, "compile.compiles"),
                         recompiles=_int(obj, "recompiles", 0, 1 << 62, "compile.recompiles"),
                         seconds=_number(obj, "seconds", "compile."))


def _setup(value: Any) -> SetupFacts:
    obj = _object(value, "setup", SETUP_KEYS, SETUP_OPTIONAL_KEYS)
    counts = {key: _int(obj, key, 0, 1 << 62, f"setup.{key}") for key in SETUP_KEYS if key != "data_parallel_devices"}
    capability = None
    if "compute_capability" in obj:
        capability = _number(obj, "compute_capability", "setup.")
        if capability > 100:
            raise Rejected("bad_number", f"setup.compute_capability: {capability} is no CUDA compute capability")
    return SetupFacts(
        data_parallel_devices=_int(obj, "data_parallel_devices", 0, 1 << 16, "setup.data_parallel_devices"),
        **counts,
        process_group_backend=_label(obj, "process_group_backend", BACKEND_PATTERN, "setup.")
        if "process_group_backend" in obj else None,
        parameters_dtype=_label(obj, "parameters_dtype", DTYPE_PATTERN, "setup.")
        if "parameters_dtype" in obj else None,
        compute_capability=capability,
        float32_matmul_precision=_choice(obj, "float32_matmul_precision", FLOAT32_MATMUL_PRECISIONS, "setup.")
        if "float32_matmul_precision" in obj else None,
    )


def _kubernetes(value: Any) -> KubernetesIdentity:
    if not isinstance(value, dict):
        raise Rejected("bad_schema", "kubernetes: expected an object")
    _keys(value, required=set(), optional=set(KUBERNETES_PATTERNS), where="kubernetes.")
    names = {}
    for key, pattern in KUBERNETES_PATTERNS.items():
        name = value.get(key, "")
        if not isinstance(name, str):
            raise Rejected("bad_schema", f"kubernetes.{key}: expected a string")
        if name and not pattern.fullmatch(name):
            raise Rejected("bad_label", f"kubernetes.{key}: {name[:40]!r} is not a Kubernetes name")
        names[key] = name
    return KubernetesIdentity(**names)
