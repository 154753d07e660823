"""``bottleneck-exporter bundle write DIR``: the committed bundle written out where a Prometheus, an Alertmanager and
a Grafana load it, checked by the real promtool and amtool, and written again without losing a person's edits."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bottleneck_exporter.bundle import layout
from bottleneck_exporter.bundle.command import main
from bottleneck_exporter.bundle.writer import MANIFEST
from bottleneck_exporter.cli import DEFAULT_PORT
from bottleneck_exporter.dashboards.files import bundle_dir
from bottleneck_exporter.heuristics import BUNDLES, DEFAULT_BUNDLE
from bottleneck_exporter.heuristics.generate import RULE_TESTS, bundle_files, bundle_rule_test
from tests.conftest import ROOT, require_tool

OTHER_BUNDLES = [b for b in BUNDLES if b != DEFAULT_BUNDLE]


def write(directory: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """The command as a person runs it, from a folder outside the repository."""
    return subprocess.run([sys.executable, "-m", "bottleneck_exporter", "bundle", "write", str(directory), *flags],
                          capture_output=True, text=True, timeout=120, cwd=directory.parent)


def committed(bundle: str) -> dict[str, Path]:
    """Written path → the committed file it must equal."""
    recording, alerting = bundle_files(bundle)
    tests = ROOT / (RULE_TESTS if bundle == DEFAULT_BUNDLE else Path(bundle_rule_test(bundle)).parent)
    found = {layout.RECORDING: ROOT / recording, layout.ALERTING: ROOT / alerting,
             f"{layout.ALERTMANAGER}/alertmanager.yml": ROOT / "alerts/alertmanager.yml"}
    found |= {f"{layout.RULE_TESTS}/{p.name}": p for p in tests.glob("*.yml")}
    found |= {f"{layout.ALERTMANAGER}/templates/{p.name}": p for p in (ROOT / "alerts/templates").glob("*.tmpl")}
    found |= {f"{layout.DASHBOARDS}/{p.name}": p for p in (ROOT / bundle_dir(bundle)).glob("*.json")}
    found |= {f"{layout.GPU_PROFILES}/{p.name}": p for p in (ROOT / "tests/fixtures/gpu-profiles").glob("*.yaml")}
    found |= {f"grafana/provisioning/{p.relative_to(ROOT / 'grafana/provisioning')}": p
              for p in (ROOT / "grafana/provisioning").rglob("*.yml")}
    return found


@pytest.mark.parametrize("bundle", list(BUNDLES))
def test_the_layout_reads_each_bundle_s_files_where_the_generators_write_them(bundle: str) -> None:
    """layout.py names the repository's paths itself (the daemon never imports the generators): held to them."""
    recording, alerting, tests = layout.committed_rules(bundle)
    assert (recording, alerting) == bundle_files(bundle)
    assert tests == (RULE_TESTS if bundle == DEFAULT_BUNDLE else str(Path(bundle_rule_test(bundle)).parent))
    assert layout.committed_dashboards(bundle) == str(bundle_dir(bundle))
    assert layout.EXPORTER_PORT == DEFAULT_PORT


@pytest.mark.parametrize("bundle", list(BUNDLES))
def test_every_written_file_is_the_committed_one_but_for_the_lines_naming_a_place(bundle: str, tmp_path: Path) -> None:
    target = tmp_path / "bundle"
    result = write(target, f"--bundle={bundle}")
    assert result.returncode == 0, result.stderr
    written = {p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file()}
    expected = committed(bundle)
    assert written == set(expected) | {layout.PROMETHEUS_CONFIG, layout.README, MANIFEST}
    moved = {p for p in expected if p.startswith(f"{layout.RULE_TESTS}/") or p.startswith("grafana/provisioning/")}
    for relative, source in expected.items():
        if relative not in moved:
            assert (target / relative).read_bytes() == source.read_bytes(), relative
    for relative in moved:
        ours, theirs = (target / relative).read_text().splitlines(), expected[relative].read_text().splitlines()
        changed = [i for i, (a, b) in enumerate(zip(ours, theirs, strict=True)) if a != b]
        assert len(changed) <= 2, relative
        if relative.startswith(f"{layout.RULE_TESTS}/"):
            header = yaml.safe_load("\n".join(ours[:ours.index("tests:")]))
            assert header["rule_files"] == ["../recording-rules.yml", "../alert-rules.yml"]
            assert {ours[i] for i in changed} <= {f"- {f}" for f in header["rule_files"]}, relative
    provider = yaml.safe_load((target / "grafana/provisioning/dashboards/bottleneck.yml").read_text())
    assert provider["providers"][0]["options"]["path"] == str(target / layout.DASHBOARDS)
    (datasource,) = yaml.safe_load((target / "grafana/provisioning/datasources/prometheus.yml").read_text())[
        "datasources"]
    assert datasource["url"] == "http://localhost:9090", "the Prometheus prometheus.yml runs"
    assert f"prometheus --config.file={target / layout.PROMETHEUS_CONFIG}" in result.stdout


