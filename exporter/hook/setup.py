"""How a rank is set up: the facts behind the setup advice the PyTorch profiler's TensorBoard plugin gave.

Read where they are cheap, never once per step: the model's wrapper (``torch.nn.DataParallel`` and its
``device_ids``), the process group's backend, the CUDA device's compute capability and the parameters' dtype
at the first training forward (the backend again at each ``iter(loader)``, as a process group may come
later); whether a training forward runs under ``torch.autocast``, on the first training forward after each
datagram (about one a second, or every step of a slower loop, so a job's window always holds samples); the
DataLoader iterators started and those that started worker processes, at each ``iter(loader)``. They travel
in the datagram's ``setup`` object and the exporter exposes::

    bottleneck_train_data_parallel_devices{training_job="bert",rank="0"} 4.0
    bottleneck_train_setup_info{training_job="bert",rank="0",process_group_backend="gloo",parameters_dtype="bfloat16"} 1
    bottleneck_train_autocast_forwards_total{training_job="bert",rank="0"} 0.0

Every read is guarded by its caller (``Session.failed``) or here: none raises into training.
"""

from __future__ import annotations

import collections
import sys
from collections.abc import Sequence
from typing import Any

from bottleneck_exporter.hook.collective import outermost_running
from bottleneck_exporter.wire import encode
from bottleneck_exporter.wire.schema import BACKEND_PATTERN, DTYPE_PATTERN, FLOAT32_MATMUL_PRECISIONS

# Worker sets remembered: a training loader's persistent workers and an evaluation loader's, iterated in
# turn, each keep theirs; only a set not seen before is a start.
_KNOWN_LOADERS = 8
# Modules scanned for the autocast probe (the first with parameters of its own): a bound on a giant model.
_PROBE_SCAN = 4096


def data_parallel_devices(model: Any, find_wrapper: bool = False) -> int:
    """The GPUs a ``torch.nn.DataParallel`` splits each batch of ``model`` over: len(device_ids) of ``model``
    or, with ``find_wrapper`` (called from inside its forward), of the DataParallel on the stack running it (the
    Hugging Face Trainer wraps the model it hands its callbacks so). 0 without one, and for a DataParallel on
    the CPU (device_ids is empty: it calls the module as it is)."""
    parallel = sys.modules.get("torch.nn.parallel")
    wrapper = getattr(parallel, "DataParallel", None)
    if wrapper is None:
        return 0
    if not isinstance(model, wrapper):
        model = outermost_running(model, [wrapper]) if find_wrapper else None
        if model is None:
            return 0
    return len(getattr(model, "device_ids", None) or ())


def ddp_process_group(model: Any, find_wrapper: bool = False) -> Any:
    """The process group a ``DistributedDataParallel`` all-reduces ``model``'s gradients over (its
    ``process_group=``, which need not be the default group), or with ``find_wrapper`` that of the DDP on the
    stack running it; None without one."""
    parallel = sys.modules.get("torch.nn.parallel")
    wrapper = getattr(parallel, "DistributedDataParallel", None)
    if wrapper is None:
        return None
    if not isinstance(model, wrapper):
        model = outermost_running(model, [wrapper]) if find_wrapper else None
    return getattr(model, "process_group", None)


