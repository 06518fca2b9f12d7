"""Shared test helpers: a broker as a real OS process, raw-socket requests."""

from __future__ import annotations

import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Mapping

from protocol.messages import decode_response, encode_request

READY = re.compile(r"ready: listening on (\S+):(\d+)")


class BrokerProcess:
    """``python -m broker serve`` in a child process on an ephemeral port."""

    def __init__(self, data_dir: str, overrides: Mapping[str, str] | None = None,
                 port: int = 0) -> None:
        self.data_dir = data_dir
        self.overrides = dict(overrides or {})
        self.requested_port = port
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.host = "127.0.0.1"
        self.output: list[str] = []
        self._reader: threading.Thread | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 30) -> BrokerProcess:
        cmd = [sys.executable, "-m", "broker", "serve", "--host", "127.0.0.1",
               "--port", str(self.requested_port), "--data-dir", self.data_dir]
        for k, v in self.overrides.items():
            cmd += ["--override", f"{k}={v}"]
        env = dict(os.environ)
        env.pop("PYTHONWARNINGS", None)
        self.output = []
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, env=env)
        ready = threading.Event()

        def pump() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                self.output.append(line)
                m = READY.search(line)
                if m:
                    self.port = int(m.group(2))
                    ready.set()

        self._reader = threading.Thread(target=pump, daemon=True)
        self._reader.start()
        if not ready.wait(timeout):
            self.kill()
            raise RuntimeError("broker did not become ready:\n" + "".join(self.output))
        # Later restarts reuse the same port so clients can reconnect.
        self.requested_port = self.port
        return self

    def terminate(self, timeout: float = 30) -> int:
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

    def log_text(self) -> str:
        return "".join(self.output)

    def __enter__(self) -> BrokerProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.terminate()


class RawClient:
    """A minimal blocking Kafka client for wire-level tests."""

    def __init__(self, host: str, port: int, timeout: float = 10) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.correlation_id = 0

    def send_frame(self, payload: bytes) -> None:
        self.sock.sendall(payload)

    def recv_frame(self) -> bytes | None:
        """One response body (without size prefix), or None if the broker closed."""
        head = self._recv_exact(4)
        if head is None:
            return None
        (size,) = struct.unpack(">i", head)
        return self._recv_exact(size)

    def _recv_exact(self, n: int) -> bytes | None:
        buf = bytearray()
        while len(buf) < n:
            try:
                chunk = self.sock.recv(n - len(buf))
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            buf += chunk
        return bytes(buf)

    def request(self, api_key: int, version: int, message, client_id: str | None = "raw"):
        """Send a kio message and decode the response (None if the connection closed)."""
        self.correlation_id += 1
        cid = self.correlation_id
        self.send_frame(encode_request(api_key, version, cid, client_id, message))
        frame = self.recv_frame()
        if frame is None:
            return None
        got, response = decode_response(api_key, version, frame)
        assert got == cid, f"correlation id {got} != {cid}"
        return response

    def is_closed(self, timeout: float = 5) -> bool:
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(1)
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False
        return data == b""

    def close(self) -> None:
        self.sock.close()


def wait_until(predicate, timeout: float = 10, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
