"""The gpu collector: recorded profiles replayed through the GpuBackend protocol, the real NVML backend on a
machine without a driver, and the exporter's command line serving a replayed profile."""

from __future__ import annotations

import logging
import math
import subprocess
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from bottleneck_exporter.collectors import REGISTRY, Context
from bottleneck_exporter.collectors.orchestrator import Orchestrator
from bottleneck_exporter.gpu.backend import VIOLATION_POLICIES
from bottleneck_exporter.gpu.fake import FakeBackend
from bottleneck_exporter.gpu.profile import FIELDS, ProfileError, load_profile
from bottleneck_exporter.web.exposition import text_format  # the writer /metrics answers with
from tests.conftest import FIXTURES, ROOT, require_tool

PROFILES = FIXTURES / "gpu-profiles"
PROCFS = FIXTURES / "gpu-procfs"
GOLDEN = ROOT / "tests" / "golden"
PROFILE_NAMES = sorted(p.stem for p in PROFILES.glob("*.yaml"))
# Not deterministic (timings, the Python version label), so not part of a golden scrape.
NOT_IN_GOLDEN = ("bottleneck_scrape_collector_duration_seconds", "bottleneck_build_info")

# The series each GpuBackend field feeds: an unsupported field must leave exactly these out.
FIELD_SERIES = {
    "utilization": ["bottleneck_gpu_utilization_ratio", "bottleneck_gpu_memory_utilization_ratio"],
    "utilization_samples": ["bottleneck_gpu_utilization_samples_count"],
    "memory": ["bottleneck_gpu_memory_used_bytes", "bottleneck_gpu_memory_total_bytes"],
    "temperature_celsius": ["bottleneck_gpu_temperature_celsius"],
    "slowdown_temperature_celsius": ["bottleneck_gpu_slowdown_temperature_celsius"],
    "shutdown_temperature_celsius": ["bottleneck_gpu_shutdown_temperature_celsius"],
    "power_watts": ["bottleneck_gpu_power_watts"],
    "power_limit_watts": ["bottleneck_gpu_power_limit_watts"],
    "energy_joules": ["bottleneck_gpu_energy_joules_total"],
    "clocks": ["bottleneck_gpu_clock_hertz"],
    "max_clocks": ["bottleneck_gpu_clock_max_hertz"],
    "fan_ratio": ["bottleneck_gpu_fan_ratio"],
    "clock_event_reasons": ["bottleneck_gpu_clock_event_active"],
    "violation_seconds": ["bottleneck_gpu_throttled_seconds_total"],
    "pcie_link": ["bottleneck_gpu_pcie_link_generation", "bottleneck_gpu_pcie_link_max_width"],
    "pcie_throughput": ["bottleneck_gpu_pcie_throughput_bytes_per_second"],
    "pcie_replays": ["bottleneck_gpu_pcie_replays_total"],
    "ecc_errors": ["bottleneck_gpu_ecc_errors_total"],
    "remapped_rows": ["bottleneck_gpu_remapped_rows", "bottleneck_gpu_remapped_rows_pending"],
    "processes": ["bottleneck_gpu_process_memory_used_bytes"],
    "gpm": ["bottleneck_gpu_sm_activity_ratio", "bottleneck_gpu_tensor_activity_ratio"],
    "xid_events": ["bottleneck_gpu_xid_errors_total"],
}


class Replay:
    """A gpu collector over a recorded profile, run through the Orchestrator like the exporter does."""

    def __init__(self, profile: str, **options: object) -> None:
        self.fake = FakeBackend(load_profile(str(PROFILES / f"{profile}.yaml")))
        ctx = Context(procfs=str(PROCFS), options={"max-processes": 5, **options},
                      gpu_backend_factory=lambda: self.fake)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(Orchestrator({"gpu": REGISTRY["gpu"].factory(ctx)}))

    def scrape(self) -> str:
        return text_format(self.registry).decode()


