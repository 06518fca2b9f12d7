"""The soak's files: samples as JSON and CSV, the Markdown summary, the PNG of the samples."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from . import png
from .verdict import RSS_LIMIT_MB

COLUMNS = ("t", "rss_mb", "fds", "tasks", "connections", "threads", "cpu_pct", "log_lines",
           "log_bytes", "errors", "warnings", "produced", "consumed", "txns",
           "produced_per_s", "consumed_per_s", "txn_per_s", "violations", "client_errors")


def write_csv(path: Path, samples: list[dict[str, Any]]) -> None:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(samples)


def plot(samples: list[dict[str, Any]], warmup_s: float) -> bytes:
    xs = [s["t"] / 60 for s in samples]

    def col(key: str) -> list[float | None]:
        return [s.get(key) for s in samples]

    panels = [
        png.Panel("RSS MB", [png.Series("RSS", col("rss_mb"))], limit=RSS_LIMIT_MB),
        png.Panel("open fds and connections", [png.Series("FDS", col("fds")),
                                               png.Series("CONNS", col("connections"))]),
        png.Panel("event-loop tasks", [png.Series("TASKS", col("tasks"))]),
        png.Panel("records/s", [png.Series("PRODUCED", col("produced_per_s")),
                                png.Series("CONSUMED", col("consumed_per_s"))]),
        png.Panel("txn/s and broker CPU %", [png.Series("TXN/S", col("txn_per_s")),
                                             png.Series("CPU %", col("cpu_pct"))]),
    ]
    return png.line_chart_png(xs, panels, marker_x=warmup_s / 60)


def _row(values: list[Any]) -> str:
    return "| " + " | ".join("" if v is None else str(v) for v in values) + " |"


def markdown(report: dict[str, Any]) -> str:
    m, cfg = report["machine"], report["config"]
    lines = [
        "# Soak: 30 minutes of mixed load, leaks and drift" if cfg["minutes"] == 30
        else f"# Soak: {cfg['minutes']:g} minutes of mixed load, leaks and drift", "",
        f"`{report['command']}`, {m['date']}, commit {m['txbroker_commit']}; {m['cpu_model']}, "
        f"{m['logical_cores']} cores; load average {m['loadavg_start']} at the start "
        "(a shared machine: rates are the load's, not the broker's ceiling).", "",
        f"Samples every {cfg['sample_seconds']:g} s; warm-up {cfg['warmup_seconds']:g} s "
        "(the dashed vertical line); verdicts on the samples after it. The broker ran as a "
        f"process (`python -m txbroker serve`, admin endpoint on); it exited with "
        f"{report['broker_exit']}.", "",
        "## Verdicts", "", "| goal | measured | target | verdict |", "|---|---|---|---|",
    ]
    lines += [_row([v["name"], v["value"], v["goal"],
                    {True: "pass", False: "**FAIL**", None: "n/a"}[v["ok"]]])
              for v in report["verdicts"]]
    lines += ["", "![RSS, fds, tasks, throughput and CPU over the run](soak.png)", "",
              "## Samples", "",
              "| min | RSS MB | fds | tasks | conns | threads | CPU % | log lines | "
              "ERROR | WARNING | produced/s | consumed/s | txn/s |",
              "|" + "---|" * 13]
    for s in report["samples"]:
        lines.append(_row([f"{s['t'] / 60:.1f}", s.get("rss_mb"), s.get("fds"), s.get("tasks"),
                           s.get("connections"), s.get("threads"), s.get("cpu_pct"),
                           s.get("log_lines"), s.get("errors"), s.get("warnings"),
                           s.get("produced_per_s"), s.get("consumed_per_s"),
                           s.get("txn_per_s")]))
    lines += ["", "## The load", "", "| worker | counts | exceptions |", "|---|---|---|"]
    for w in report["workers"]:
        counts = ", ".join(f"{k} {v}" for k, v in w.items()
                           if k not in ("worker", "exceptions", "last_errors"))
        lines.append(_row([w["worker"], counts, w["exceptions"]]))
    lines += ["", "Share groups (KIP-932): not run — the broker has no share groups yet "
              "(bench/soak/load.py marks where their worker goes).", ""]
    log = report["log"]
    lines += ["## The broker's log", "",
              f"{log['lines']} lines, {log['bytes']:,} bytes; {log['errors']} ERROR, "
              f"{log['warnings']} WARNING, {log['tracebacks']} traceback(s).", ""]
    for title, key in (("ERROR lines", "error_lines"), ("WARNING lines (first few)",
                                                         "warning_lines")):
        if log[key]:
            lines += [f"{title}:", "", "```", *log[key][:20], "```", ""]
    errors = [(w["worker"], e) for w in report["workers"] for e in w["last_errors"]]
    if errors:
        lines += ["Client-side errors (the last few per worker):", "", "```",
                  *(f"{name}: {e}" for name, e in errors), "```", ""]
    return "\n".join(lines)


def write_all(out: Path, report: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "soak.json").write_text(json.dumps(report, indent=1) + "\n")
    write_csv(out / "soak.csv", report["samples"])
    (out / "soak.png").write_bytes(plot(report["samples"], report["config"]["warmup_seconds"]))
    (out / "soak.md").write_text(markdown(report))
