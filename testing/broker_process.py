"""The broker as a real OS process (``python -m txbroker serve``) on an ephemeral port.

Used by ``make demo`` (``spark_jobs/demo.py``, ``testing/demo.py``) and by the tests
that need a broker they can SIGTERM or SIGKILL::

    with BrokerProcess("/tmp/data") as broker:
        producer = Producer({"bootstrap.servers": broker.bootstrap})

The child's output is collected by a thread; ``start`` returns once the broker has
logged ``ready: listening on host:port`` (the port it bound when asked for port 0).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence

from .faults import HttpFaults
from .security import SecuredBrokerAccess, SecuritySetup

READY = re.compile(r"ready: listening on (\S+):(\d+)")
LISTENER = re.compile(r"listener (\S+) \((\S+)\) on (\S+):(\d+)")
ADMIN_HTTP = re.compile(r"admin HTTP on (https?)://(\S+):(\d+) ")


class BrokerProcess(SecuredBrokerAccess):
    """``python -m txbroker serve`` in a child process; restarts reuse the first port."""

    def __init__(self, data_dir: str, overrides: Mapping[str, str] | None = None,
                 port: int = 0, *, listeners: Sequence[str] | Mapping[str, str] | None = None,
                 users: Mapping[str, str] | None = None, **security) -> None:
        """``listeners``/``users``/``security``: a secured broker, as BrokerThread's."""
        self.data_dir = data_dir
        self.overrides = dict(overrides or {})
        self.security = (SecuritySetup(data_dir, listeners, users, **security)
                         if listeners is not None else None)
        self.ports: dict[str, int] = {}  # listener name -> bound port
        self.requested_port = port
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.host = "127.0.0.1"
        self.output: list[str] = []
        # The admin endpoint's base URL (the console is at its /), with admin.http.port set.
        self.admin_url: str | None = None
        self._reader: threading.Thread | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def bootstrap_for(self, listener: str) -> str:
        return f"{self.host}:{self.ports[listener]}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 30) -> BrokerProcess:
        cmd = [sys.executable, "-m", "txbroker", "serve", "--host", "127.0.0.1",
               "--port", str(self.requested_port), "--data-dir", self.data_dir]
        overrides = dict(self.overrides)
        if self.security is not None:
            self.security.prepare_data_dir()
            overrides = {**self.security.overrides(self.ports), **overrides}
        for k, v in overrides.items():
            cmd += ["--override", f"{k}={v}"]
        env = dict(os.environ)
        # pytest's -W settings would turn the child's harmless warnings into noise.
        env.pop("PYTHONWARNINGS", None)
        self.output = []
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, env=env)
        ready = threading.Event()

        def pump() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                self.output.append(line)
                admin = ADMIN_HTTP.search(line)
                if admin:
                    self.admin_url = f"{admin.group(1)}://{admin.group(2)}:{admin.group(3)}"
                m = READY.search(line)
                if m:
                    self.port = int(m.group(2))
                    self.ports = {name: int(port) for name, _p, _h, port in LISTENER.findall(line)}
                    ready.set()

        self._reader = threading.Thread(target=pump, daemon=True)
        self._reader.start()
        if not ready.wait(timeout):
            self.kill()
            raise RuntimeError("broker did not become ready:\n" + "".join(self.output))
        # Later restarts reuse the same port so clients can reconnect.
        self.requested_port = self.port
        return self

    def wait(self, timeout: float = 30) -> int:
        """Wait for the process to exit on its own (a crash fault, say) and for its
        output to be read to the end; its exit code."""
        assert self.proc is not None
        rc = self.proc.wait(timeout)
        if self._reader:
            self._reader.join(5)  # the last lines may still be in the pipe
        return rc

    def terminate(self, timeout: float = 30) -> int:
        """SIGTERM (a clean shutdown: in-flight requests answered, logs flushed); exit code."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout)
        if self._reader:
            self._reader.join(5)
        return rc

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)
        if self._reader:
            self._reader.join(5)

    @property
    def faults(self) -> HttpFaults:
        """Install faults through the admin endpoint (docs/fault-injection.md); the broker
        needs ``admin.http.port`` (0: any free port), and the token of
        ``admin.http.auth.token.file`` is sent when that is set."""
        if self.admin_url is None:
            raise RuntimeError("faults on a broker process go through its admin endpoint: "
                               "start it with the override admin.http.port=0")
        token = None
        path = self.overrides.get("admin.http.auth.token.file")
        if path:
            with open(path) as f:
                token = f.read().strip()
        return HttpFaults(self.admin_url, token)

    def log_text(self) -> str:
        return "".join(self.output)

    def __enter__(self) -> BrokerProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        if self.running:
            self.terminate()
