"""What every benchmark shares: machine load, CPU accounting, the machine record, the report files.

The benchmarks run on shared 2-core machines, so each records how busy the
machine was besides itself and can wait for a quiet moment first.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import shlex
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent


def system_busy() -> float:
    """CPU seconds all cores spent busy since boot (to spot other load on the machine)."""
    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


def process_cpu(pid: int) -> float:
    """User + system CPU seconds of one process (0 if it is gone)."""
    try:
        t = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return 0.0
    return t.user + t.system


def wait_for_idle(max_wait: float, window: float = 2.0, busy_limit: float = 0.25) -> float:
    """Wait (at most ``max_wait`` s) for a ``window`` in which the machine's cores were
    busy less than ``busy_limit`` cores in total; returns the seconds waited."""
    start = time.monotonic()
    while True:
        busy0 = system_busy()
        time.sleep(window)
        if (system_busy() - busy0) / window < busy_limit:
            break
        if time.monotonic() - start >= max_wait:
            break
    return round(time.monotonic() - start, 1)


def median(values: Sequence[float | None], digits: int = 2) -> float | None:
    """Median of the known values, rounded; None when there are none."""
    known = [v for v in values if v is not None]
    return round(statistics.median(known), digits) if known else None


def fmt(x: float | None, digits: int = 1, scale: float = 1.0) -> str:
    return "n/a" if x is None else f"{x * scale:,.{digits}f}"


def cmd_output(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=10,
                              cwd=ROOT).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def package_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_info(**extra: Any) -> dict[str, Any]:
    """The machine and code a run measured; call it before the runs (date, load at start)."""
    head = cmd_output(["git", "rev-parse", "--short", "HEAD"])
    dirty = bool(cmd_output(["git", "status", "--porcelain", "--", "protocol", "storage",
                             "broker", "coordinator", "spark_jobs", "txbroker"]))
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
        "cpu_model": _cpu_model(),
        "logical_cores": os.cpu_count(),
        "physical_cores": psutil.cpu_count(logical=False),
        "memory_gb": round(psutil.virtual_memory().total / 1e9, 1),
        "os": platform.platform(),
        "python": platform.python_version(),
        "txbroker_commit": head + (" (code modified)" if dirty else ""),
        **extra,
    }


def python_path() -> str:
    # Print .venv/bin/python rather than an absolute path when it is under the cwd.
    exe = Path(sys.executable)
    try:
        return str(exe.relative_to(Path.cwd()))
    except ValueError:
        return str(exe)


def command_line(module: str, argv: Sequence[str] | None) -> str:
    """The command that reproduces this run, for the report."""
    return shlex.join([python_path(), "-m", module, *(sys.argv[1:] if argv is None else argv)])


def write_report(out: Path, name: str, report: dict[str, Any],
                 render: Callable[[dict[str, Any]], str]) -> None:
    """Write ``name``.json and ``name``.md under ``out`` and print the Markdown."""
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / f"{name}.json", out / f"{name}.md"
    json_path.write_text(json.dumps(report, indent=2) + "\n")
    md = render(report)
    md_path.write_text(md)
    print()
    print(md)
    print(f"wrote {json_path} and {md_path}")


def stop_on_sigterm() -> None:
    """Turn SIGTERM into KeyboardInterrupt, so the finally blocks stop brokers and workers."""
    def raise_interrupt(_signo: int, _frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, raise_interrupt)
