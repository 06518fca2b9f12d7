"""A minimal blocking Kafka client for the command line's admin commands
(``txbroker transactions ...``), and the connection every tool bootstraps from its
``--bootstrap-server`` and ``--command-config``. It speaks the same wire protocol as
any client, so the commands also work against Apache Kafka brokers that serve these
APIs. TLS and SASL come from protocol/client_security.py (``--command-config``)."""

from __future__ import annotations

import struct
import sys
from typing import Any

from txbroker.protocol.client_security import (
    SECURITY_KEYS,
    ClientSecurity,
    SecurityConfigError,
    SecurityError,
)
from txbroker.protocol.messages import decode_response, encode_request
from txbroker.protocol.properties import parse_properties


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


COMMAND_CONFIG_HELP = (
    "client properties, as for Kafka's tools: bootstrap.servers, request.timeout.ms and "
    "the security settings (security.protocol, sasl.mechanism, sasl.jaas.config, ssl.*; "
    "docs/security.md) are used, other keys are ignored (with a note)")

_USED_CLIENT_KEYS = frozenset({"bootstrap.servers", "request.timeout.ms"}) | SECURITY_KEYS


def _client_settings(args) -> tuple[list[str], float, ClientSecurity] | str:
    """(bootstrap addresses, timeout in seconds, security settings) from the options and
    --command-config, or an error message."""
    props: dict[str, str] = {}
    if args.command_config:
        try:
            with open(args.command_config) as f:
                props = parse_properties(f.read())
        except OSError as e:
            return f"cannot read --command-config {args.command_config}: {e}"
    try:
        security = ClientSecurity.from_properties(props, source=args.command_config or "")
    except SecurityConfigError as e:
        return str(e)
    try:
        timeout = int(props.get("request.timeout.ms", "30000")) / 1000
    except ValueError:
        return f"request.timeout.ms in {args.command_config} is not a number"
    ignored = sorted(set(props) - _USED_CLIENT_KEYS)
    if ignored:
        print(f"note: ignoring {', '.join(ignored)} from {args.command_config}",
              file=sys.stderr)
    servers = args.bootstrap_server or props.get("bootstrap.servers") or "127.0.0.1:9092"
    return [s.strip() for s in servers.split(",") if s.strip()], timeout, security


def bootstrap_connection(args) -> AdminConnection | None:
    """A connection to the first of --bootstrap-server (or --command-config's
    bootstrap.servers) that answers, as a Kafka client bootstraps, authenticated as
    --command-config says; None after printing the one-line error. A TLS or SASL
    failure is not tried on the next server: the same settings fail the same way."""
    settings = _client_settings(args)
    if isinstance(settings, str):
        print(f"error: {settings}", file=sys.stderr)
        return None
    servers, timeout, security = settings
    failures = []
    for server in servers:
        try:
            return AdminConnection(server, timeout, security)
        except SecurityError as e:
            print(f"error: {e}", file=sys.stderr)
            return None
        except (OSError, ValueError) as e:
            failures.append(f"{server}: {e}")
    print(f"error: cannot reach {'; '.join(failures)}", file=sys.stderr)
    return None
