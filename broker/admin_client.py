"""A minimal blocking Kafka client for the command line's admin commands
(``txbroker transactions ...``). It speaks the same wire protocol as any client,
so the commands also work against Apache Kafka brokers that serve these APIs.
TLS and SASL come from protocol/client_security.py (``--command-config``)."""

from __future__ import annotations

import struct
from typing import Any

from txbroker.protocol.client_security import ClientSecurity
from txbroker.protocol.messages import decode_response, encode_request


class AdminConnection:
    def __init__(self, bootstrap: str, timeout: float = 30,
                 security: ClientSecurity | None = None) -> None:
        """Connect to ``host:port``; with ``security``, TLS and SASL are done here
        (SecurityError when they fail)."""
        self.address = bootstrap
        self.timeout = timeout
        self.security = security or ClientSecurity()
        host, _, port = bootstrap.rpartition(":")
        self.sock = self.security.connect(host.strip("[]") or "127.0.0.1", int(port), timeout,
                                          "txbroker-cli")
        self._correlation = 0

    def request(self, api_key: int, version: int, message: Any) -> Any:
        self._correlation += 1
        self.sock.sendall(encode_request(api_key, version, self._correlation, "txbroker-cli",
                                         message))
        (size,) = struct.unpack(">i", self._recv(4))
        correlation, response = decode_response(api_key, version, self._recv(size))
        if correlation != self._correlation:
            raise RuntimeError(f"correlation id {correlation} != {self._correlation}")
        return response

    def request_frame(self, api_key: int, version: int, message: Any) -> bytes:
        """Send a request; the response frame undecoded (after the correlation id)."""
        self._correlation += 1
        self.sock.sendall(encode_request(api_key, version, self._correlation, "txbroker-cli",
                                         message))
        (size,) = struct.unpack(">i", self._recv(4))
        frame = self._recv(size)
        (correlation,) = struct.unpack_from(">i", frame, 0)
        if correlation != self._correlation:
            raise RuntimeError(f"correlation id {correlation} != {self._correlation}")
        return frame[4:]

    def _recv(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> AdminConnection:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
