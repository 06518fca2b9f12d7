"""Kafka's own Java code against a broker: the Java clients program and Kafka's
command-line tools (tests/jvm/*.java), compiled once per session with javac against the
jars `make kafka-jars` fetched, and run in as few JVMs as possible (each start costs
about a second here).

``run_tools`` runs a list of tool commands in one JVM (tests/jvm/ToolRunner.java) and
returns each one's exit status and output. ``run_java_clients`` runs
tests/jvm/JavaClients.java and returns its steps.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.kafka_reference import ROOT, jars_available, jars_dir

SOURCES = ROOT / "tests" / "jvm"

# Main classes, by the name of the script Kafka's distribution wraps them in.
TOOLS = {
    "kafka-topics": "org.apache.kafka.tools.TopicCommand",
    "kafka-configs": "org.apache.kafka.tools.ConfigCommand",  # kafka.admin until 4.3
    "kafka-console-producer": "org.apache.kafka.tools.ConsoleProducer",
    "kafka-console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "kafka-consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-transactions": "org.apache.kafka.tools.TransactionsCommand",
    "kafka-get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "kafka-delete-records": "org.apache.kafka.tools.DeleteRecordsCommand",
    "kafka-log-dirs": "org.apache.kafka.tools.LogDirsCommand",
    "kafka-producer-perf-test": "org.apache.kafka.tools.ProducerPerformance",
    "kafka-features": "org.apache.kafka.tools.FeatureCommand",
    "kafka-share-groups": "org.apache.kafka.tools.consumer.group.ShareGroupCommand",
    "kafka-console-share-consumer": "org.apache.kafka.tools.consumer.ConsoleShareConsumer",
    "kafka-streams-groups": "org.apache.kafka.tools.streams.StreamsGroupCommand",
}


@dataclass
class ToolResult:
    command: list[str]
    exit: int
    output: str

    def lines(self) -> list[str]:
        return [line for line in self.output.splitlines() if line.strip()]

    def table(self) -> list[list[str]]:
        """The rows of a whitespace-aligned table (header included)."""
        return [line.split() for line in self.lines()]


def jvm_available() -> str | None:
    """None, or why the JVM tests cannot run."""
    if jars_available() and shutil.which("javac"):
        return None
    why = f"no Kafka jars in {jars_dir()} or no javac: run `make kafka-jars`"
    if os.environ.get("CI"):
        pytest.fail(why)  # CI ran make, which fetches them
    return why


def classpath(classes: Path) -> str:
    return f"{classes}{os.pathsep}{jars_dir()}/*"


def compile_sources(out: Path) -> Path:
    """javac every tests/jvm/*.java into ``out``; returns it."""
    out.mkdir(parents=True, exist_ok=True)
    sources = sorted(str(p) for p in SOURCES.glob("*.java"))
    done = subprocess.run(["javac", "-nowarn", "-d", str(out), "-cp", f"{jars_dir()}/*", *sources],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"javac failed:\n{done.stdout}\n{done.stderr}"
    return out


def _java(classes: Path, main: str, *args: str, timeout: float) -> subprocess.CompletedProcess:
    # The client logs (log4j's default: ERROR and above) go to the JVM's stdout/stderr.
    return subprocess.run(["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp",
                           classpath(classes), main, *args],
                          capture_output=True, text=True, timeout=timeout)


def run_tools(classes: Path, work: Path, commands: list[list[str]],
              stdin: dict[int, str] | None = None, timeout: float = 240) -> list[ToolResult]:
    """Run ``commands`` (each: a tool name of TOOLS, then its arguments) in one JVM, in
    order; ``stdin`` gives the text some of them (by index) read from standard input."""
    work.mkdir(parents=True, exist_ok=True)
    lines = []
    for i, (tool, *args) in enumerate(commands):
        source = "-"
        if stdin and i in stdin:
            path = work / f"stdin-{i}.txt"
            path.write_text(stdin[i])
            source = str(path)
        assert all("\t" not in a and "\n" not in a for a in args), args
        lines.append("\t".join([source, TOOLS[tool], *args]))
    script, report = work / "script.txt", work / "report.txt"
    script.write_text("\n".join(lines) + "\n")
    done = _java(classes, "ToolRunner", str(script), str(report), timeout=timeout)
    text = report.read_text() if report.exists() else ""
    results = []
    for m in re.finditer(r"=== BEGIN (\d+)\n(.*?)=== END \1 exit=(-?\d+)\n", text, re.S):
        i = int(m.group(1))
        results.append(ToolResult(commands[i], int(m.group(3)), m.group(2)))
    assert len(results) == len(commands), (
        f"ToolRunner ended after {len(results)} of {len(commands)} commands:\n{text}\n"
        f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return results


def run_java_clients(classes: Path, bootstrap: str, prefix: str,
                     timeout: float = 240) -> dict[str, tuple[bool, str]]:
    """step name -> (ok, detail) of tests/jvm/JavaClients.java."""
    return run_java_steps(classes, "JavaClients", bootstrap, prefix, timeout=timeout)


def run_java_steps(classes: Path, main: str, *args: str,
                   timeout: float = 240) -> dict[str, tuple[bool, str]]:
    """step name -> (ok, detail) of a tests/jvm program that prints JavaClients' STEP
    lines, then DONE."""
    done = _java(classes, main, *args, timeout=timeout)
    steps = {}
    for line in done.stdout.splitlines():
        m = re.match(r"STEP (\S+) (OK|FAIL) ?(.*)", line)
        if m:
            steps[m.group(1)] = (m.group(2) == "OK", m.group(3))
    assert "DONE" in done.stdout, f"{main} did not finish:\n{done.stdout}\n{done.stderr[-3000:]}"
    return steps
