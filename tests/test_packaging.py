"""The distribution as pip installs it: the source folder exporter/ becomes the import package bottleneck_exporter,
and nothing named ``exporter`` is installed or imported."""

from __future__ import annotations

import ast
import email
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

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


def test_the_wheel_installs_bottleneck_exporter_with_every_module_and_one_version(tmp_path: Path) -> None:
    # Built from a copy: setuptools builds in the source tree's build/, which would keep a stale copy there.
    source = tmp_path / "source"
    shutil.copytree(SOURCE, source / "exporter", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source)
    result = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(source)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    (wheel,) = tmp_path.glob("*.whl")
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


def test_the_image_tag_the_manifests_deploy_is_the_package_s_version() -> None:
    """The version is written once (exporter/__init__.py); the image the kustomize base deploys follows it."""
    import yaml

    base = yaml.safe_load((ROOT / "deploy/kubernetes/base/kustomization.yaml").read_text())
    (image,) = [i for i in base["images"] if i["name"] == "bottleneck-exporter"]
    assert str(image["newTag"]) == bottleneck_exporter.__version__
