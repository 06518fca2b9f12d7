"""txbroker is a library: its requirements (runtime and every extra) are ranges, each from a
floor that the lock installs (so `make test` tests the floors) to an excluded next major;
the lock holds every package with hashes (docs/dependencies.md)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

from tests.lock_report import pins, report

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements" / "dev.lock"


def requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        reqs += extra
    return [Requirement(r) for r in reqs]


def bounds(req: Requirement) -> tuple[Version | None, Version | None]:
    lower = upper = None
    for spec in req.specifier:
        assert spec.operator in (">=", "<"), f"{req}: only >= and < (a range), not {spec}"
        if spec.operator == ">=":
            lower = Version(spec.version)
        else:
            upper = Version(spec.version)
    return lower, upper


def test_every_requirement_is_a_range_up_to_an_untested_major():
    for req in requirements():
        lower, upper = bounds(req)
        assert lower is not None and upper is not None, f"{req}: needs a floor and a ceiling"
        # The ceiling excludes a whole major (for 0.x, a minor): the first one not tested
        # (the floor's next, or past the newest that `make test-latest` has seen).
        assert upper > lower, f"{req}: empty range"
        major_boundary = (upper.release[1:] == (0,) * len(upper.release[1:]) if upper.major
                          else len(upper.release) == 2)
        assert major_boundary and not upper.is_prerelease, \
            f"{req}: the ceiling {upper} is not a major (for 0.x a minor) boundary"


def test_the_lock_installs_each_floor_with_hashes():
    locked = pins(LOCK)
    text = LOCK.read_text()
    for req in requirements():
        if req.marker is not None and not req.marker.evaluate():
            continue
        name = re.sub(r"[-_.]+", "-", req.name).lower()
        lower, _ = bounds(req)
        assert name in locked, f"{req.name} is not in {LOCK.name}: run make lock"
        assert Version(locked[name]) == lower, (
            f"{req.name}: the lock has {locked[name]}, the floor is {lower}: the lock must "
            f"install the floors (make lock)")
    # Every pinned package carries at least one hash (pip --require-hashes needs them all).
    for block in re.split(r"\n(?=[A-Za-z0-9])", text):
        if re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*==", block):
            assert "--hash=sha256:" in block, f"no hash in: {block.splitlines()[0]}"


def test_lock_report_names_what_differs(tmp_path):
    lock = tmp_path / "dev.lock"
    lock.write_text("aiohttp==3.14.5 \\\n    --hash=sha256:00\nuvloop==0.23.0 ; sys_platform != "
                    "'win32' \\\n    --hash=sha256:11\nSame_Name==1.0\n")
    frozen = tmp_path / "versions.txt"
    frozen.write_text("aiohttp==3.15.0\nuvloop==0.23.0\nsame-name==1.0\nnew-one==2\n")
    lines = report(pins(lock), pins(frozen))
    assert [line.split() for line in lines] == [["aiohttp", "3.14.5", "->", "3.15.0"],
                                                ["new-one", "-", "->", "2"]]
