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


def test_the_wheel_and_so_the_image_carry_the_license(wheel: Path) -> None:
    """Regression: the image's build context left LICENSE out, so the wheel it installs (and the image) shipped
    Apache-2.0 code without its licence. PEP 639: the text under .dist-info/licenses/, named in the metadata."""
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        meta = email.message_from_string(archive.read(metadata).decode())
        (license_text,) = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
        assert archive.read(license_text) == (ROOT / "LICENSE").read_bytes()
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta.get_all("License-File") == ["LICENSE"]


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
    """The version is written once (exporter/__init__.py); the image the kustomize base deploys follows it, and
    is the one `make image-push` (what a release runs) publishes: same name, same tag."""
    import yaml

    base = yaml.safe_load((ROOT / "deploy/kubernetes/base/kustomization.yaml").read_text())
    (image,) = [i for i in base["images"] if i["name"] == "bottleneck-exporter"]
    assert str(image["newTag"]) == bottleneck_exporter.__version__
    make = subprocess.run(["make", "-s", "-n", "image-push"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert make.returncode == 0, make.stderr
    assert f"docker push {image['newName']}:{image['newTag']}" in make.stdout.splitlines()


def test_the_image_s_licence_check_passes_on_the_wheel(wheel: Path, tmp_path: Path) -> None:
    """The final stage's `python -c` check that the licence is installed runs here on the wheel installed as pip
    would (a check that could not pass would fail the image build only where Docker runs; and one that passes
    without the file would prove nothing, hence the second run without it)."""
    install = [line for line in re.sub(r"\\\n", " ", DOCKERFILE.read_text()).splitlines()
               if line.startswith("RUN pip install")]
    (check,) = [shlex.split(step.strip())[2] for line in install for step in line.split("&&")
                if step.strip().startswith("python -c") and "LICENSE" in step]
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(site)}

    def run() -> int:
        return subprocess.run([sys.executable, "-c", check], capture_output=True, timeout=60, cwd=tmp_path,
                              env=env).returncode

    assert run() == 0
    (licence,) = site.glob("*.dist-info/licenses/LICENSE")
    licence.unlink()
    record = next(site.glob("*.dist-info/RECORD"))
    record.write_text("".join(line for line in record.read_text().splitlines(keepends=True) if "LICENSE" not in line))
    assert run() == 1
