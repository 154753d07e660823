"""The systemd unit in deploy/systemd: verified by systemd's own tools, not by reading it back."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

from bottleneck_exporter.cli import build_parser
from tests.conftest import ROOT, require_tool

SYSTEMD = ROOT / "deploy" / "systemd"
UNIT = SYSTEMD / "bottleneck-exporter.service"
# The security exposure (0-100, ten times what `systemd-analyze security` prints) must stay at or below this:
# a change that drops a hardening setting fails here instead of silently weakening the unit.
MAX_EXPOSURE = 20


def unit_settings(path: Path) -> dict[str, list[str]]:
    """Unit file settings; a key may repeat (DeviceAllow=, SystemCallFilter=), so values are lists."""
    settings: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";", "[")):
            continue
        key, _, value = line.partition("=")
        settings.setdefault(key, []).append(value)
    return settings


def unit_root(tmp_path: Path, unit_text: str) -> Path:
    """A filesystem root holding the unit, the targets it depends on and the binary ExecStart names.

    `verify` checks that ExecStart's binary exists and resolves dependencies such as sysinit.target; doing
    that in a root of our own keeps the test independent of where (and whether) the exporter is installed.
    """
    root = tmp_path / "root"
    units = root / "usr" / "lib" / "systemd" / "system"
    units.mkdir(parents=True)
    for unit in Path("/usr/lib/systemd/system").iterdir():
        if unit.suffix in (".target", ".slice", ".socket") and unit.is_file() and not unit.is_symlink():
            shutil.copy(unit, units)
    (root / "etc" / "systemd" / "system").mkdir(parents=True)
    (root / "etc" / "systemd" / "system" / UNIT.name).write_text(unit_text)
    exec_start = unit_settings(UNIT)["ExecStart"][0].split()[0]
    binary = root / exec_start.lstrip("/")
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    return root


def verify(tmp_path: Path, unit_text: str) -> subprocess.CompletedProcess[str]:
    analyze = require_tool("systemd-analyze")
    root = unit_root(tmp_path, unit_text)
    return subprocess.run([analyze, "verify", "--man=no", f"--root={root}", UNIT.name],
                          capture_output=True, text=True, timeout=60)


def test_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    result = verify(tmp_path, UNIT.read_text())
    # verify exits 0 on unknown keys but prints them: any line at all is a finding.
    findings = (result.stdout + result.stderr).strip()
    assert result.returncode == 0 and not findings, findings


def test_verify_catches_a_misspelled_directive(tmp_path: Path) -> None:
    """Guards the check above: a typo in a hardening key would otherwise be silently ignored by systemd."""
    broken = UNIT.read_text().replace("ProtectSystem=strict", "ProtectSystm=strict")
    result = verify(tmp_path, broken)
    assert "Unknown key 'ProtectSystm'" in result.stdout + result.stderr


def test_security_exposure_stays_low(tmp_path: Path) -> None:
    analyze = require_tool("systemd-analyze")
    root = unit_root(tmp_path, UNIT.read_text())
    result = subprocess.run([analyze, "security", "--offline=yes", f"--root={root}",
                             f"--threshold={MAX_EXPOSURE}", "--no-pager", UNIT.name],
                            capture_output=True, text=True, timeout=60)
    overall = re.search(r"Overall exposure level for \S+: ([\d.]+)", result.stdout)
    assert overall, result.stdout + result.stderr
    assert result.returncode == 0, f"exposure {overall.group(1)} > {MAX_EXPOSURE / 10}:\n{result.stdout}"


def test_unit_keeps_what_the_exporter_needs() -> None:
    """Hardening must not cut off NVML devices, other users' /proc entries or the push socket directory."""
    settings = unit_settings(UNIT)
    assert settings["PrivateDevices"] == ["no"]
    assert "char-nvidia* rw" in settings["DeviceAllow"]
    assert settings.get("ProtectProc", ["default"]) == ["default"]
    assert settings["RuntimeDirectory"] == ["bottleneck-exporter"]
    assert settings["CapabilityBoundingSet"] == [""]
    assert settings["ProtectSystem"] == ["strict"] and settings["NoNewPrivileges"] == ["yes"]
    # The socket file is created by the daemon: group members can write to it only if the umask leaves g+w.
    umask = int(settings["UMask"][0], 8)
    assert not umask & 0o020
    assert int(settings["RuntimeDirectoryMode"][0], 8) & 0o010, "the group needs search permission on the dir"


def test_sysusers_creates_the_user_in_the_units_group(tmp_path: Path) -> None:
    sysusers = require_tool("systemd-sysusers")
    (tmp_path / "etc").mkdir()
    result = subprocess.run([sysusers, f"--root={tmp_path}", "--dry-run",
                             str(SYSTEMD / "bottleneck-exporter.sysusers")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    settings = unit_settings(UNIT)
    user, group = settings["User"][0], settings["Group"][0]
    created = result.stdout + result.stderr
    assert f"Creating group '{group}'" in created
    user_line = re.search(rf"Creating user '{re.escape(user)}' .* with UID (\d+) and GID (\d+)", created)
    group_line = re.search(rf"Creating group '{re.escape(group)}' with GID (\d+)", created)
    assert user_line and group_line, created
    assert user_line.group(2) == group_line.group(1), "the user's primary group must be the push group"


def test_default_file_args_are_accepted_by_the_exporter() -> None:
    text = (SYSTEMD / "bottleneck-exporter.default").read_text()
    assignments = [line for line in text.splitlines() if line.startswith("ARGS=")]
    assert len(assignments) == 1
    args = shlex.split(shlex.split(assignments[0].partition("=")[2])[0])
    assert args, "ARGS is empty"
    namespace = build_parser().parse_args(args)
    assert namespace.listen_address.endswith(":9847")
