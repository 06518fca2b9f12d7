"""A minimal blocking Kafka client for the command line's admin commands
(``txbroker transactions ...``), and the connection every tool bootstraps from its
``--bootstrap-server`` and ``--command-config``. It speaks the same wire protocol as
any client, so the commands also work against Apache Kafka brokers that serve these
APIs. TLS and SASL come from client/security.py (``--command-config``)."""

from __future__ import annotations

import sys

from txbroker.client.connection import BlockingConnection
from txbroker.client.security import (
    SECURITY_KEYS,
    ClientSecurity,
    SecurityConfigError,
    SecurityError,
)
from txbroker.protocol.properties import parse_properties


class AdminConnection(BlockingConnection):
    """The tools' connection: to ``host:port`` as the command line gives it, as the
    ``txbroker-cli`` client id."""

    def __init__(self, bootstrap: str, timeout: float = 30,
                 security: ClientSecurity | None = None) -> None:
        host, _, port = bootstrap.rpartition(":")
        super().__init__(host.strip("[]") or "127.0.0.1", int(port), timeout, "txbroker-cli",
                         security)
        self.address = bootstrap


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
