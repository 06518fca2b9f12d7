"""What a handler gets: the broker, the request header and the connection."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from txbroker.protocol.acls import CLUSTER_NAME, AclOperation, ResourceType
from txbroker.protocol.messages import (
    RequestHeader,
    ResponseParts,
    api_name,
    response_class,
    response_module,
)

from .security.authorizer import SUPPORTED_OPERATIONS

if TYPE_CHECKING:
    import asyncio

    from txbroker.coordinator.group.coordinator import GroupCoordinator
    from txbroker.coordinator.producer_ids import ProducerIdManager
    from txbroker.coordinator.transaction.coordinator import TransactionCoordinator
    from txbroker.protocol.errors import ErrorCode
    from txbroker.storage.manager import LogManager

    from .config import BrokerConfig
    from .features import FinalizedFeatures
    from .listeners import Listener
    from .security.acl_store import AclStore
    from .security.authorizer import Authorizer
    from .security.scram_credentials import ScramCredentialStore


class CloseConnection(Exception):
    """Raised where Kafka would close the connection instead of answering."""


CLOSE = object()  # a request's answer: close the connection (after earlier answers)


class CloseAfter:
    """An answer after which the connection is closed (a failed authentication)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes | ResponseParts) -> None:
        self.data = data


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
    sasl_server: Any = None  # the mechanism's state machine (broker/security/sasl.py)
    # Set by a handler whose answer must be the connection's last (a failed authentication).
    close_after_response: bool = False
    # A "drop" fault's answer waits on this until the connection ends (request_faults.py).
    held: asyncio.Future | None = None


class DenialLog:
    """Denied requests logged at INFO once per (principal, host, operation, resource) per
    ``interval`` seconds: a client retrying a forbidden request in a loop costs one
    line a minute, not a flood. The memory of what was logged is bounded."""

    MAX_KEYS = 10_000

    def __init__(self, interval: float = 60.0) -> None:
        self.interval = interval
        self._last: dict[tuple, float] = {}
        self.log = logging.getLogger("txbroker.authorizer")

    def denied(self, ctx: RequestContext, op: AclOperation, rtype: ResourceType,
               name: str) -> None:
        s = ctx.session
        key = (s.principal, s.client_host, op, rtype, name)
        now = time.monotonic()
        last = self._last.get(key)
        if last is not None and now - last < self.interval:
            return
        if len(self._last) >= self.MAX_KEYS:
            self._last.clear()
        self._last[key] = now
        self.log.info("Principal = %s is Denied operation = %s from host = %s on resource = "
                      "%s:LITERAL:%s for request = %s (%s; repeats within %ds not logged)",
                      s.principal, op.name, s.client_host, rtype.name, name,
                      api_name(ctx.header.api_key), s.peer, self.interval)


class FaultPoints(Protocol):
    """What handlers use of the broker's faults (request_faults.FaultTable, which imports
    this module): the commit-protocol points."""

    async def hit(self, point: str, **kwargs: Any) -> bool: ...


class RunningBroker(Protocol):
    """The running broker as handlers see it (``ctx.broker``): what they may use of
    broker/server.py's Broker, which has all of it. A Protocol rather than an import of
    Broker: the server imports this module, and the layers have no import circles."""

    config: BrokerConfig
    node_id: int
    logs: LogManager
    groups: GroupCoordinator
    transactions: TransactionCoordinator
    producer_ids: ProducerIdManager
    features: FinalizedFeatures
    faults: FaultPoints
    authorizer: Authorizer | None
    acl_store: AclStore | None
    scram_credentials: ScramCredentialStore | None
    denials: DenialLog
    stopping: asyncio.Event
    fetch_max_bytes: int
    listeners_by_name: dict[str, Listener]

    @property
    def cluster_id(self) -> str: ...

    def advertised_for(self, listener_name: str) -> tuple[str, int]: ...

    def coordinator_status(self, key_type: int) -> ErrorCode: ...

    def check_txn_offset_commit(self, request) -> int: ...


@dataclass(slots=True)
class RequestContext:
    broker: RunningBroker
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

    # --- authorization (Kafka's AuthHelper); everything is allowed without an authorizer

    def authorize(self, op: AclOperation, rtype: ResourceType, name: str, *,
                  log_denied: bool = True) -> bool:
        """May this connection's principal do ``op`` on the resource?"""
        authorizer = self.broker.authorizer
        if authorizer is None:
            return True
        s = self.session
        if authorizer.authorize(s.principal, s.client_host, op, rtype, name):
            return True
        if log_denied:
            self.broker.denials.denied(self, op, rtype, name)
        return False

    def authorize_cluster(self, op: AclOperation, *, log_denied: bool = True) -> bool:
        return self.authorize(op, ResourceType.CLUSTER, CLUSTER_NAME, log_denied=log_denied)

    def authorized(self, op: AclOperation, rtype: ResourceType, names: Iterable[str], *,
                   log_denied: bool = True) -> set[str]:
        """The names (each checked once) on which ``op`` is allowed: Kafka's
        filterByAuthorized."""
        if self.broker.authorizer is None:
            return set(names)
        return {n for n in set(names) if self.authorize(op, rtype, n, log_denied=log_denied)}

    def authorized_operations(self, rtype: ResourceType, name: str) -> int:
        """KIP-430's bit field of the operations allowed on the resource."""
        authorizer = self.broker.authorizer
        if authorizer is None:
            return sum(1 << op for op in SUPPORTED_OPERATIONS[rtype])
        s = self.session
        return authorizer.authorized_operations(s.principal, s.client_host, rtype, name)

    def authorize_by_resource_type(self, op: AclOperation, rtype: ResourceType) -> bool:
        authorizer = self.broker.authorizer
        if authorizer is None:
            return True
        s = self.session
        return authorizer.authorize_by_resource_type(s.principal, s.client_host, op, rtype)

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