def values(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(text: str, name: str, **labels: str) -> float | None:
    return values(text).get((name, frozenset(labels.items())))


def series_of(text: str, name: str, gpu: str) -> list[float]:
    return [v for (n, labels), v in values(text).items() if n == name and ("gpu", gpu) in labels]


def golden_text(exposition: str, profile: str, scrapes: int) -> str:
    kept = [line for line in exposition.splitlines()
            if not any(line.startswith(n) or line.startswith(f"# HELP {n} ") or line.startswith(f"# TYPE {n} ")
                       for n in NOT_IN_GOLDEN)]
    header = (f"# Regenerate: .venv/bin/pytest tests/test_gpu.py -m golden --update-golden "
              f"(scrape {scrapes} of tests/fixtures/gpu-profiles/{profile}.yaml)")
    return "\n".join([header, *kept]) + "\n"


@pytest.mark.golden
@pytest.mark.parametrize("profile", PROFILE_NAMES)
def test_golden_scrape(profile: str, update_golden: bool) -> None:
    replay = Replay(profile)
    scrapes = replay.fake.profile.scrape_count
    for _ in range(scrapes):
        exposition = replay.scrape()
    text = golden_text(exposition, profile, scrapes)
    path = GOLDEN / f"gpu-{profile}.prom"
    if update_golden:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"{path} missing: run pytest tests/test_gpu.py --update-golden"
    assert text == path.read_text(), f"scrape differs from {path}; review the diff, then --update-golden"


@pytest.mark.tools
def test_golden_scrapes_pass_promtool_check_metrics() -> None:
    promtool = require_tool("promtool")
    goldens = sorted(GOLDEN.glob("gpu-*.prom"))
    assert {p.name for p in goldens} == {f"gpu-{name}.prom" for name in PROFILE_NAMES}
    for path in goldens:
        result = subprocess.run([promtool, "check", "metrics"], input=path.read_text(), capture_output=True,
                                text=True, timeout=60)
        assert (result.returncode, result.stdout + result.stderr) == (0, ""), path.name


@pytest.mark.parametrize("profile", PROFILE_NAMES)
def test_unsupported_fields_leave_their_series_out_and_nothing_is_nan(profile: str) -> None:
    replay = Replay(profile)
    for _ in range(replay.fake.profile.scrape_count):
        text = replay.scrape()
    assert all(not math.isnan(v) for v in values(text).values())
    assert value(text, "bottleneck_scrape_collector_success", collector="gpu") == 1.0
    checked = 0
    for rec in replay.fake.profile.gpus:
        for field in rec.unsupported | rec.function_not_found:
            for name in FIELD_SERIES[field]:
                assert series_of(text, name, rec.key) == [], f"{profile}: gpu {rec.key} {field} -> {name}"
                checked += 1
        if "violation_seconds" in rec.scrapes[-1] and rec.lost_from_scrape is None:
            supported = set(rec.scrapes[-1]["violation_seconds"])
            reasons = {dict(labels)["reason"] for (n, labels) in values(text)
                       if n == "bottleneck_gpu_throttled_seconds_total" and ("gpu", rec.key) in labels}
            assert reasons == supported <= set(VIOLATION_POLICIES)
    assert set(FIELD_SERIES) == set(FIELDS)
    if profile == "consumer-rtx-2080-super":
        assert checked >= 3


def test_gpu_falling_off_the_bus_reports_it_down_while_the_others_go_on() -> None:
    replay = Replay("lost-gpu-2x-h200")
    first = replay.scrape()
    assert value(first, "bottleneck_gpu_up", gpu="1", uuid="GPU-00000001-0000-0000-0000-000000000001") == 1.0
    assert series_of(first, "bottleneck_gpu_power_watts", "1") == [611.42]

    second = replay.scrape()
    assert value(second, "bottleneck_scrape_collector_success", collector="gpu") == 1.0
    assert value(second, "bottleneck_gpu_up", gpu="1", uuid="GPU-00000001-0000-0000-0000-000000000001") == 0.0
    assert value(second, "bottleneck_gpu_up", gpu="0", uuid="GPU-00000000-0000-0000-0000-000000000000") == 1.0
    lost_series = {n for (n, labels) in values(second) if ("gpu", "1") in labels}
    # Its XID 79 (fallen off the bus) still comes through: the driver reports it, not the lost GPU.
    assert lost_series == {"bottleneck_gpu_up", "bottleneck_gpu_info", "bottleneck_gpu_xid_errors_total"}
    assert series_of(second, "bottleneck_gpu_power_watts", "0") == [611.42]
    assert series_of(second, "bottleneck_gpu_energy_joules_total", "0") == [52219042.73]
    # The lost GPU is asked once per scrape (its liveness probe), not once per field.
    replay.scrape()
    assert replay.fake.calls[("1", "identity")] == 3
    assert replay.fake.calls[("1", "memory")] == 1


def test_not_supported_is_asked_once_then_cached() -> None:
    replay = Replay("consumer-rtx-2080-super")
    for _ in range(3):
        replay.scrape()
    calls = replay.fake.calls
    assert calls[("0", "memory")] == 3
    assert (calls[("0", "ecc_errors")], calls[("0", "remapped_rows")], calls[("0", "gpm")]) == (1, 1, 1)
    assert calls[("0", "violation_seconds.power")] == 3
    assert calls[("0", "violation_seconds.board_limit")] == 1


def test_missing_nvml_function_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    replay = Replay("a100-2x-sxm4-80gb")
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            text = replay.scrape()
    missing = [r for r in caplog.records if "lacks the function" in r.getMessage()]
    assert len(missing) == 1 and "gpm" in missing[0].getMessage()
    assert replay.fake.calls[("0", "gpm")] == replay.fake.calls[("1", "gpm")] == 1
    assert series_of(text, "bottleneck_gpu_memory_reserved_bytes", "0") == []  # R470: no memory_info_v2
    assert series_of(text, "bottleneck_gpu_pcie_link_width", "1") == [8.0]


def test_real_nvml_backend_on_this_machine(caplog: pytest.LogCaptureFixture) -> None:
    """The real NVML backend, whatever this machine has: without a usable driver the collector says so once
    and stays out of the way; with one, every GPU reads up and the scrape passes promtool."""
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:
        nvml_error: str | None = str(err)
    else:
        nvml_error = None
        gpu_count = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
    collector = REGISTRY["gpu"].factory(Context(options={"profile": "", "max-processes": 5}))
    from bottleneck_exporter.gpu.nvml import NvmlBackend

    assert isinstance(collector.backend, NvmlBackend)  # type: ignore[attr-defined]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Orchestrator({"gpu": collector}))
    with caplog.at_level(logging.WARNING):
        texts = [text_format(registry).decode() for _ in range(3)]
    for text in texts:
        assert value(text, "bottleneck_scrape_collector_success", collector="gpu") == 1.0
        assert all(not math.isnan(v) for v in values(text).values())
    logged = [r.getMessage() for r in caplog.records if "NVML not available" in r.getMessage()]
    if nvml_error is not None:
        assert [n for text in texts for (n, _) in values(text) if n.startswith("bottleneck_gpu_")] == []
        assert len(logged) == 1 and nvml_error in logged[0]
        return
    assert logged == []
    up = [v for (n, labels), v in values(texts[-1]).items() if n == "bottleneck_gpu_up" and "/" not in
          dict(labels)["gpu"]]
    assert up == [1.0] * gpu_count
    promtool = require_tool("promtool")
    result = subprocess.run([promtool, "check", "metrics"], input=texts[-1], capture_output=True, text=True,
                            timeout=60)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def test_xid_series_starts_at_zero_so_increase_sees_the_first_event() -> None:
    """Regression guard: a counter born at 1 hides its first event from increase(); the XID alerts need it."""
    replay = Replay("lost-gpu-2x-h200")
    gpu1 = {"gpu": "1", "uuid": "GPU-00000001-0000-0000-0000-000000000001", "xid": "79"}
    gpu0 = {"gpu": "0", "uuid": "GPU-00000000-0000-0000-0000-000000000000", "xid": "31"}
    first = replay.scrape()
    assert value(first, "bottleneck_gpu_xid_errors_total", **gpu0) == 0.0
    assert value(first, "bottleneck_gpu_xid_errors_total", **gpu1) is None
    second = replay.scrape()
    assert value(second, "bottleneck_gpu_xid_errors_total", **gpu0) == 1.0
    assert value(second, "bottleneck_gpu_xid_errors_total", **gpu1) == 0.0
    for _ in range(3):  # after the recording ends its readings repeat, its events do not
        later = replay.scrape()
        assert value(later, "bottleneck_gpu_xid_errors_total", **gpu1) == 1.0
        assert value(later, "bottleneck_gpu_xid_errors_total", **gpu0) == 1.0


def test_xid_events_are_polled_without_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    """The NVML backend asks the event set with timeout 0 and stops at the first 'nothing waiting'."""
    import pynvml

    from bottleneck_exporter.gpu import nvml

    waits: list[int] = []
    queued = [79, 48]

    def wait(event_set: object, timeout_ms: int) -> object:
        waits.append(timeout_ms)
        if not queued:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)
        return type("Data", (), {"device": handle, "eventType": pynvml.nvmlEventTypeXidCriticalError,
                                 "eventData": queued.pop(0)})()

    handle = pynvml.c_nvmlDevice_t()
    backend = nvml.NvmlBackend()
    backend._event_set = object()
    backend._event_keys = {nvml._address(handle): "0"}
    monkeypatch.setattr(pynvml, "nvmlEventSetWait_v2", wait)
    assert [(e.device, e.xid) for e in backend.xid_events()] == [("0", 79), ("0", 48)]
    assert waits == [0, 0, 0]
    assert backend.xid_events() == []


