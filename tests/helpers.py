"""Shared test helpers: raw-socket requests, polling; BrokerProcess lives in txbroker.testing."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Mapping

from txbroker.client.security import ClientSecurity
from txbroker.protocol.messages import decode_response, encode_request
from txbroker.testing import BrokerProcess
from txbroker.testing.broker_process import READY

__all__ = ["READY", "BrokerProcess", "RawClient", "wait_until"]


class RawClient:
    """A minimal blocking Kafka client for wire-level tests."""

    def __init__(self, host: str, port: int, timeout: float = 10,
                 security: Mapping[str, str] | None = None) -> None:
        """``security``: client properties (Kafka's or librdkafka's names, e.g. a secured
        BrokerThread's ``client_config(listener, user)``): TLS and SASL are done first,
        so the requests act as that principal."""
        if security is None:
            self.sock = socket.create_connection((host, port), timeout=timeout)
        else:
            props = {k: v for k, v in security.items() if k != "bootstrap.servers"}
            self.sock = ClientSecurity.from_properties(props).connect(host, port, timeout)
        self.correlation_id = 0

    @classmethod
    def as_user(cls, broker, listener: str, user: str, timeout: float = 10) -> RawClient:
        """Connected to a secured test broker's ``listener``, authenticated as ``user``."""
        host, port = broker.bootstrap_for(listener).rsplit(":", 1)
        return cls(host, int(port), timeout, broker.client_config(listener, user))

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