@pytest.mark.tools
def test_prometheus_and_alertmanager_accept_the_written_default_bundle_and_its_promtool_tests_pass(
        tmp_path: Path) -> None:
    promtool, amtool = require_tool("promtool"), require_tool("amtool")
    target = tmp_path / "bundle"
    assert write(target).returncode == 0
    tests = sorted(str(p) for p in (target / layout.RULE_TESTS).glob("*.yml"))
    assert len(tests) == len(list((ROOT / RULE_TESTS).glob("*.yml"))) > 20
    # From elsewhere: the config's rule_files and the tests' are relative to their own files, not to a cwd.
    said = []
    for command in ([promtool, "check", "config", str(target / layout.PROMETHEUS_CONFIG)],
                    [promtool, "test", "rules", *tests],
                    [amtool, "check-config", str(target / layout.ALERTMANAGER / "alertmanager.yml")]):
        result = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=tmp_path)
        assert result.returncode == 0, result.stdout + result.stderr
        said.append(result.stdout)
    assert "SUCCESS: 2 rule files found" in said[0] and said[1].count("SUCCESS") == len(tests)
    assert "1 templates" in said[2], "the templates beside the config were found"


@pytest.mark.tools
@pytest.mark.parametrize("bundle", OTHER_BUNDLES)
def test_the_written_config_of_each_other_bundle_scrapes_its_peers_and_loads_its_rules(bundle: str,
                                                                                        tmp_path: Path) -> None:
    """Its rules and promtool test are the committed files at the same relative places (the test above), which
    tests/test_bundles.py runs through promtool; what is new here is the config around them."""
    promtool = require_tool("promtool")
    target = tmp_path / "bundle"
    assert write(target, f"--bundle={bundle}").returncode == 0
    config = yaml.safe_load((target / layout.PROMETHEUS_CONFIG).read_text())
    jobs = {job["job_name"]: job["static_configs"][0] for job in config["scrape_configs"]}
    assert set(jobs) == {"bottleneck-exporter", "node-exporter"} | ({"dcgm-exporter"} if "dcgm" in bundle else set())
    assert {tuple(j["targets"]) for j in jobs.values()} >= {("localhost:9847",), ("localhost:9100",)}
    assert {j["labels"]["instance"] for j in jobs.values()} == {"localhost"}, "the rules join the jobs on instance"
    result = subprocess.run([promtool, "check", "config", str(target / layout.PROMETHEUS_CONFIG)],
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert result.returncode == 0 and "SUCCESS: 2 rule files found" in result.stdout, result.stdout + result.stderr


def test_writing_again_updates_what_it_wrote_and_refuses_to_clobber_an_edit(tmp_path: Path) -> None:
    target = tmp_path / "bundle"
    assert write(target, "--bundle=node-exporter").returncode == 0
    again = write(target, "--bundle=node-exporter")
    assert again.returncode == 0 and "unchanged" in again.stdout and "added" not in again.stdout
    receivers = target / layout.ALERTMANAGER / "alertmanager.yml"
    receivers.write_text(receivers.read_text() + "# our receivers\n")
    rules_before = (target / layout.RECORDING).read_text()
    refused = write(target)
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr.count("\n") == 1 and "alertmanager/alertmanager.yml" in refused.stderr, refused.stderr
    assert "--force" in refused.stderr
    assert (target / layout.RECORDING).read_text() == rules_before, "a refused write writes nothing"
    assert receivers.read_text().endswith("# our receivers\n")
    forced = write(target, "--force")
    assert forced.returncode == 0, forced.stderr
    assert (target / layout.RECORDING).read_bytes() == (ROOT / "prometheus/recording-rules.yml").read_bytes()
    assert not (target / layout.RULE_TESTS / "scenarios.yml").exists(), "the other bundle's test is left behind"
    assert receivers.read_bytes() == (ROOT / "alerts/alertmanager.yml").read_bytes()


def test_a_file_of_the_previous_bundle_that_someone_edited_is_not_removed(tmp_path: Path) -> None:
    target = tmp_path / "bundle"
    assert write(target, "--bundle=node-exporter-dcgm").returncode == 0
    edited = target / layout.RULE_TESTS / "scenarios.yml"
    edited.write_text(edited.read_text() + "# a case of ours\n")
    refused = write(target)
    assert refused.returncode == 1 and "prometheus/rules/tests/scenarios.yml" in refused.stderr
    assert edited.exists()


def test_files_in_the_folder_that_are_not_the_bundle_s_are_left_alone(tmp_path: Path) -> None:
    target = tmp_path / "bundle"
    (target / "prometheus" / "rules").mkdir(parents=True)
    ours = target / "prometheus" / "rules" / "site-rules.yml"
    ours.write_text("groups: []\n")
    assert write(target).returncode == 0
    assert write(target, "--bundle=node-exporter").returncode == 0
    assert ours.read_text() == "groups: []\n"
    listed = (target / MANIFEST).read_text()
    assert "site-rules.yml" not in listed and f"  {layout.RECORDING}\n" in listed


def test_a_folder_that_held_another_file_at_a_bundle_path_is_refused_without_force(tmp_path: Path) -> None:
    target = tmp_path / "bundle"
    (target / "alertmanager").mkdir(parents=True)
    (target / "alertmanager" / "alertmanager.yml").write_text("route: {receiver: ours}\n")
    refused = write(target)
    assert refused.returncode == 1 and "alertmanager/alertmanager.yml" in refused.stderr
    assert not (target / layout.RECORDING).exists()


@pytest.mark.parametrize(("argv", "status", "message"), [
    (["write", "DIR", "--bundle=node_exporter"], 2, "did you mean 'node-exporter'?"),
    (["write"], 2, "the following arguments are required: DIR"),
    (["frobnicate"], 2, "invalid choice: 'frobnicate'"),
    ([], 2, "the following arguments are required: COMMAND"),
])
def test_bad_usage_is_one_error_and_exit_2(argv: list[str], status: int, message: str, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    argv = [str(tmp_path / "x") if a == "DIR" else a for a in argv]
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == status
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "x").exists()


def test_a_folder_that_cannot_be_written_is_one_line_and_exit_1(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    for target, said in ((blocker, "exists and is not a directory"), (blocker / "sub", "cannot create"),
                         (Path("/proc/bundle"), "cannot create")):
        result = subprocess.run([sys.executable, "-m", "bottleneck_exporter", "bundle", "write", str(target)],
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
        assert said in result.stderr and str(target) in result.stderr, result.stderr


def test_bundle_list_names_every_bundle_and_the_exporters_it_reads(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == list(BUNDLES)
    assert all(BUNDLES[line.split()[0]].sentence in line for line in lines)


@pytest.mark.parametrize("command", [["list"], ["write", "DIR"]])
def test_a_reader_that_stops_early_gets_no_traceback(command: list[str], tmp_path: Path) -> None:
    """`bundle write DIR | head -1` printed a BrokenPipeError traceback once head had its line."""
    argv = [str(tmp_path / "bundle") if a == "DIR" else a for a in command]
    with subprocess.Popen([sys.executable, "-m", "bottleneck_exporter", "bundle", *argv], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as child:
        assert child.stdout is not None and child.stderr is not None
        child.stdout.close()  # before the command prints: every write it makes meets a closed pipe
        stderr = child.stderr.read()
        assert child.wait(timeout=120) == 0 and stderr == "", stderr
    assert command == ["list"] or (tmp_path / "bundle" / MANIFEST).exists()


def test_the_exporter_s_help_names_the_bundle_command() -> None:
    result = subprocess.run([sys.executable, "-m", "bottleneck_exporter", "--help"], capture_output=True, text=True,
                            timeout=120)
    assert "bottleneck-exporter bundle" in result.stdout

