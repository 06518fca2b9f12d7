"""What `make test-latest` installed against what the lock pins: one line per package whose
version differs, so a failure of the newest releases names its suspects at once.

    python -m tests.lock_report requirements/dev.lock .venv-latest/versions.txt
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from packaging.markers import Marker

PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)\s*(?:;([^\\]*))?")


def pins(path: Path) -> dict[str, str]:
    """Package name (normalized as PyPI does) -> version, from a lock or a pip freeze."""
    out = {}
    for line in path.read_text().splitlines():
        m = PIN.match(line.strip())
        # A package locked for another platform (colorama on Windows) is not expected here.
        if m and (m.group(3) is None or Marker(m.group(3).strip()).evaluate()):
            out[re.sub(r"[-_.]+", "-", m.group(1)).lower()] = m.group(2)
    return out


def report(lock: dict[str, str], installed: dict[str, str]) -> list[str]:
    lines = []
    for name in sorted(lock.keys() | installed.keys()):
        old, new = lock.get(name), installed.get(name)
        if old != new:
            lines.append(f"  {name:<24} {old or '-':>16} -> {new or '-'}")
    return lines


def main(argv: list[str]) -> int:
    lock, installed = pins(Path(argv[0])), pins(Path(argv[1]))
    lines = report(lock, installed)
    print(f"newest releases: {len(lines)} of {len(installed)} packages differ from the lock"
          + (" (lock -> installed):" if lines else ""))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
