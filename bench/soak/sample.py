"""One sample of the broker process: /proc, its /metrics page, its log so far, the load's counters.

RSS and threads come from /proc/PID/status (VmRSS, Threads), open file descriptors from
/proc/PID/fd, CPU from /proc/PID/stat; asyncio tasks and connections from the broker's
own gauges (``txbroker_event_loop_tasks``, ``txbroker_connections``); the log is the
broker's merged stdout/stderr as BrokerProcess collects it, one level field per line
(``asctime levelname name: message``).
"""

from __future__ import annotations

import os
import re
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

_CLK_TCK = os.sysconf("SC_CLK_TCK")
_SAMPLE = re.compile(r"^([a-z_]+)(\{[^}]*\})? (\S+)$", re.MULTILINE)


def proc_status(pid: int) -> dict[str, float]:
    """VmRSS in MB and Threads of a live process."""
    out: dict[str, float] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                out["rss_mb"] = round(int(line.split()[1]) / 1024, 1)
            elif line.startswith("Threads:"):
                out["threads"] = int(line.split()[1])
    return out


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def cpu_seconds(pid: int) -> float:
    """utime + stime of the process (its threads included)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text -> {name or name{labels}: value} (enough for a few gauges)."""
    return {m.group(1) + (m.group(2) or ""): float(m.group(3)) for m in _SAMPLE.finditer(text)}


def scrape(admin_url: str, timeout: float = 10) -> dict[str, float]:
    with urllib.request.urlopen(admin_url + "/metrics", timeout=timeout) as resp:
        return parse_metrics(resp.read().decode())


def log_level(line: str) -> str | None:
    """The level field of a broker log line (``2026-01-01 12:00:00,123 ERROR name: ...``)."""
    parts = line.split(" ", 3)
    if len(parts) >= 3 and parts[2] in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        return parts[2]
    return None


@dataclass
class LogTally:
    """Counts over a growing list of log lines, reading each line once."""
    lines: int = 0
    bytes: int = 0
    errors: int = 0
    warnings: int = 0
    tracebacks: int = 0  # of these, any not under an ERROR line was printed, not logged
    error_lines: list[str] = field(default_factory=list)
    warning_lines: list[str] = field(default_factory=list)
    keep: int = 50  # ERROR/WARNING lines kept for the report

    def update(self, output: Sequence[str]) -> None:
        end = len(output)
        for line in output[self.lines:end]:
            self.bytes += len(line.encode())
            level = log_level(line)
            if level in ("ERROR", "CRITICAL"):
                self.errors += 1
                if len(self.error_lines) < self.keep:
                    self.error_lines.append(line.rstrip())
            elif line.startswith("Traceback (most recent call last)"):
                self.tracebacks += 1
            elif level == "WARNING":
                self.warnings += 1
                if len(self.warning_lines) < self.keep:
                    self.warning_lines.append(line.rstrip())
        self.lines = end


def take(t: float, pid: int, admin_url: str, log: LogTally, output: Sequence[str],
         counters: dict[str, int]) -> dict[str, Any]:
    """A sample's absolute values at ``t`` seconds into the run (rates: ``add_rates``)."""
    sample: dict[str, Any] = {"t": round(t, 1), **proc_status(pid), "fds": open_fds(pid),
                              "cpu_s": round(cpu_seconds(pid), 2)}
    try:
        metrics = scrape(admin_url)
        sample["tasks"] = metrics.get("txbroker_event_loop_tasks")
        sample["connections"] = metrics.get("txbroker_connections")
    except OSError as e:
        sample["tasks"] = sample["connections"] = None
        sample["scrape_error"] = repr(e)[:200]
    log.update(output)
    sample.update(log_lines=log.lines, log_bytes=log.bytes, errors=log.errors,
                  warnings=log.warnings, **counters)
    return sample


def add_rates(samples: list[dict[str, Any]]) -> None:
    """Per-second rates between consecutive samples: produced, consumed, transactions
    and the broker's CPU (% of one core); the first sample has none."""
    for prev, cur in zip(samples, samples[1:], strict=False):
        dt = cur["t"] - prev["t"]
        if dt <= 0:
            continue
        for key, rate in (("produced", "produced_per_s"), ("consumed", "consumed_per_s"),
                          ("txns", "txn_per_s"), ("log_lines", "log_lines_per_s")):
            cur[rate] = round((cur[key] - prev[key]) / dt, 1)
        cur["cpu_pct"] = round((cur["cpu_s"] - prev["cpu_s"]) / dt * 100, 1)