def process_group_backend(group: Any = None) -> str | None:
    """torch.distributed.get_backend() of ``group`` (the default process group when None), None before it is
    initialised, once destroyed, and for a name the datagram cannot carry (a custom backend's: the receiver
    would refuse every datagram of the rank)."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    try:
        backend = str(dist.get_backend(group)).lower()
    except (RuntimeError, ValueError):  # a group destroyed since (dist.destroy_process_group(group))
        return None
    return backend if BACKEND_PATTERN.fullmatch(backend) else None


# torch.backends.cuda.matmul.fp32_precision (PyTorch's newer setting) in get_float32_matmul_precision()'s words.
_FP32_PRECISION = {"ieee": "highest", "tf32": "high", "bf16": "medium"}


def float32_matmul_precision(torch: Any) -> str | None:
    """torch.get_float32_matmul_precision() ("high": TF32 on Tensor Cores), a flag of the process, no device
    call. Where the newer per-backend setting was mixed with it, that call raises: the CUDA matmul setting then.
    None for an answer the datagram cannot carry."""
    try:
        precision = str(torch.get_float32_matmul_precision())
    except RuntimeError:
        precision = _FP32_PRECISION.get(str(getattr(torch.backends.cuda.matmul, "fp32_precision", "")), "")
    return precision if precision in FLOAT32_MATMUL_PRECISIONS else None


def autocast_enabled(torch: Any, device_type: str) -> bool:
    """Whether torch.autocast is on for ``device_type`` here and now (a flag of the thread, no device call)."""
    try:
        return bool(torch.is_autocast_enabled(device_type))
    except TypeError:  # torch before 2.4: no device argument
        if device_type == "cpu":
            return bool(torch.is_autocast_cpu_enabled())
        return bool(torch.is_autocast_enabled())


def first_parameter(module: Any) -> Any:
    """The first of ``module.parameters()``; None for a model-like object without them (a wrapper with a
    forward only), which is timed all the same."""
    parameters = getattr(module, "parameters", None)
    return next(iter(parameters()), None) if parameters is not None else None


def own_parameter(module: Any) -> Any:
    """The first parameter ``module`` holds itself (not a child's), None without one: a read of its parameter
    dict, where ``module.parameters()`` walks the module tree with generators (a dozen us, on the training
    thread at every sampled forward: benchmarks/hook_overhead.py --without probe)."""
    parameters = getattr(module, "_parameters", None)
    if not isinstance(parameters, dict):
        return None
    return next((parameter for parameter in parameters.values() if parameter is not None), None)


def dtype_name(parameter: Any) -> str | None:
    dtype = getattr(parameter, "dtype", None)
    name = str(dtype).removeprefix("torch.") if dtype is not None else None
    return name if name is not None and DTYPE_PATTERN.fullmatch(name) else None


def probe_module(model: Any) -> Any:
    """The first module inside ``model`` with parameters of its own (a first Linear, Conv or Embedding): where
    a sampled forward looks once more, for an autocast the model's own forward enters (Accelerate's
    ``prepare`` with mixed precision wraps the forward so). Not with torch.compile (see ``sample``)."""
    modules = getattr(model, "modules", None)  # a module-like object that is no torch.nn.Module has none
    if modules is None:
        return None
    found = None
    for index, module in enumerate(modules()):
        if index >= _PROBE_SCAN:
            break
        # A hook on a module of a torch.compile'd model fails dynamo's guards on its hooks: each look would
        # recompile it (seconds of inductor). A compiled model, or one with compiled regions, gets no probe.
        if compiled(module):
            return None
        if found is None and module is not model and next(iter(module.parameters(recurse=False)), None) is not None:
            found = module
    return found


def compiled(module: Any) -> bool:
    """torch.compile(module)'s wrapper, or a module compiled in place (module.compile())."""
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    wrapper = getattr(eval_frame, "OptimizedModule", None)
    return (wrapper is not None and isinstance(module, wrapper)) or \
        getattr(module, "_compiled_call_impl", None) is not None


