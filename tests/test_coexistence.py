"""Beside node_exporter and dcgm-exporter (--collector.preset): no series of ours carries a fact theirs carry.

The tables of exporter/collectors/coexistence.py are held to the real peers: Debian's prometheus-node-exporter
reads the same procfs/sysfs fixture as our host collectors (every twin exists in its scrape and has our value),
and the recorded dcgm-exporter scrape (tests/fixtures/dcgm-exporter/, its default counters and label set) has
the values of the GPU profile it was recorded from, in its units. Then the preset, on a real exporter process
beside a real node_exporter, exports none of the twinned families and exactly the unique GPU ones.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from prometheus_client.parser import text_string_to_metric_families

from bottleneck_exporter import parts
from bottleneck_exporter.cli import build_parser
from bottleneck_exporter.collectors import gpu
from bottleneck_exporter.collectors.coexistence import (
    DCGM_EXPORTER,
    GPU_UNIQUE,
    HOST_COLLECTORS,
    NODE_EXPORTER,
    PRESETS,
    Twin,
)
from bottleneck_exporter.config import load_yaml
from bottleneck_exporter.training.registry import TrainingRegistry
from tests.conftest import FIXTURES, ROOT, ExporterProcess, free_port, require_tool, wait_http

PROFILE = FIXTURES / "gpu-profiles" / "hopper-4x-h100.yaml"
DCGM_SCRAPE = FIXTURES / "dcgm-exporter" / "hopper-4x-h100.prom"
DCGM_LABELS = {"gpu", "UUID", "pci_bus_id", "device", "modelName", "hostname", "DCGM_FI_DRIVER_VERSION"}


def families(text: str) -> dict[str, Any]:
    """{family name as written in docs/metrics.md (counters with their _total): family}."""
    return {name(family): family for family in text_string_to_metric_families(text)}


def name(family: Any) -> str:
    """A family's name as exposed: prometheus_client (and its parser) keep a counter's name without _total."""
    return family.name + ("_total" if family.type == "counter" else "")


def samples(family: Any, match: dict[str, str], drop: tuple[str, ...] = ()) -> dict[frozenset[tuple[str, str]], float]:
    """The family's plain samples whose labels include ``match``, keyed by their other labels."""
    out = {}
    for sample in family.samples:
        if sample.name.endswith(("_created", "_bucket", "_count", "_sum")):
            continue
        if all(sample.labels.get(k) == v for k, v in match.items()):
            key = frozenset((k, v) for k, v in sample.labels.items() if k not in match and k not in drop)
            out[key] = sample.value
    return out


def metric_names(series: str, prefix: str) -> list[str]:
    return re.findall(rf"\b{prefix}[A-Za-z0-9_]*", series)


def bare(twin: Twin) -> list[str] | None:
    """The series of a twin that is a metric or a sum of metrics (comparable sample by sample), else None."""
    terms = [term.strip() for term in twin.series.split("+")]
    return terms if all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", term) for term in terms) else None


# --------------------------------------------------------------------------- node_exporter on the same fixture