def test_nvml_errors_are_translated_at_the_choke_point() -> None:
    import pynvml

    from bottleneck_exporter.gpu.backend import BackendError, FunctionNotFound, GpuLost, NoData, NotSupported
    from bottleneck_exporter.gpu.nvml import _nvml

    def failing(error: Exception) -> object:
        def call() -> None:
            raise error
        return call

    for code, expected in ((pynvml.NVML_ERROR_NOT_SUPPORTED, NotSupported),
                           (pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, FunctionNotFound),
                           (pynvml.NVML_ERROR_GPU_IS_LOST, GpuLost),
                           (pynvml.NVML_ERROR_RESET_REQUIRED, GpuLost),
                           (pynvml.NVML_ERROR_NOT_FOUND, NoData),
                           (pynvml.NVML_ERROR_TIMEOUT, NoData),  # an XID poll with nothing waiting
                           (pynvml.NVML_ERROR_UNKNOWN, BackendError)):
        with pytest.raises(BackendError) as raised:
            _nvml(failing(pynvml.NVMLError(code)))  # type: ignore[arg-type]
        assert type(raised.value) is expected, code


def test_pynvml_version_mismatch_does_not_escape_the_choke_point() -> None:
    # Regression: pynvml's unversioned nvmlDeviceGetComputeRunningProcesses raises NVMLLibraryMismatchError,
    # not an NVMLError, on a driver without the _v3 function; it failed the whole gpu collector.
    import pynvml

    from bottleneck_exporter.gpu.backend import FunctionNotFound
    from bottleneck_exporter.gpu.nvml import _nvml

    def mismatched() -> None:
        raise pynvml.NVMLLibraryMismatchError("Unversioned function called ...")

    with pytest.raises(FunctionNotFound):
        _nvml(mismatched)


