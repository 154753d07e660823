"""The distribution as pip installs it: the source folder exporter/ becomes the import package bottleneck_exporter,
and nothing named ``exporter`` is installed or imported."""

from __future__ import annotations

import ast
import email
import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import bottleneck_exporter
from tests.conftest import PACKAGE, ROOT

SOURCE = ROOT / "exporter"
# Every folder of Python the project ships or runs.
CODE = ("exporter", "tests", "benchmarks", "scripts", "deploy")


def _python_files() -> list[Path]:
    files = [p for folder in CODE for p in (ROOT / folder).rglob("*") if p.suffix == ".py"
             or (p.is_file() and p.suffix == "" and p.read_bytes()[:40].startswith(b"#!/usr/bin/env python"))]
    assert len(files) > 100, "the walk found too little to prove anything"
    return files


def _top_level_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
    return found


def test_no_code_imports_a_package_named_exporter() -> None:
    offenders = sorted(str(p.relative_to(ROOT)) for p in _python_files() if "exporter" in _top_level_imports(p))
    assert not offenders, offenders


def test_a_training_repository_s_own_exporter_package_does_not_shadow_ours(tmp_path: Path) -> None:
    """The reason for the name: a training repository with its own exporter/ (an ONNX or model exporter) first on
    sys.path hid the hook and the daemon behind it."""
    theirs = tmp_path / "exporter"
    theirs.mkdir()
    (theirs / "__init__.py").write_text("raise ImportError('their exporter')\n")
    (theirs / "hook.py").write_text("")
    code = (f"import {PACKAGE}.hook, {PACKAGE}.cli; from {PACKAGE}.hook import instrument; "
            f"print({PACKAGE}.hook.__file__)")
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert Path(result.stdout.strip()).resolve().is_relative_to(SOURCE)


DOCKERFILE = ROOT / "deploy" / "docker" / "Dockerfile"
SHIPPED = f"{PACKAGE}/bundle/as-committed"
# The committed folders the bundle ships (exporter/bundle/as-committed/ links to each), and its kinds of file.
BUNDLE_FOLDERS = ("prometheus", "alerts", "grafana", "tests/rules", "tests/fixtures/gpu-profiles")
BUNDLE_SUFFIXES = (".yml", ".yaml", ".json", ".tmpl")