class SetupFacts:
    def __init__(self) -> None:
        self.data_parallel_devices = 0
        self.process_group_backend: str | None = None
        self._ddp_group: Any = None  # DDP's process group, where the model is DDP: the one its gradients use
        self.parameters_dtype: str | None = None
        self.compute_capability: float | None = None
        self.float32_matmul_precision: str | None = None
        self.sampled_forwards = 0
        self.autocast_forwards = 0
        self.loader_iterators = 0
        self.loader_worker_starts = 0
        self._worker_pids: collections.deque[tuple[int, ...]] = collections.deque(maxlen=_KNOWN_LOADERS)
        self._probe: Any = None
        self._probe_device = ""  # the device type the probe looks for autocast on; "" once it has looked
        self._dtype: Any = None  # the last dtype named, and its name: the name is read again on a new dtype only
        self._dtype_name: str | None = None
        self._key: tuple[Any, ...] = ()
        self._json = ""

    # -- at the first training forward ------------------------------------------------------------------
    def inspect(self, model: Any, find_wrapper: bool = False) -> None:
        """The model's setup; ``find_wrapper``: called from inside its forward, where a DataParallel the hook
        was not handed is on the stack."""
        self.data_parallel_devices = data_parallel_devices(model, find_wrapper)
        self._ddp_group = ddp_process_group(model, find_wrapper)
        self.process_group_backend = process_group_backend(self._ddp_group)
        parameter = first_parameter(model)
        self.parameters_dtype = dtype_name(parameter)
        device = getattr(parameter, "device", None)
        if device is not None and device.type == "cuda":
            import torch

            index = device.index if device.index is not None else torch.cuda.current_device()
            major, minor = torch.cuda.get_device_capability(index)  # the driver's attributes, no kernel
            self.compute_capability = major + minor / 10
        self._probe = probe_module(model)
        self.float32_matmul_precision = float32_matmul_precision(sys.modules["torch"])

    # -- at each iter(loader) -----------------------------------------------------------------------------
    def started_iterator(self, worker_pids: Sequence[int]) -> None:
        """An iterator started; ``worker_pids`` its workers' (none with num_workers=0). New PIDs mean new
        worker processes: forked again for this pass (persistent_workers=False, or a loader built anew)."""
        self.loader_iterators += 1
        pids = tuple(sorted(worker_pids))
        if pids and pids not in self._worker_pids:
            self.loader_worker_starts += 1
            self._worker_pids.append(pids)
        self.process_group_backend = process_group_backend(self._ddp_group) or self.process_group_backend
        torch = sys.modules.get("torch")
        if torch is not None:  # set between epochs too (torch.set_float32_matmul_precision)
            self.float32_matmul_precision = float32_matmul_precision(torch) or self.float32_matmul_precision

    # -- on a sampled training forward -------------------------------------------------------------------
    def sample(self, model: Any, look_inside: bool = True) -> Any:
        """Look at one training forward, just before it runs: under autocast, or not (then, where there is a
        probe module, a one-call pre-hook on it looks again from inside the forward). Returns that hook's
        handle, for the caller to remove once the forward returned; None when there is none. Not
        ``look_inside``: a forward that dynamo compiles, whose guards on the probe's hooks would recompile it."""
        torch = sys.modules["torch"]  # loaded: the model is torch's
        # model.parameters()'s first: the model's own, else those of the first module with parameters of its own,
        # the probe's (found when the model was inspected; both read from their parameter dicts, which a
        # conversion such as .half() or FSDP's sharding updates).
        probe = self._probe
        parameter = own_parameter(model) if probe is not None else None
        if parameter is None:
            parameter = own_parameter(probe) if probe is not None else first_parameter(model)
        self.parameters_dtype = self._name_of(parameter) or self.parameters_dtype
        device = getattr(getattr(parameter, "device", None), "type", None) or "cpu"
        self.sampled_forwards += 1
        if autocast_enabled(torch, device):
            self.autocast_forwards += 1
            return None
        if self._probe is None or not look_inside:
            return None
        self._probe_device = device
        return self._probe.register_forward_pre_hook(self._look_inside)

    def _look_inside(self, module: Any, args: Any) -> None:
        device, self._probe_device = self._probe_device, ""
        if not device:  # called again within the same forward (a shared layer): it has looked
            return
        try:
            # The dtype the forward computes in: FSDP's mixed precision (param_dtype=bfloat16) keeps float32
            # shards, which model.parameters() shows outside the forward, and casts them for it.
            self.parameters_dtype = self._name_of(own_parameter(module)) or self.parameters_dtype
            # The count at most the samples: DataParallel's replicas may run this hook in several threads.
            if autocast_enabled(sys.modules["torch"], device) and self.autocast_forwards < self.sampled_forwards:
                self.autocast_forwards += 1
        except Exception:  # a torch hook must never raise into the forward it runs in
            pass

    def _name_of(self, parameter: Any) -> str | None:
        """``dtype_name(parameter)``, read again only for a dtype other than the last one's."""
        dtype = getattr(parameter, "dtype", None)
        if dtype is None or dtype is not self._dtype:
            self._dtype, self._dtype_name = dtype, dtype_name(parameter)
        return self._dtype_name

    # -- the datagram -----------------------------------------------------------------------------------
    def encoded(self) -> str:
        """``,"setup":{..}``, formatted again only when a fact or count changed."""
        key = (self.data_parallel_devices, self.sampled_forwards, self.autocast_forwards, self.loader_iterators,
               self.loader_worker_starts, self.process_group_backend, self.parameters_dtype, self.compute_capability,
               self.float32_matmul_precision)
        if key != self._key:
            self._json = encode.setup(*key)
            self._key = key
        return self._json