@pytest.fixture(scope="module")
def host_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/fixtures/host plus the identity files node_exporter 1.5's infiniband collector needs (without
    them it skips the device; ours does not read them)."""
    tree = tmp_path_factory.mktemp("host") / "host"
    shutil.copytree(FIXTURES / "host", tree)
    device = tree / "sys" / "class" / "infiniband" / "mlx5_0"
    for name, value in (("board_id", "MT_0000000223"), ("fw_ver", "28.39.1002"), ("hca_type", "MT4123")):
        (device / name).write_text(value + "\n")
    for port in (device / "ports").iterdir():
        (port / "link_layer").write_text("InfiniBand\n")
        (port / "phys_state").write_text("5: LinkUp\n")
    return tree


def run_node_exporter(*flags: str) -> Iterator[str]:
    """The URL of a real prometheus-node-exporter (default collectors) started with ``flags``."""
    port = free_port()
    proc = subprocess.Popen([require_tool("prometheus-node-exporter"), f"--web.listen-address=127.0.0.1:{port}",
                             *flags], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_http(f"http://127.0.0.1:{port}/metrics", timeout=60)
        yield f"http://127.0.0.1:{port}/metrics"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture(scope="module")
def node_exporter(host_tree: Path) -> Iterator[str]:
    """node_exporter reading ``host_tree``; its netdev reads the live host by netlink by default, whatever
    --path.procfs says."""
    yield from run_node_exporter(f"--path.procfs={host_tree / 'proc'}", f"--path.sysfs={host_tree / 'sys'}",
                                 f"--path.rootfs={host_tree}", "--no-collector.netdev.netlink")


@pytest.fixture(scope="module")
def node_scrape(node_exporter: str) -> dict[str, Any]:
    found = families(requests.get(node_exporter, timeout=30).text)
    success = {s.labels["collector"]: s.value for s in found["node_scrape_collector_success"].samples}
    for collector in ("cpu", "stat", "loadavg", "schedstat", "meminfo", "vmstat", "pressure", "diskstats",
                      "netdev", "netclass", "infiniband"):
        assert success.get(collector) == 1, f"node_exporter's {collector} collector failed on the fixture"
    return found


def our_host_scrape(host_tree: Path) -> dict[str, Any]:
    """Our host collectors' families on ``host_tree`` (``/``: this machine), collected in process."""
    args = build_parser().parse_args(["--collector.disable-defaults", *(f"--collector.{c}" for c in HOST_COLLECTORS),
                                      f"--path.procfs={host_tree / 'proc'}", f"--path.sysfs={host_tree / 'sys'}"])
    out: dict[str, Any] = {}
    for collector in parts.build_collectors(args, {}, TrainingRegistry()).values():
        for family in collector.collect():
            out[name(family)] = family
    return out


def test_every_host_family_we_export_has_a_node_exporter_twin(host_tree: Path) -> None:
    """A host series added without a twin would be exported twice beside node_exporter by no one's choice; a
    twin left for a series we no longer export would hide it."""
    assert sorted(our_host_scrape(host_tree)) == sorted(NODE_EXPORTER)


def test_every_node_exporter_twin_is_in_its_real_scrape(node_scrape: dict[str, Any]) -> None:
    for ours, twins in NODE_EXPORTER.items():
        for twin in twins:
            for name in metric_names(twin.series, "node_"):
                assert name in node_scrape, f"{ours}: {name}"


def test_on_this_machine_node_exporter_has_a_twin_of_every_host_family_we_export() -> None:
    """On the live /proc and /sys (whatever this machine lacks, e.g. /proc/schedstat or InfiniBand, neither
    exports): each family we export has its twins in the scrape of a node_exporter run with its defaults."""
    for url in run_node_exporter():
        theirs = families(requests.get(url, timeout=30).text)
    ours = our_host_scrape(Path("/"))
    assert len(ours) >= 30
    for family in ours:
        for twin in NODE_EXPORTER[family]:
            assert all(name in theirs for name in metric_names(twin.series, "node_")), (family, twin.series)


def test_node_exporter_twins_carry_our_values(host_tree: Path, node_scrape: dict[str, Any]) -> None:
    """Same fact, same unit: on the same /proc and /sys, each twin's samples equal ours label set for label set
    (node_exporter leaves out some devices by default: compared where both have the series)."""
    ours = our_host_scrape(host_tree)
    compared = 0
    for name, twins in NODE_EXPORTER.items():
        for twin in twins:
            if re.fullmatch(r"[0-9.]+", twin.series):
                assert set(samples(ours[name], dict(twin.match)).values()) == {float(twin.series)}, name
                continue
            terms = bare(twin)
            if terms is None or terms[0] not in node_scrape:
                continue
            mine = samples(ours[name], dict(twin.match))
            theirs = samples(node_scrape[terms[0]], {})
            common = mine.keys() & theirs.keys()
            assert common, f"{name} and {terms[0]} share no label set: {sorted(mine)[:3]} {sorted(theirs)[:3]}"
            for labels in common:
                assert mine[labels] == pytest.approx(theirs[labels] * twin.scale, rel=1e-9), (name, dict(labels))
                compared += 1
    assert compared >= 100


# --------------------------------------------------------------------------- dcgm-exporter's recorded scrape


