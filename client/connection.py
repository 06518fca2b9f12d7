"""One blocking connection to one broker: connect (TLS and SASL by ``ClientSecurity``),
send a request, read its response, strictly in order. The tools' admin connection and
the Spark data source's wire client are built on it; message bodies are encoded and
decoded by ``protocol`` (kio). Not thread-safe: one user at a time.
"""

from __future__ import annotations

import struct
from typing import Any

from txbroker.protocol.messages import decode_response, encode_request

from .security import ClientSecurity

_SIZE = struct.Struct(">i")


class BlockingConnection:
    def __init__(self, host: str, port: int, timeout: float, client_id: str,
                 security: ClientSecurity | None = None) -> None:
        """Connect to ``host:port``; with ``security``, TLS and SASL are done here
        (``SecurityError`` when they fail, an ``OSError`` when the socket does)."""
        self.address = f"{host}:{port}"
        self.client_id = client_id
        self.timeout = timeout
        self.security = security or ClientSecurity()
        self._correlation = 0
        self.sock = self.security.connect(host, port, timeout, client_id)

    def _send(self, api_key: int, version: int, message: Any, timeout: float | None) -> int:
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF  # an int32 that wraps
        cid = self._correlation
        self.sock.settimeout(timeout or self.timeout)
        self.sock.sendall(encode_request(api_key, version, cid, self.client_id, message))
        return cid

    def request(self, api_key: int, version: int, message: Any,
                timeout: float | None = None) -> Any:
        """Send a request and return its decoded response."""
        cid = self._send(api_key, version, message, timeout)
        (size,) = _SIZE.unpack(self._recv_exact(4))
        got, response = decode_response(api_key, version, self._recv_exact(size))
        if got != cid:
            raise ConnectionError(f"correlation id {got} in reply to request {cid}")
        return response

    def request_frame(self, api_key: int, version: int, message: Any,
                      timeout: float | None = None) -> bytes:
        """Send a request; the response frame undecoded (after the correlation id)."""
        cid = self._send(api_key, version, message, timeout)
        (size,) = _SIZE.unpack(self._recv_exact(4))
        frame = self._recv_exact(size)
        (got,) = _SIZE.unpack_from(frame, 0)
        if got != cid:
            raise ConnectionError(f"correlation id {got} in reply to request {cid}")
        return bytes(frame[4:])

    def _recv_exact(self, n: int) -> memoryview:
        # Read-only view of the buffer received into, not a bytes copy of it (megabytes
        # per Fetch); kio copies the fields it returns, so no view outlives the call.
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = self.sock.recv_into(view[got:], n - got)
            if k == 0:
                raise ConnectionError("connection closed by the broker")
            got += k
        return memoryview(buf).toreadonly()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self) -> BlockingConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