def test_an_unexpected_error_in_one_field_costs_only_that_field(caplog: pytest.LogCaptureFixture) -> None:
    replay = Replay("hopper-4x-h100")

    def broken(device: str) -> int:
        raise TypeError("a binding quirk no recorded profile has")

    replay.fake.pcie_replays = broken  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING):
        texts = [replay.scrape() for _ in range(2)]
    for text in texts:
        assert value(text, "bottleneck_scrape_collector_success", collector="gpu") == 1.0
        assert [n for (n, _) in values(text) if n == "bottleneck_gpu_pcie_replays_total"] == []
        assert series_of(text, "bottleneck_gpu_pcie_link_width", "0") != []
    logged = [r for r in caplog.records if "reading pcie_replays failed" in r.getMessage()]
    assert len(logged) == 4 and all(r.exc_info for r in logged)  # once per GPU, with the traceback


def histogram(text: str, gpu: str) -> dict[str, float]:
    return {dict(labels)["le"]: v for (n, labels), v in values(text).items()
            if n == "bottleneck_gpu_utilization_samples_bucket" and ("gpu", gpu) in labels}


def test_sawtooth_and_flat_line_have_different_histograms() -> None:
    replay = Replay("hopper-4x-h100")
    replay.scrape()
    text = replay.scrape()
    saw, busy, low = histogram(text, "0"), histogram(text, "1"), histogram(text, "2")
    # Sawtooth: many samples at the bottom AND many at the top.
    assert saw["0.05"] / saw["+Inf"] > 0.3 and (saw["+Inf"] - saw["0.8"]) / saw["+Inf"] > 0.3
    # Flat busy line: nothing at the bottom, everything at the top.
    assert busy["0.05"] == 0 and busy["0.8"] == 0
    # Flat low line: nothing at either end, all in between.
    assert low["0.05"] == 0 and low["0.3"] == low["+Inf"]
    # GPU-Util alone cannot tell them apart the same way: the sawtooth's mean sits between the flat ones.
    means = {g: series_of(text, "bottleneck_gpu_utilization_samples_sum", g)[0]
             / series_of(text, "bottleneck_gpu_utilization_samples_count", g)[0] for g in ("0", "2")}
    assert 0.3 < means["0"] < 0.6 and 0.2 < means["2"] < 0.3


