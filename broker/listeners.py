"""The listeners a broker serves, built from its config (``listeners``,
``listener.security.protocol.map``, the per-listener ``ssl.*`` and ``sasl.*`` keys):
each with its TLS context, SASL setup and, once bound, its address."""

from __future__ import annotations

import asyncio
import socket
import ssl
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .config import BrokerConfig, ListenerSpec

if TYPE_CHECKING:
    from .security import sasl as sasl_config
    from .security import tls


@dataclass
class Listener:
    """One served listener: its config, TLS context, SASL setup and bound address."""

    spec: ListenerSpec
    ssl_context: ssl.SSLContext | None = None
    sasl: sasl_config.ListenerSasl | None = None
    principal_mapper: tls.PrincipalMapper | None = None
    server: asyncio.AbstractServer | None = None
    host: str = ""
    port: int = 0

    @property
    def name(self) -> str:
        return self.spec.name

    def advertised(self) -> tuple[str, int]:
        if self.spec.advertised is not None:
            return self.spec.advertised
        host = self.host
        if host in ("0.0.0.0", "::", ""):
            host = socket.gethostname()
        return host, self.port


def build_listeners(config: BrokerConfig) -> list[Listener]:
    """Every served listener with its TLS context and SASL setup; ConfigError (one line)
    for a listener that cannot be set up from its keys."""
    listeners = []
    for spec in config.listener_specs():
        lst = Listener(spec)
        # Imported only for listeners that use them (~25 ms of start-up otherwise).
        if spec.uses_tls:
            from .security import tls

            lst.ssl_context = tls.server_context(config, spec.name)
            lst.principal_mapper = tls.PrincipalMapper(
                config.for_listener(spec.name, "ssl.principal.mapping.rules"))
        if spec.uses_sasl:
            from .security import sasl as sasl_config

            lst.sasl = sasl_config.listener_sasl(config, spec.name)
        listeners.append(lst)
    return listeners
