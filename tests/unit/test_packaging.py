"""Every product package ships: each folder with an ``__init__.py`` under the product's
top folders is in pyproject's ``packages`` (its top folder in ``package-dir``), its top
folder is copied by the Dockerfile, and the wheel built from pyproject holds every
product module. A new folder left out of any of them fails here, not in a user's
``pip install`` (docs/internals.md, "Layout")."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = "txbroker"
# The top folders that install under txbroker.* (txbroker/ itself is the namespace).
PRODUCT = ("txbroker", "protocol", "client", "storage", "coordinator", "broker", "tools",
           "testing", "spark_jobs")
# Top-level packages of the repository that are not shipped, and why.
NOT_SHIPPED = {
    "tests": "our own suite",
    "bench": "benchmarks, run from a checkout (python -m bench.throughput)",
}


def dotted(folder: Path) -> str:
    parts = folder.relative_to(ROOT).parts
    return ".".join(parts if parts[0] == NAMESPACE else (NAMESPACE, *parts))


def package_folders() -> dict[str, Path]:
    """Dotted package name -> folder, for every product folder with an __init__.py."""
    return {dotted(init.parent): init.parent
            for top in PRODUCT for init in sorted((ROOT / top).rglob("__init__.py"))}


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_top_level_package_is_shipped_or_said_not_to_be():
    tops = {p.parent.name for p in ROOT.glob("*/__init__.py")}
    unknown = tops - set(PRODUCT) - set(NOT_SHIPPED)
    assert not unknown, (f"top-level package(s) {sorted(unknown)}: add to PRODUCT here (and "
                         f"pyproject, Dockerfile) or to NOT_SHIPPED with the reason")
    assert set(PRODUCT) <= tops, f"missing product folders: {set(PRODUCT) - tops}"


def test_pyproject_lists_every_package_folder():
    setuptools = pyproject()["tool"]["setuptools"]
    listed, mapping = set(setuptools["packages"]), setuptools["package-dir"]
    folders = package_folders()
    assert not set(folders) - listed, \
        f"[tool.setuptools] packages lacks {sorted(set(folders) - listed)}"
    assert not listed - set(folders), \
        f"[tool.setuptools] packages names folders that do not exist: {sorted(listed - set(folders))}"
    for top in PRODUCT:
        name = NAMESPACE if top == NAMESPACE else f"{NAMESPACE}.{top}"
        assert mapping.get(name) == top, f'package-dir needs "{name}" = "{top}"'


def test_entry_points_name_modules_that_exist():
    project = pyproject()["project"]
    targets = {**project["scripts"], **project["entry-points"]["pytest11"]}
    modules = {**{name: path for name, path in package_folders().items()},
               **{f"{dotted(p.parent)}.{p.stem}": p
                  for top in PRODUCT for p in (ROOT / top).rglob("*.py")}}
    for name, target in targets.items():
        module = target.split(":")[0]
        assert module in modules, f"entry point {name} = {target}: no module {module}"
    assert project["scripts"]["txbroker"] == "txbroker.cli:main"
    assert project["entry-points"]["pytest11"]["txbroker"] == "txbroker.testing.pytest_plugin"


def test_dockerfile_copies_every_product_folder():
    copied = set(re.findall(r"^COPY (\S+) \./\1\s*$", (ROOT / "Dockerfile").read_text(),
                            re.MULTILINE))
    missing = set(PRODUCT) - copied
    assert not missing, f"Dockerfile: no 'COPY <folder> ./<folder>' line for {sorted(missing)}"


def test_the_built_wheel_holds_every_product_module(tmp_path):
    """Built from a copy of the product folders (no build/ or egg-info left in the
    checkout) with the installed setuptools, as ``pip install .`` would."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for top in PRODUCT:
        shutil.copytree(ROOT / top, src / top, ignore=shutil.ignore_patterns("__pycache__"))
    build = subprocess.run(
        [sys.executable, "-c", "import sys; from setuptools import build_meta; "
                               "build_meta.build_wheel(sys.argv[1])", str(tmp_path / "dist")],
        cwd=src, capture_output=True, text=True, timeout=120)
    assert build.returncode == 0, (
        "wheel build failed (setuptools >= 77 is in the test extra: pip install -e "
        "'.[test]'):\n" + build.stderr[-3000:])
    [wheel] = (tmp_path / "dist").glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {f"{dotted(p.parent).replace('.', '/')}/{p.name}"
                for top in PRODUCT for p in (ROOT / top).rglob("*.py")}
    missing = sorted(expected - names)
    assert not missing, f"the wheel lacks {missing}"
    tops = {n.split("/")[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {NAMESPACE}, tops
    assert "txbroker/spark_jobs/log4j2.properties" in names  # package data
    assert {"txbroker/broker/console/static/console.css",
            "txbroker/broker/console/static/console.js"} <= names  # the console's assets
    [entry_points] = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "txbroker = txbroker.cli:main" in text
    assert "txbroker = txbroker.testing.pytest_plugin" in text