def test_utilization_samples_are_counted_once_across_scrapes() -> None:
    replay = Replay("hopper-4x-h100")
    spec = replay.fake.profile.gpus[1].scrapes[0]["utilization_samples"]
    counts = []
    for _ in range(3):
        counts.append(histogram(replay.scrape(), "1")["+Inf"])
    assert counts == [spec.count, 2 * spec.count, 3 * spec.count]


def test_mig_instances_are_labelled_parent_gpu_instance_compute_instance() -> None:
    replay = Replay("mig-h200")
    replay.scrape()
    text = replay.scrape()
    up = {dict(labels)["gpu"]: v for (n, labels), v in values(text).items() if n == "bottleneck_gpu_up"}
    assert up == {"0": 1.0, "0/2/0": 1.0, "0/2/1": 1.0, "0/3/0": 1.0, "0/9/0": 1.0, "0/10/0": 1.0}
    assert series_of(text, "bottleneck_gpu_utilization_ratio", "0") == []
    assert series_of(text, "bottleneck_gpu_memory_total_bytes", "0/2/1") == [71424 * 1024**2]
    # Processes are counted on the instance that runs them, not again on the MIG-enabled parent.
    assert series_of(text, "bottleneck_gpu_process_memory_used_bytes", "0") == []
    assert sorted(series_of(text, "bottleneck_gpu_process_memory_used_bytes", "0/2/1")) == [
        (2194 + 1170) * 1024**2, 13526 * 1024**2]
    assert replay.fake.calls[("0", "processes")] == 0
    assert series_of(text, "bottleneck_gpu_sm_activity_ratio", "0/2/0") == [0.962]


def test_process_memory_is_bounded_to_the_largest_names_without_pids() -> None:
    text = Replay("lost-gpu-2x-h200", **{"max-processes": 1}).scrape()
    assert [(dict(labels)["process"], v) for (n, labels), v in values(text).items()
            if n == "bottleneck_gpu_process_memory_used_bytes" and ("gpu", "0") in labels] == [
        ("gpu_burn", 28234 * 1024**2)]
    text = Replay("lost-gpu-2x-h200").scrape()
    by_name = {dict(labels)["process"]: v for (n, labels), v in values(text).items()
               if n == "bottleneck_gpu_process_memory_used_bytes" and ("gpu", "0") in labels}
    assert by_name == {"gpu_burn": 28234 * 1024**2, "memhog": (2566 + 1542) * 1024**2}
    assert "pid=" not in text