DcgmScrape = dict[str, list[tuple[dict[str, str], float]]]
_SAMPLE = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\{((?:[A-Za-z_][A-Za-z0-9_]*="[^"]*",?)*)\} (\S+)')


@pytest.fixture(scope="module")
def dcgm_scrape() -> DcgmScrape:
    """{metric name as exposed: [(labels, value)]}. Read line by line: prometheus_client's parser appends _total
    to the samples of a counter that has none, as all of dcgm-exporter's are."""
    out: DcgmScrape = {}
    for line in DCGM_SCRAPE.read_text().splitlines():
        if line and not line.startswith("#"):
            found = _SAMPLE.fullmatch(line)
            assert found, line
            labels = dict(re.findall(r'([A-Za-z_][A-Za-z0-9_]*)="([^"]*)"', found.group(2)))
            out.setdefault(found.group(1), []).append((labels, float(found.group(3))))
    return out


def our_gpu_scrape(*flags: str) -> dict[str, Any]:
    """The gpu collector's families on the recorded profile, at its last recorded scrape."""
    args = build_parser().parse_args(["--collector.disable-defaults", "--collector.gpu",
                                      f"--collector.gpu.profile={PROFILE}", *flags])
    collector = parts.build_collectors(args, {}, TrainingRegistry())["gpu"]
    collector.collect()  # the profile's first scrape; the dcgm-exporter scrape was recorded at its last
    return {name(family): family for family in collector.collect()}


def test_every_gpu_family_is_either_unique_or_twinned_with_dcgm_exporter() -> None:
    assert not GPU_UNIQUE.keys() & DCGM_EXPORTER.keys()
    assert sorted(GPU_UNIQUE.keys() | DCGM_EXPORTER.keys()) == sorted(gpu.HELP)


def test_recorded_dcgm_scrape_has_dcgm_exporters_labels(dcgm_scrape: DcgmScrape) -> None:
    assert len(dcgm_scrape) == 25  # the lines of etc/default-counters.csv not commented out, but the label one
    for found in dcgm_scrape.values():
        assert len(found) == 4
        for labels, _ in found:
            assert labels.keys() >= DCGM_LABELS, labels
            assert labels.keys() - DCGM_LABELS in (set(), {"pod", "namespace", "container"}), labels


def test_dcgm_twins_carry_our_values_in_their_units(dcgm_scrape: DcgmScrape) -> None:
    """Each twin is in the recorded scrape and, joined on uuid = UUID and scaled to our unit, has our value: the
    table's units are dcgm-exporter's (MiB, %, MHz, mJ), not guessed."""
    ours = our_gpu_scrape()
    for name, twins in DCGM_EXPORTER.items():
        for twin in twins:
            terms = bare(twin)
            assert terms is not None, twin.series
            mine = {dict(k)["uuid"]: v for k, v in samples(ours[name], dict(twin.match), drop=("gpu",)).items()}
            theirs: dict[str, float] = {}
            for term in terms:
                assert term in dcgm_scrape, f"{name}: {term} is not among dcgm-exporter's default counters"
                for labels, value in dcgm_scrape[term]:
                    theirs[labels["UUID"]] = theirs.get(labels["UUID"], 0.0) + value
            assert mine.keys() == theirs.keys(), name
            for uuid, value in mine.items():
                assert value == pytest.approx(theirs[uuid] * twin.scale, rel=1e-6), (name, uuid)


# Named in a reason as the default counter that falls short (one value per scrape; the last code only; per pod,
# not per process, and only with --kubernetes-virtual-gpus).
FALLS_SHORT = {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_FB_USED"}


def test_no_unique_gpu_family_names_a_field_the_dcgm_scrape_has(dcgm_scrape: DcgmScrape) -> None:
    """The reasons say which DCGM field would carry the fact; none of them may be among the default counters,
    but for those the reason says fall short, which must be."""
    for family, why in GPU_UNIQUE.items():
        for field in metric_names(why, "DCGM_"):
            assert (field in dcgm_scrape) == (field in FALLS_SHORT), f"{family}: {field}"


# --------------------------------------------------------------------------- the presets


@pytest.fixture(scope="module")
def preset_scrape(host_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real exporter with the dcgm preset, on the same host tree as node_exporter, push receiver on."""
    socket = tmp_path_factory.mktemp("push") / "push.sock"
    exporter = ExporterProcess(["--collector.preset=beside-node-exporter-and-dcgm",
                                f"--collector.gpu.profile={PROFILE}", f"--path.procfs={host_tree / 'proc'}",
                                f"--path.sysfs={host_tree / 'sys'}", f"--push.socket={socket}"])
    try:
        exporter.wait_ready()
        yield exporter.scrape()
    finally:
        exporter.stop()


def test_preset_beside_node_exporter_and_dcgm_exports_no_duplicate_series(
        preset_scrape: str, node_scrape: dict[str, Any]) -> None:
    found = families(preset_scrape)
    ours = {name for name in found if name.startswith("bottleneck_")}
    assert not ours & NODE_EXPORTER.keys()
    assert not ours & DCGM_EXPORTER.keys()
    # Not even by accident under node_exporter's own names.
    assert not found.keys() & node_scrape.keys() - {n for n in found if n.startswith(("process_", "python_"))}
    gpu_families = {name for name in ours if name in gpu.HELP}
    # Placement needs the GPU processes' /proc/PID/status, which the host tree does not hold.
    assert gpu_families == GPU_UNIQUE.keys() - {"bottleneck_gpu_fan_ratio", "bottleneck_gpu_xid_errors_total",
                                                "bottleneck_gpu_process_local_cpus_ratio",
                                                "bottleneck_gpu_process_local_memory_ratio"}, \
        "the H100 profile has no fan and no XID event; every other unique family must be there"
    running = {s.labels["collector"] for s in found["bottleneck_scrape_collector_success"].samples}
    assert running == {"gpu", "kubernetes", "training", "push"}


def test_promtool_check_metrics_prints_nothing_on_the_preset_scrape(preset_scrape: str) -> None:
    result = subprocess.run([require_tool("promtool"), "check", "metrics"], input=preset_scrape,
                            capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


def test_preset_beside_node_exporter_keeps_the_gpu_collector_whole() -> None:
    assert our_gpu_scrape("--collector.preset=beside-node-exporter").keys() == our_gpu_scrape().keys()
    args = build_parser().parse_args(["--collector.preset=beside-node-exporter", f"--collector.gpu.profile={PROFILE}"])
    assert sorted(parts.build_collectors(args, {}, TrainingRegistry())) == ["gpu", "kubernetes", "training"]


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_flags_and_the_config_file_win_over_a_preset(preset: str, tmp_path: Path) -> None:
    config = tmp_path / "config.yml"
    config.write_text("collectors:\n  memory:\n    enabled: true\n  gpu:\n    enabled: true\n    only-unique: false\n")
    args = build_parser().parse_args([f"--collector.preset={preset}", "--collector.cpu", "--collector.kubernetes",
                                      f"--collector.gpu.profile={PROFILE}", f"--config.file={config}"])
    built = parts.build_collectors(args, load_yaml(str(config)), TrainingRegistry())
    assert sorted(built) == ["cpu", "gpu", "kubernetes", "memory", "training"]
    assert built["gpu"].exported is None  # type: ignore[attr-defined]


def test_an_unknown_preset_is_refused_with_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["--collector.preset=beside-dcgm"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "beside-node-exporter-and-dcgm" in err and "--collector.preset" in err


def test_docs_table_lists_every_series_with_its_twin_or_reason() -> None:
    """docs/coexistence.md is what an operator reads: a row per family, with the twin or reason of the code."""
    rows = {line.split("|")[1].strip(" `"): line for line in (ROOT / "docs" / "coexistence.md").read_text()
            .splitlines() if line.startswith("| `bottleneck_")}
    for table in (NODE_EXPORTER, DCGM_EXPORTER):
        for family, twins in table.items():
            assert family in rows, family
            for twin in twins:
                assert f"`{twin.series}`" in rows[family], family
    for family, why in GPU_UNIQUE.items():
        assert why in rows[family], family


def test_every_twin_is_promql_promtool_accepts(tmp_path: Path) -> None:
    """The twins are what a rule bundle or an operator types into Prometheus: each must parse."""
    rules = [{"record": f"twin:{index}", "expr": twin.series}
             for index, twin in enumerate(t for table in (NODE_EXPORTER, DCGM_EXPORTER) for ts in table.values()
                                          for t in ts)]
    path = tmp_path / "twins.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "twins", "rules": rules}]}))
    result = subprocess.run([require_tool("promtool"), "check", "rules", str(path)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout
