"""The asyncio server: listeners, request routing, lifecycle (start, stop, crash).

Connections (framing, ordering, backpressure) are in connection.py. A request that
cannot be parsed closes that connection only, with a log line, as Kafka does; no
other connection notices.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
import ssl
import time
from typing import TYPE_CHECKING

from txbroker.coordinator.group.consumer_state import ConsumerGroupConfig
from txbroker.coordinator.group.coordinator import GroupCoordinator, GroupCoordinatorConfig
from txbroker.coordinator.group.state import GroupConfig
from txbroker.coordinator.producer_ids import ProducerIdManager
from txbroker.coordinator.streams.config import StreamsGroupConfig
from txbroker.coordinator.transaction.coordinator import (
    TransactionCoordinator,
    TxnCoordinatorConfig,
)
from txbroker.coordinator.transaction.faults import FaultInjector
from txbroker.coordinator.transaction.state import TxnConfig
from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import (
    API_VERSIONS_KEY,
    api_name,
    decode_request,
    encode_response,
    parse_correlation_id,
    parse_request_header,
    preload_schemas,
)
from txbroker.protocol.primitives import DecodeError
from txbroker.storage.manager import LogManager

from .config import BrokerConfig, ConfigError, StartupError
from .connection import (
    HEAP_TRIM_INTERVAL_S,
    Connection,
    RequestMemory,
    return_large_buffers_to_the_os,
    trim_free_heap,
)
from .context import (
    ANONYMOUS,
    CLOSE,
    CloseAfter,
    CloseConnection,
    DenialLog,
    RequestContext,
    Session,
)
from .features import SHARE_VERSION, TRANSACTION_VERSION, FinalizedFeatures
from .handlers import HANDLERS, accepts, api_versions, supported_versions
from .listeners import Listener, build_listeners
from .metrics import BrokerMetrics
from .request_faults import FaultTable
from .security.authorizer import Authorizer, parse_super_users
from .share_config import (
    check_share_config,
    share_coordinator_config,
    share_group_config_defaults,
    share_group_config_limits,
)

if TYPE_CHECKING:
    from txbroker.coordinator.share.coordinator import ShareCoordinator

    from .security.acl_store import AclStore

log = logging.getLogger("txbroker")

# At shutdown, how long computed answers may take to reach clients that read them.
SHUTDOWN_FLUSH_S = 1.0
SASL_HANDSHAKE_KEY = 17
SASL_AUTHENTICATE_KEY = 36
# A TLS handshake not done in this time is dropped: half-open handshakes cannot pile up.
TLS_HANDSHAKE_TIMEOUT_S = 10.0



class _TlsServer:
    """The accepting side of a TLS listener. Each accepted socket goes to
    loop.connect_accepted_socket with the listener's SSLContext: the handshake sees every
    byte from the first (no StreamReader read it before TLS did), is bounded in time,
    and its failure is seen here, where the peer is known, for the log line."""

    def __init__(self, broker: Broker, listener: Listener, sock: socket.socket) -> None:
        self.broker = broker
        self.listener = listener
        self.sockets = [sock]
        self._accepting = asyncio.ensure_future(self._accept_loop())
        self._handshakes: set[asyncio.Task] = set()

    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        sock = self.sockets[0]
        while True:
            try:
                conn, _addr = await loop.sock_accept(sock)
            except OSError as e:  # EMFILE and the like: as asyncio's own servers do, go on
                log.warning("listener %s: accept failed: %s", self.listener.name, e)
                await asyncio.sleep(0.1)
                continue
            task = asyncio.ensure_future(self.broker.accept_tls(self.listener, conn))
            self._handshakes.add(task)
            task.add_done_callback(self._handshakes.discard)

    def close(self) -> None:
        self._accepting.cancel()
        for task in list(self._handshakes):
            if not task.done():
                task.cancel()
        self.sockets[0].close()

    async def wait_closed(self) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            await self._accepting


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


# APIs whose schemas are imported first once the broker is idle: what clients send
# first (Metadata, FindCoordinator, InitProducerId, Produce, AddPartitionsToTxn, EndTxn).
# ApiVersions' own are imported before "ready".
FIRST_APIS = frozenset({3, 10, 22, 0, 24, 26})
# The background import waits for this long without a request before each schema.
PRELOAD_IDLE_S = 0.05


async def _preload_when_idle(broker: Broker, first: list[tuple[int, int, int]],
                             later: list[tuple[int, int, int]],
                             after: asyncio.Task | None) -> None:
    """Import kio's schemas in the background (a few ms each, ~0.7 s in all), one
    version at a time and only while no request arrived for PRELOAD_IDLE_S: under load
    right after "ready" this costs the clients nothing (it was 18% of the loop's time
    while it ran between requests). A request whose schema is not imported yet imports
    its own version on demand (request_class), once. ``first`` first, newest versions
    first (what current clients send); the ``later`` ones after ``after`` (the
    transaction coordinator's load)."""
    async def idle() -> None:
        while True:
            seen = broker.requests_received
            await asyncio.sleep(PRELOAD_IDLE_S)
            if broker.requests_received == seen:
                return

    async def preload(ranges: list[tuple[int, int, int]]) -> None:
        for api_key, low, high in ranges:
            await idle()
            HANDLERS[api_key]  # imports the handler module
            for version in range(high, low - 1, -1):
                await idle()
                preload_schemas([(api_key, version, version)])

    await preload(first)
    await idle()
    _ = broker.shares  # the share coordinator's modules (JoinGroup, OffsetCommit ask it)
    if after is not None:
        await asyncio.wait([after])
    await preload(later)


class Broker:
    """One broker: the data directory, the listener and the request handlers."""

    @property
    def shares(self) -> ShareCoordinator:
        """The share coordinator (KIP-932), built on first use: its imports are not part
        of the start-up (the fixture's first start measured 0.116 -> 0.130 s with them)."""
        if self._shares is None:
            from txbroker.coordinator.share.coordinator import ShareCoordinator

            # Per-group configs (the dead-letter topic) and share.version are asked at
            # each use: both change while the broker runs.
            self._shares = ShareCoordinator(
                self.logs, share_coordinator_config(self.config),
                group_config=lambda group_id, name: self.groups.group_configs.value(group_id, name),
                share_version=lambda: self.features.level(SHARE_VERSION))
        return self._shares

    @property
    def shares_if_built(self) -> ShareCoordinator | None:
        """The share coordinator if something built it, else None: what /metrics and the
        console read, so that rendering them never builds it."""
        return self._shares

    @property
    def transaction_version(self) -> int:
        """The finalized transaction.version level (what ApiVersions advertises)."""
        return self.features.level(TRANSACTION_VERSION)

    @property
    def features_epoch(self) -> int:
        """ApiVersions' finalized_features_epoch."""
        return self.features.epoch

    def __init__(self, config: BrokerConfig, *, in_process: bool = False) -> None:
        self.config = config
        self.in_process = in_process  # a crash fault then tears down instead of exiting
        self.crashed = False
        self.requests_received = 0  # request frames dispatched (the preload waits for a lull)
        self.node_id: int = config.get("node.id")
        self.logs = LogManager(
            config.data_dir,
            config.topic_defaults(),
            node_id=self.node_id,
            retention_check_interval_ms=config.get("log.retention.check.interval.ms"),
            cleaner_backoff_ms=config.get("log.cleaner.backoff.ms"),
            producer_id_expiration_ms=config.get("producer.id.expiration.ms"),
        )
        self.producer_ids = ProducerIdManager(self.logs.data_dir)
        self.groups = GroupCoordinator(self.logs, GroupCoordinatorConfig(
            offsets_topic_partitions=config.get("offsets.topic.num.partitions"),
            offsets_topic_segment_bytes=config.get("offsets.topic.segment.bytes"),
            offsets_retention_ms=config.get("offsets.retention.minutes") * 60_000,
            offsets_retention_check_interval_ms=config.get("offsets.retention.check.interval.ms"),
            offset_metadata_max_bytes=config.get("offset.metadata.max.bytes"),
            group=GroupConfig(
                min_session_timeout_ms=config.get("group.min.session.timeout.ms"),
                max_session_timeout_ms=config.get("group.max.session.timeout.ms"),
                initial_rebalance_delay_ms=config.get("group.initial.rebalance.delay.ms"),
                max_size=config.get("group.max.size"),
            ),
            consumer=_consumer_group_config(config),
            streams=StreamsGroupConfig(
                session_timeout_ms=config.get("group.streams.session.timeout.ms"),
                heartbeat_interval_ms=config.get("group.streams.heartbeat.interval.ms"),
                num_standby_replicas=config.get("group.streams.num.standby.replicas"),
                max_size=config.get("group.streams.max.size"),
                task_offset_interval_ms=config.get("group.streams.task.offset.interval.ms"),
                initial_rebalance_delay_ms=config.get(
                    "group.streams.initial.rebalance.delay.ms"),
                assignment_interval_ms=config.get("group.streams.assignment.interval.ms")),
            group_config_limits=share_group_config_limits(config),
            group_config_defaults=share_group_config_defaults(config),
        ))
        injector = FaultInjector(self.crash)
        injector.arm_from_config(config.get("txbroker.fault.points"))
        # Request, connection and commit-protocol faults (request_faults.py). fault_apis
        # is its index by API key: empty, it costs a request one truth test.
        self.faults = FaultTable(injector, topic_names=lambda: {
            info.topic_id: name for name, info in self.logs.topics.items()}, crash=self.crash,
            fsync_faults=self.logs.flusher.fsync_faults)
        self.fault_apis = self.faults.by_api
        self.hang = self.faults.hang  # a broker hang fault: hang.on holds every request
        if config.get("txbroker.faults"):
            from .fault_spec import load_fault_specs

            self.faults.add_json(load_fault_specs(config.get("txbroker.faults")))
        self.transactions = TransactionCoordinator(
            self.logs, self.groups, self.producer_ids, TxnCoordinatorConfig(
                state_log_partitions=config.get("transaction.state.log.num.partitions"),
                state_log_segment_bytes=config.get("transaction.state.log.segment.bytes"),
                txn=TxnConfig(
                    transaction_max_timeout_ms=config.get("transaction.max.timeout.ms"),
                    transactional_id_expiration_ms=config.get("transactional.id.expiration.ms"),
                    abort_timed_out_check_interval_ms=config.get(
                        "transaction.abort.timed.out.transaction.cleanup.interval.ms"),
                    remove_expired_check_interval_ms=config.get(
                        "transaction.remove.expired.transaction.cleanup.interval.ms"),
                )), injector)
        # The finalized feature levels (ApiVersions, UpdateFeatures): the configured
        # transaction.version until an UpdateFeatures stored another in the data dir.
        try:
            self.features = FinalizedFeatures(self.logs.data_dir,
                                              config.get("txbroker.transaction.version"),
                                              config.get("txbroker.share.version"),
                                              config.get("txbroker.streams.version"))
        except ValueError as e:
            raise StartupError(str(e)) from None
        # Share groups (KIP-932): served only while share.version is 1 (handlers/_share.py).
        # The coordinator is built on first use (``shares``); its keys are checked now.
        check_share_config(config)
        self._shares: ShareCoordinator | None = None
        self.shutdown_timeout = config.get("shutdown.timeout.ms") / 1000
        queued_bytes = config.get("queued.max.request.bytes")
        if 0 <= queued_bytes < config.get("socket.request.max.bytes"):
            # As Kafka requires: else one allowed request could never be read.
            raise ConfigError(f"queued.max.request.bytes={queued_bytes} must be -1 or at least "
                              f"socket.request.max.bytes={config.get('socket.request.max.bytes')}")
        self.request_memory = RequestMemory(queued_bytes)
        self.listeners = build_listeners(config)
        self.listeners_by_name = {lst.name: lst for lst in self.listeners}
        self.primary_listener = next(
            (lst for lst in self.listeners if lst.spec.security_protocol == "PLAINTEXT"),
            self.listeners[0])
        self.scram_credentials = None  # ScramCredentialStore, once the data dir is open
        self.fetch_max_bytes: int = config.get("fetch.max.bytes")  # read once: hot path
        self._server: asyncio.AbstractServer | None = None
        self._connections: set[Connection] = set()
        self._reaper: asyncio.Task | None = None
        self.stopping = asyncio.Event()
        self.host = ""
        self.port = 0
        self.started_at = 0.0
        self.request_counts: dict[str, int] = {}
        self.metrics = BrokerMetrics()
        self.logs.flusher.on_round = self.metrics.observe_flush
        self.admin_http = None
        self._teardown: asyncio.Future | None = None  # after a crash fault (in-process)
        # ACLs (broker/security/authorizer.py): None without authorizer.class.name, and then every
        # check in the handlers is one attribute test.
        self.authorizer: Authorizer | None = None
        self.acl_store: AclStore | None = None
        if config.get("authorizer.class.name"):
            from .security.acl_store import AclStore  # (not imported by brokers without ACLs)

            self.authorizer = Authorizer(parse_super_users(config.get("super.users")),
                                         config.get("allow.everyone.if.no.acl.found"))
            self.acl_store = AclStore(self.logs.data_dir, self.authorizer)
        self.denials = DenialLog()
        self._preload: asyncio.Task | None = None  # kio schemas imported after "ready"

    def coordinator_status(self, key_type: int) -> ErrorCode:
        """FindCoordinator's answer for a key type: 0 group, 1 transaction. Like Kafka it
        names the coordinator even while it loads; the group and transaction requests
        themselves answer COORDINATOR_LOAD_IN_PROGRESS until loading is done."""
        if key_type == 0:
            self.groups.ensure_offsets_topic()
        else:
            self.transactions.ensure_topic()
        return ErrorCode.none

    def check_txn_offset_commit(self, request) -> int:
        """TxnOffsetCommit: is the group's offsets partition in the producer's transaction?"""
        return self.transactions.check_txn_offset_commit(
            request.transactional_id, request.producer_id, request.producer_epoch,
            request.group_id, api_version=self._version_of(request))

    @staticmethod
    def _version_of(request) -> int:
        return int(type(request).__version__)

    def crash(self, point: str, power_loss: bool = False, torn_seed: int | None = None) -> None:
        """A fault point's crash: a broker process dies at once (exit 137, like SIGKILL);
        an in-process test broker drops its connections and files without flushing.
        ``power_loss``: what was not fsynced is lost too (every partition log is cut
        back to its flushed offset as of now) — a power failure rather than a kill.
        ``torn_seed`` (with ``power_loss``): the disk tears the unsynced writes instead
        (random pages persist, checkpoints and snapshots may be half-written; see
        ``LogManager.abandon``)."""
        if self.crashed:
            return
        log.error("fault injection: crashing at %s%s", point,
                  " (power loss)" if power_loss else "")
        if not self.in_process:
            if power_loss:
                self.logs.abandon(power_loss=True, torn_seed=torn_seed)
            os._exit(137)
        self.crashed = True
        self.stopping.set()
        self._close_servers()
        if self._reaper is not None:
            self._reaper.cancel()
        for conn in list(self._connections):
            conn.writer.transport.abort()
            conn.stop_reading()
        # The power goes now: whatever is fsynced by the time of the teardown below
        # was not when it went.
        durable = self.logs.flushed_offsets() if power_loss else None
        self._teardown = asyncio.ensure_future(self._crash_teardown(durable, torn_seed))

    async def _crash_teardown(self, durable: dict | None, torn_seed: int | None = None) -> None:
        await self.transactions.stop()
        await self.groups.stop()
        if self._shares is not None:
            await self._shares.stop()
        if self.admin_http is not None:
            await self.admin_http.stop()
        self.logs.abandon(power_loss=durable is not None, durable=durable, torn_seed=torn_seed)

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    @property
    def cluster_id(self) -> str:
        return self.logs.cluster_id

    @property
    def advertised_host_port(self) -> tuple[str, int]:
        """What the primary listener advertises."""
        return self.primary_listener.advertised()

    def advertised_for(self, listener_name: str) -> tuple[str, int]:
        """The advertised endpoint of the listener a client came in through: Metadata,
        FindCoordinator and DescribeCluster answer with it, as Kafka does."""
        lst = self.listeners_by_name.get(listener_name, self.primary_listener)
        return lst.advertised()

    async def start(self) -> None:
        self.stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        if self.config.get("admin.http.port") >= 0:
            from .admin_http import AdminHttpServer

            # Built first: its TLS and token settings are checked before anything opens.
            self.admin_http = AdminHttpServer(self, self.config.get("admin.http.host"),
                                              self.config.get("admin.http.port"))
        return_large_buffers_to_the_os()
        # kio's schemas take ~0.7 s to import, all of them: only ApiVersions' are loaded
        # before "ready" (while the logs open in a worker thread); the rest after it, a
        # version at a time while the broker is idle (_preload_when_idle). After a crash,
        # start-up is the outage.
        opening = loop.run_in_executor(None, self._open_data_dir)
        preload_schemas([v for v in supported_versions() if v[0] == API_VERSIONS_KEY])
        await opening
        if self.authorizer is not None:
            from .security.acl_store import AclStoreError, load_acls

            try:
                acls = load_acls(self.logs.data_dir)
            except AclStoreError as e:
                raise StartupError(str(e)) from None
            for acl in acls:
                self.authorizer.add(acl)
            log.info("authorizer on: %d ACL(s) loaded, super.users %s, "
                     "allow.everyone.if.no.acl.found=%s", len(acls),
                     ";".join(sorted(self.authorizer.super_users)) or "(none)",
                     str(self.authorizer.allow_if_no_acl).lower())
        await self.logs.start()
        await self.groups.start()
        await self.transactions.start()
        from .security.scram_credentials import ScramCredentialStore

        self.scram_credentials = await loop.run_in_executor(
            None, ScramCredentialStore, self.logs.data_dir)
        for lst in self.listeners:
            host, port = lst.spec.host, lst.spec.port
            try:
                if lst.ssl_context is None:
                    lst.server = await asyncio.start_server(
                        functools.partial(self._on_connection, lst), host, port,
                        reuse_address=True, limit=1 << 20, backlog=512)
                else:
                    sock = socket.create_server((host, port), backlog=512,
                                                family=_family(host), reuse_port=False)
                    sock.setblocking(False)
                    lst.server = _TlsServer(self, lst, sock)  # type: ignore[assignment]
            except OSError as e:
                for other in self.listeners:
                    if other.server is not None:
                        other.server.close()
                raise StartupError(f"cannot listen on {host}:{port} (listener {lst.name}, "
                                   f"listeners, {self.config.source('listeners')}): "
                                   f"{e.strerror or e}") from e
            lst.host, lst.port = lst.server.sockets[0].getsockname()[:2]
        self._server = self.primary_listener.server
        self.host, self.port = self.primary_listener.host, self.primary_listener.port
        self._reaper = asyncio.create_task(self._reap_idle(), name="idle-reaper")
        self.hang.start()  # a hang from the configuration begins now
        self.started_at = time.time()
        if self.admin_http is not None:
            admin_host, admin_port = self.admin_http.host, self.admin_http.port
            try:
                await self.admin_http.start()
            except OSError as e:
                self.admin_http = None
                raise StartupError(f"admin HTTP endpoint cannot listen on {admin_host}:"
                                   f"{admin_port} (admin.http.port, "
                                   f"{self.config.source('admin.http.port')}): "
                                   f"{e.strerror or e}") from e
        flush_messages = self.config.get("log.flush.interval.messages")
        if flush_messages > 1:
            # Not the durable default: say what it gives up, once, before "ready".
            log.warning("log.flush.interval.messages=%d (Kafka's flush policy): acks=all "
                        "produce, transaction state, markers and committed offsets are acted "
                        "on before they are fsynced; a power loss can take them back "
                        "(topics with flush.messages=1 still fsync first)", flush_messages)
        self._preload = asyncio.create_task(
            _preload_when_idle(
                self, [v for v in supported_versions() if v[0] in FIRST_APIS],
                [v for v in supported_versions()
                 if v[0] not in FIRST_APIS and v[0] != API_VERSIONS_KEY],
                self.transactions.load_task), name="preload")
        adv_host, adv_port = self.advertised_host_port
        others = "".join(
            f"; listener {lst.name} ({lst.spec.security_protocol}) on {lst.host}:{lst.port} "
            f"(advertised {':'.join(map(str, lst.advertised()))})" for lst in self.listeners)
        log.info("txbroker ready: listening on %s:%d (advertised %s:%d), data dir %s, node %d%s",
                 self.host, self.port, adv_host, adv_port, self.logs.data_dir, self.node_id,
                 others)

    def _open_data_dir(self) -> None:
        """In a worker thread at start: open the logs, then take the transaction
        coordinator's epoch (its fsyncs overlap the event loop thread's imports)."""
        self.logs.open()
        self.transactions.bump_epoch()

    async def stop(self) -> None:
        """Stop accepting, finish in-flight requests, flush and close the logs."""
        if self._preload is not None:
            self._preload.cancel()
        if self.crashed:
            if self._teardown is not None:
                await self._teardown  # the crash's teardown: files closed, lock released
            self.hang.end_all()  # (its connections are gone: the hang only ends)
            return
        log.info("shutting down")
        self.hang.end_all()  # what a hang held is served and answered before the end
        self.stopping.set()
        self._close_servers()
        if self._reaper is not None:
            self._reaper.cancel()
        for conn in list(self._connections):
            conn.stop_reading()
        deadline = time.monotonic() + self.shutdown_timeout
        # In-flight work finishes (bounded by shutdown.timeout.ms) ...
        while any(conn.busy for conn in self._connections) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        # ... and its answers go out to clients that read them; one that does not read
        # is not waited for.
        flushed = min(deadline, time.monotonic() + SHUTDOWN_FLUSH_S)
        while self._connections and time.monotonic() < flushed:
            await asyncio.sleep(0.01)
        for conn in list(self._connections):
            log.info("shutdown: dropping %s with unanswered or unread responses", conn.peer)
            conn.abort()
        while self._connections and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        for lst in self.listeners:
            if lst.server is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(lst.server.wait_closed(), 1)
        if self.admin_http is not None:
            await self.admin_http.stop()
        await self.transactions.write_snapshots()  # the next start loads without replay
        await self.transactions.stop()
        await self.groups.stop()
        if self._shares is not None:
            await self._shares.stop()
        await self.logs.close()
        log.info("shutdown complete")

    def _close_servers(self) -> None:
        for lst in self.listeners:
            if lst.server is not None:
                lst.server.close()

    async def _on_connection(self, listener: Listener, reader: asyncio.StreamReader,
                             writer: asyncio.StreamWriter) -> None:
        if self.stopping.is_set():
            writer.close()
            return
        if self.faults.connection_faults and self.faults.refuse_connection():
            log.info("fault: refusing a connection on listener %s", listener.name)
            writer.transport.abort()
            return
        peer = writer.get_extra_info("peername")
        peer_text = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        session = Session(peer_text, peer[0] if isinstance(peer, tuple) else str(peer),
                          listener_name=listener.name,
                          security_protocol=listener.spec.security_protocol)
        if listener.ssl_context is not None and not self._tls_principal(listener, writer, session):
            return
        if listener.sasl is not None:
            session.authenticated = False
            session.sasl_state = "handshake"
        conn = Connection(self, reader, writer, session)
        self._connections.add(conn)
        try:
            await conn.run()
        except asyncio.CancelledError:
            # The loop is going away. Not re-raised: Python 3.11's start_server callback
            # logs a traceback for a cancelled connection task.
            conn.abort()
        finally:
            self._connections.discard(conn)
            # (a stop or a crash leaves share state as it is)
            if not self.stopping.is_set() and self._shares is not None:
                self._shares.connection_closed(session)

    async def accept_tls(self, listener: Listener, conn: socket.socket) -> None:
        """The TLS handshake of an accepted socket (bounded in time, one log line when it
        fails), then the connection as any other."""
        assert listener.ssl_context is not None
        loop = asyncio.get_running_loop()
        try:
            peer = conn.getpeername()
        except OSError:
            conn.close()
            return
        peer_text = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        if self.stopping.is_set():
            conn.close()
            return
        reader = asyncio.StreamReader(limit=1 << 20)
        protocol = asyncio.StreamReaderProtocol(reader)
        try:
            transport, _ = await loop.connect_accepted_socket(
                lambda: protocol, conn, ssl=listener.ssl_context,
                ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT_S)
        except asyncio.CancelledError:
            conn.close()
            raise
        except (OSError, TimeoutError, EOFError) as e:
            if isinstance(e, ssl.SSLCertVerificationError):
                reason = f"client certificate rejected: {e.verify_message}"
            else:
                reason = getattr(e, "reason", None) or str(e) or type(e).__name__
            log.info("closing %s on listener %s: TLS handshake failed: %s", peer_text,
                     listener.name, reason)
            conn.close()
            return
        writer = asyncio.StreamWriter(transport, protocol, reader, loop)
        await self._on_connection(listener, reader, writer)

    def _tls_principal(self, listener: Listener, writer: asyncio.StreamWriter,
                       session: Session) -> bool:
        """The principal of the client certificate (ANONYMOUS without one); False (the
        connection dropped, one log line) if no ssl.principal.mapping.rules rule applies."""
        ssl_object = writer.get_extra_info("ssl_object")
        cert = ssl_object.getpeercert() if ssl_object is not None else None
        if cert and listener.principal_mapper is not None:
            from .security import tls

            dn = tls.rfc2253_name(cert.get("subject", ()))
            try:
                session.principal = "User:" + listener.principal_mapper.name(dn)
            except tls.NoMatchingRule as e:
                log.warning("closing %s on listener %s: failed authentication: %s", session.peer,
                            listener.name, e)
                writer.transport.abort()
                return False
            log.debug("%s on listener %s: client certificate %s -> %s", session.peer,
                      listener.name, dn, session.principal)
        else:
            session.principal = ANONYMOUS
        return True

    async def _reap_idle(self) -> None:
        max_idle = self.config.get("connections.max.idle.ms") / 1000
        trimmed = time.monotonic()
        while True:
            await asyncio.sleep(min(max(max_idle / 10, 0.05), 30))
            now = time.monotonic()
            if now - trimmed >= HEAP_TRIM_INTERVAL_S:
                trimmed = now
                await asyncio.get_running_loop().run_in_executor(None, trim_free_heap)
            for conn in list(self._connections):
                if now - conn.last_active > max_idle and conn.in_flight == 0:
                    log.info("closing idle connection %s (connections.max.idle.ms)", conn.peer)
                    conn.stop_reading()

    # --- request routing ---------------------------------------------------------

    def dispatch(self, frame: bytes, session: Session) -> asyncio.Task:
        """Start handling one request frame; the task yields the response bytes, None
        for no response, or CLOSE to close the connection."""
        self.requests_received += 1
        return asyncio.get_running_loop().create_task(self._answer(frame, session))

    async def _answer(self, frame: bytes, session: Session) -> bytes | object | None:
        # CloseConnection becomes a value: a task that ends in an exception keeps its
        # traceback, and so the request frame, alive in a cycle until a garbage
        # collection (40 MB frames piled up in the RSS).
        try:
            if self.hang.on:  # a hang fault: nothing is served ...
                await self.hang.hold()
            response = await self._handle(frame, session)
            if self.hang.on:  # ... or answered (say, a long-poll Fetch) until it ends
                await self.hang.hold(count=False)
            return response
        except CloseConnection:
            return CLOSE

    async def _handle(self, frame: bytes, session: Session) -> bytes | CloseAfter | None:
        started = time.perf_counter()
        peer = session.peer
        if session.sasl_state == "raw":
            # After SaslHandshake v0 the client sends bare SASL tokens, no request header.
            from .handlers import sasl_authenticate

            return await sasl_authenticate.raw_token(self, session, bytes(frame))
        try:
            api_key, version, correlation_id = parse_correlation_id(frame)
        except DecodeError:
            log.warning("closing %s: request of %d bytes is too short for a header", peer, len(frame))
            raise CloseConnection from None
        if not session.authenticated:
            allowed = ((API_VERSIONS_KEY, SASL_HANDSHAKE_KEY) if session.sasl_state == "handshake"
                       else (SASL_AUTHENTICATE_KEY,))
            if api_key not in allowed:
                # As Kafka's SaslServerAuthenticator: nothing else before authentication.
                log.warning("closing %s on listener %s: %s request (correlation id %d) before "
                            "SASL authentication completed", peer, session.listener_name,
                            api_name(api_key) if api_key in HANDLERS else f"API key {api_key}",
                            correlation_id)
                raise CloseConnection
        if not accepts(api_key, version):
            if api_key == API_VERSIONS_KEY:
                # KIP-511: answer in v0 with the supported ranges so the client can retry.
                log.info("%s sent ApiVersions v%d; answering UNSUPPORTED_VERSION with our "
                         "ranges", peer, version)
                return encode_response(API_VERSIONS_KEY, 0, correlation_id,
                                       api_versions.unsupported_version_response())
            reason = "unknown API key" if api_key not in HANDLERS else "unsupported version"
            log.warning("closing %s: %s: %s v%d (correlation id %d)", peer, reason,
                        api_name(api_key), version, correlation_id)
            raise CloseConnection
        problem = None
        try:
            header = parse_request_header(frame)
            request = decode_request(header, frame)
        except DecodeError as e:
            # Only the text: the exception's traceback holds the frame (up to
            # socket.request.max.bytes) in a reference cycle with this coroutine.
            problem = str(e)
        if problem is not None:
            log.warning("closing %s: malformed %s v%d request: %s", peer, api_name(api_key),
                        version, problem)
            raise CloseConnection
        name = api_name(api_key)
        self.request_counts[name] = self.request_counts.get(name, 0) + 1
        ctx = RequestContext(self, header, session)
        if self.fault_apis and api_key in self.fault_apis:
            response = await self.faults.apply(ctx, request, HANDLERS[api_key])
        else:
            response = await HANDLERS[api_key].handle(ctx, request)
        out = None if response is None else encode_response(api_key, version, correlation_id,
                                                            response)
        self.metrics.request_done(api_key, version, started, len(frame), response, out,
                                  ctx.error_codes)
        if session.close_after_response:
            return CloseAfter(out or b"")
        return out


def _consumer_group_config(config: BrokerConfig) -> ConsumerGroupConfig:
    """The consumer-protocol groups' settings (KIP-848) from the broker keys; as Kafka,
    an interval or timeout outside its min/max keys is a configuration error."""
    def bounded(name: str) -> int:
        value = config.get(f"group.consumer.{name}")
        lo = config.get(f"group.consumer.min.{name}")
        hi = config.get(f"group.consumer.max.{name}")
        if not lo <= value <= hi:
            raise ConfigError(f"group.consumer.{name}={value} must be within "
                              f"group.consumer.min.{name}={lo} and "
                              f"group.consumer.max.{name}={hi}")
        return value

    return ConsumerGroupConfig(heartbeat_interval_ms=bounded("heartbeat.interval.ms"),
                               session_timeout_ms=bounded("session.timeout.ms"),
                               max_size=config.get("group.consumer.max.size"),
                               migration_policy=config.get("group.consumer.migration.policy"),
                               # The bounds of the group configs (group_configs.py).
                               min_heartbeat_interval_ms=config.get(
                                   "group.consumer.min.heartbeat.interval.ms"),
                               max_heartbeat_interval_ms=config.get(
                                   "group.consumer.max.heartbeat.interval.ms"),
                               min_session_timeout_ms=config.get(
                                   "group.consumer.min.session.timeout.ms"),
                               max_session_timeout_ms=config.get(
                                   "group.consumer.max.session.timeout.ms"))
