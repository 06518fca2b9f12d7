"""What a handler gets: the broker, the request header and the connection."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from txbroker.protocol.messages import RequestHeader, response_class, response_module

if TYPE_CHECKING:
    from .server import Broker


class CloseConnection(Exception):
    """Raised where Kafka would close the connection instead of answering."""


ANONYMOUS = "User:ANONYMOUS"


@dataclass(slots=True)
class Session:
    """Who is on a connection, as Kafka's RequestContext/Session knows it: the
    authenticated principal (``User:<name>``, KafkaPrincipal's string form), the
    client's address, and the listener it came in on. PLAINTEXT connections are
    ``User:ANONYMOUS``, as in Kafka."""

    peer: str  # "host:port", for log lines
    client_host: str  # the host part alone, which ACLs match
    principal: str = ANONYMOUS
    listener_name: str = "PLAINTEXT"
    security_protocol: str = "PLAINTEXT"
    authenticated: bool = True  # False on a SASL listener until SaslAuthenticate succeeds
    # SASL progress on a SASL listener, as Kafka's SaslServerAuthenticator: "handshake"
    # (ApiVersions or SaslHandshake expected), "authenticate" (SaslAuthenticate expected),
    # "raw" (SaslHandshake v0: bare tokens follow), "complete".
    sasl_state: str = "complete"
    sasl_mechanism: str | None = None
    sasl_server: Any = None  # the mechanism's state machine (broker/sasl.py)
    # Set by a handler whose answer must be the connection's last (a failed authentication).
    close_after_response: bool = False


@dataclass(slots=True)
class RequestContext:
    broker: Broker
    header: RequestHeader
    session: Session
    # Error codes of the response, set by a handler that encodes its own bytes (or knows
    # there are none); None: the broker finds them in the response (broker/metrics.py).
    error_codes: list[int] | tuple[()] | None = None

    @property
    def peer(self) -> str:
        return self.session.peer

    @property
    def principal(self) -> str:
        return self.session.principal

    @property
    def version(self) -> int:
        return self.header.api_version

    @property
    def response_type(self) -> type:
        return response_class(self.header.api_key, self.header.api_version)

    @property
    def schema(self) -> Any:
        """kio's response module of this version, for nested response classes."""
        return response_module(self.header.api_key, self.header.api_version)