@pytest.mark.parametrize(("change", "message"), [
    (("power_watts: 611.42 W", "power_watts: 611.42 furlongs"), "gpus[0].values.power_watts: expected a number"),
    (("power_watts: 611.42 W", "power_wats: 611.42 W"), "gpus[0].values.power_wats: unknown GPU field"),
    (("  power_watts: 611.42 W\n", ""), "field power_watts is neither recorded nor listed under unsupported"),
    (("lost_from_scrape: 2", "lost_from_scrape: soon"), "gpus[1].lost_from_scrape: expected a scrape number"),
])
def test_bad_profile_is_refused_naming_the_key(tmp_path: Path, change: tuple[str, str], message: str) -> None:
    source = (PROFILES / "lost-gpu-2x-h200.yaml").read_text()
    assert change[0] in source
    bad = tmp_path / "bad.yaml"
    bad.write_text(source.replace(change[0], change[1], 1))
    with pytest.raises(ProfileError, match=r"gpu profile .*bad\.yaml: ") as raised:
        load_profile(str(bad))
    assert message in str(raised.value)


def test_cli_serves_a_replayed_profile(start_exporter) -> None:
    profile = PROFILES / "hopper-4x-h100.yaml"
    exporter = start_exporter(["--collector.disable-defaults", "--collector.gpu",
                               f"--collector.gpu.profile={profile}"])
    text = exporter.scrape()
    up = {dict(labels)["gpu"]: v for (n, labels), v in values(text).items() if n == "bottleneck_gpu_up"}
    assert up == {"0": 1.0, "1": 1.0, "2": 1.0, "3": 1.0}
    assert value(text, "bottleneck_scrape_collector_success", collector="gpu") == 1.0
    # The real /proc has no process with the profile's PIDs (above pid_max).
    names = {dict(labels)["process"] for (n, labels) in values(text) if n.startswith("bottleneck_gpu_process")}
    assert names == {"unknown"}


def test_cli_refuses_an_unreadable_profile(start_exporter) -> None:
    exporter = start_exporter(["--collector.gpu.profile=/nonexistent/gpu.yaml"], wait=False)
    assert exporter.proc.wait(timeout=30) == 2
    assert "gpu profile /nonexistent/gpu.yaml: cannot read" in exporter.output()


def test_nvml_backend_calls_only_what_the_installed_pynvml_provides() -> None:
    # The NVML backend cannot run here (no GPU); this at least catches a misspelt NVML function or constant.
    import ast

    import pynvml

    source = ROOT / "exporter" / "gpu" / "nvml.py"
    names = {node.attr for node in ast.walk(ast.parse(source.read_text()))
             if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "pynvml"}
    assert len(names) > 40
    assert sorted(n for n in names if not hasattr(pynvml, n)) == []


def test_only_the_nvml_backend_imports_pynvml() -> None:
    importers = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "exporter").rglob("*.py")
                       if any(line.strip() in ("import pynvml", "from pynvml import *") or
                              line.strip().startswith("from pynvml import")
                              for line in p.read_text().splitlines()))
    assert importers == ["exporter/gpu/nvml.py"]


def test_long_replay_holds_only_recent_samples_like_nvmls_buffer() -> None:
    # Regression: the replay regenerated every sample since scrape 1 on each call, so a demo exporter
    # slowed down the longer it ran.
    replay = Replay("hopper-4x-h100")
    for _ in range(50):
        replay.scrape()
    count = replay.fake.profile.gpus[1].scrapes[0]["utilization_samples"].count
    assert len(replay.fake.utilization_samples("1", 0)) == 2 * count
    assert histogram(replay.scrape(), "1")["+Inf"] == 51 * count