def build_inputs() -> list[str]:
    """What the image's build stage copies before `pip wheel`: the wheel is built from these alone, so a wheel
    that misses a file the image lacks fails here (no Docker needed)."""
    build_stage = DOCKERFILE.read_text().split("\nFROM ")[1]
    sources = []
    for line in build_stage.splitlines():
        if line.startswith("COPY ") and "--from" not in line:
            *copied, destination = shlex.split(line)[1:]
            assert destination == "./" or [destination] == [f"./{c}" for c in copied], line
            sources += copied
    return sources


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Built from a copy: setuptools builds in the source tree's build/, which would keep a stale copy there.
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"
    for relative in build_inputs():
        if (ROOT / relative).is_dir():
            shutil.copytree(ROOT / relative, source / relative, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__"))
        else:
            (source / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / relative, source / relative)
    result = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(work), str(source)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert "BuildBackendWarning" not in result.stderr, result.stderr
    (built,) = work.glob("*.whl")
    return built


def test_the_image_builds_the_wheel_from_the_package_and_every_folder_the_bundle_links_to() -> None:
    links = {str((ROOT / "exporter/bundle/as-committed" / f).resolve().relative_to(ROOT)) for f in BUNDLE_FOLDERS}
    assert links == set(BUNDLE_FOLDERS), "as-committed/ mirrors the repository's paths"
    assert {"pyproject.toml", "README.md", "LICENSE", "exporter", *BUNDLE_FOLDERS} <= set(build_inputs())


def test_the_wheel_installs_bottleneck_exporter_with_every_module_and_one_version(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        meta = email.message_from_string(archive.read(metadata).decode())
        scripts = archive.read(entry_points).decode()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {PACKAGE}, top
    shipped = {f"{PACKAGE}/{p.relative_to(SOURCE).as_posix()}" for p in SOURCE.rglob("*")
               if p.is_file() and "__pycache__" not in p.parts}
    assert shipped - names == set(), "in exporter/ but not in the wheel (a package missing from pyproject.toml?)"
    assert meta["Name"] == "bottleneck-exporter" and meta["Version"] == bottleneck_exporter.__version__
    assert f"bottleneck-exporter = {PACKAGE}.cli:main" in scripts


def test_the_wheel_carries_every_committed_file_of_the_bundle_and_no_test(wheel: Path) -> None:
    committed = {f"{SHIPPED}/{p.relative_to(ROOT).as_posix()}": p for folder in BUNDLE_FOLDERS
                 for p in (ROOT / folder).rglob("*") if p.is_file() and p.suffix in BUNDLE_SUFFIXES}
    assert len([p for p in committed if p.endswith(".json")]) >= 16
    assert f"{SHIPPED}/alerts/alertmanager.yml" in committed
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        data = {n for n in names if n.startswith(f"{SHIPPED}/")}
        assert data == set(committed), "the bundle in the wheel is not the committed one"
        for name, path in committed.items():
            assert archive.read(name) == path.read_bytes(), name
    code = [n for n in names if n.endswith(".py")]
    assert not [n for n in code if n.rsplit("/", 1)[-1].startswith(("test_", "conftest")) or "/tests/" in n], \
        "a test module in the wheel"
    assert all(n.startswith(f"{PACKAGE}/") and not n.startswith(f"{SHIPPED}/") for n in code)
    under_tests = {n.removeprefix(f"{SHIPPED}/").split("/")[1] for n in data if n.startswith(f"{SHIPPED}/tests/")}
    assert under_tests == {"rules", "fixtures"} and not [
        n for n in data if "/tests/fixtures/" in n and "/tests/fixtures/gpu-profiles/" not in n]


def test_the_wheel_requires_no_torch_and_puts_the_kubelet_client_in_an_extra(wheel: Path) -> None:
    """`pip install 'bottleneck-exporter[torch]'` resolved the multi-GB CUDA build where no torch was installed;
    grpcio and protobuf came with every install, the hook's included."""
    with zipfile.ZipFile(wheel) as archive:
        (metadata,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        meta = email.message_from_string(archive.read(metadata).decode())
    requires = meta.get_all("Requires-Dist") or []
    assert meta.get_all("Provides-Extra") == ["kubernetes"]
    extra = sorted(r.split(";")[0].strip() for r in requires if "extra ==" in r)
    assert extra == ["grpcio>=1.50", "protobuf>=4.22"], extra
    def name(requirement: str) -> str:
        return re.split(r"[<>=!~ ;\[]", requirement, maxsplit=1)[0].lower()

    unconditional = {name(r) for r in requires if "extra ==" not in r}
    assert "prometheus-client" in unconditional and not unconditional & {"grpcio", "protobuf"}
    # Each of these requires torch: pip would resolve the CUDA build for it.
    assert not {name(r) for r in requires} & {"torch", "pytorch-lightning", "lightning", "accelerate"}


INSTALLED_BUNDLE = f"""
import sys
from pathlib import Path
import {PACKAGE}
assert Path({PACKAGE}.__file__).resolve().is_relative_to(Path(sys.argv[1]).resolve()), {PACKAGE}.__file__
from {PACKAGE}.cli import main
sys.exit(main(["bundle", "write", sys.argv[2]]))
"""


def test_the_installed_wheel_writes_the_bundle_from_its_own_copies(wheel: Path, tmp_path: Path) -> None:
    """Installed where no checkout is: the files come from the wheel (importlib.resources), not from links."""
    target = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(target)  # what pip does with a pure-Python wheel
    assert not any(p.is_symlink() for p in target.rglob("*"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(target)}
    result = subprocess.run([sys.executable, "-c", INSTALLED_BUNDLE, str(target), str(tmp_path / "bundle")],
                            capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    written = tmp_path / "bundle" / "prometheus" / "rules" / "alert-rules.yml"
    assert written.read_bytes() == (ROOT / "alerts" / "alert-rules.yml").read_bytes()


def test_the_image_tag_the_manifests_deploy_is_the_package_s_version() -> None:
    """The version is written once (exporter/__init__.py); the image the kustomize base deploys follows it."""
    import yaml

    base = yaml.safe_load((ROOT / "deploy/kubernetes/base/kustomization.yaml").read_text())
    (image,) = [i for i in base["images"] if i["name"] == "bottleneck-exporter"]
    assert str(image["newTag"]) == bottleneck_exporter.__version__
