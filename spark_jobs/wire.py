"""A small synchronous Kafka wire client for the ``txbroker`` Spark data source.

Only what a read_committed reader needs: Metadata (topics, partitions, leaders),
ListOffsets with isolation_level=READ_COMMITTED (earliest, and latest = the last
stable offset) and Fetch of one partition. Plain blocking sockets; message bodies
are encoded and decoded by the repository's sans-IO ``protocol`` package (kio).

Sockets are opened lazily inside methods and a client is never pickled: Spark
ships readers and input partitions to other processes, so each process makes its
own ``WireClient`` and closes it when done.
"""

from __future__ import annotations

import datetime
import errno
import socket
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from txbroker.client.connection import BlockingConnection
from txbroker.client.security import ClientSecurity, SecurityError
from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build, request_module

METADATA, LIST_OFFSETS, FETCH = 3, 2, 1
METADATA_VERSION = 12
LIST_OFFSETS_VERSION = 7  # v2+ carries isolation_level
FETCH_VERSION = 12

EARLIEST = -2
LATEST = -1
READ_COMMITTED = 1

# Errors after which a fresh Metadata request (new leader) and a retry can succeed.
RETRIABLE = frozenset({
    ErrorCode.not_leader_or_follower,
    ErrorCode.leader_not_available,
    ErrorCode.unknown_leader_epoch,
    ErrorCode.fenced_leader_epoch,
    ErrorCode.not_coordinator,
    ErrorCode.request_timed_out,
    ErrorCode.kafka_storage_error,
    ErrorCode.offset_not_available,
})

TopicPartition = tuple[str, int]


class TxBrokerSourceError(Exception):
    """The one error the data source raises: its message is meant for the user.

    ``code`` is the Kafka error code name (e.g. ``"OFFSET_OUT_OF_RANGE"``) when the
    broker answered with one."""

    def __init__(self, message: str, code: str | None = None, *,
                 log_start_offset: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.log_start_offset = log_start_offset  # with OFFSET_OUT_OF_RANGE from Fetch


def error_name(code: int | ErrorCode) -> str:
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"UNKNOWN_ERROR_CODE_{int(code)}"


def parse_bootstrap(servers: str) -> list[tuple[str, int]]:
    """``"host:port,host2:port"`` -> [(host, port), ...]; raises on a malformed entry."""
    out = []
    for item in servers.split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        host = host.strip("[]")  # [::1]:9092
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise TxBrokerSourceError(
                f"kafka.bootstrap.servers={servers!r}: {item!r} is not host:port")
        out.append((host, int(port)))
    if not out:
        raise TxBrokerSourceError("kafka.bootstrap.servers is empty: give host:port")
    return out


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    internal: bool
    leaders: Mapping[int, int]  # partition -> leader node id (-1 if none)


@dataclass(frozen=True, slots=True)
class FetchResult:
    records: bytes
    aborted: list[tuple[int, int]]  # (producer id, first offset) of aborted transactions
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int


class _Connection(BlockingConnection):
    """A connection whose security failures are the data source's errors."""

    def __init__(self, host: str, port: int, timeout: float, client_id: str,
                 security: ClientSecurity) -> None:
        try:
            # TLS and SASL (kafka.security.protocol, kafka.sasl.*, kafka.ssl.*) done here.
            super().__init__(host, port, timeout, client_id, security)
        except SecurityError as e:
            # Not retried: the same settings fail the same way.
            raise TxBrokerSourceError(f"{host}:{port}: {e}", e.code) from None


def _reason(e: BaseException) -> str:
    if isinstance(e, TimeoutError | socket.timeout):
        return "timed out"
    if isinstance(e, socket.gaierror):
        return f"cannot resolve host ({e.strerror})"
    if isinstance(e, OSError) and e.errno is not None:
        return e.strerror or errno.errorcode.get(e.errno, str(e))
    return str(e) or type(e).__name__


class WireClient:
    """Blocking Kafka client: metadata, read_committed list-offsets and fetch.

    Connections are cached per broker node; a failed connection is dropped and a
    request that can succeed on retry (leader moved, broker restarting) is retried
    until ``timeout`` seconds have passed."""

    def __init__(self, bootstrap_servers: str, *, timeout: float = 30.0,
                 client_id: str = "txbroker-spark",
                 security: ClientSecurity | None = None) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        self.timeout = timeout
        self.client_id = client_id
        self.security = security or ClientSecurity()
        self._nodes: dict[int, tuple[str, int]] = {}
        self._conns: dict[int | str, _Connection] = {}
        self._leaders: dict[TopicPartition, int] = {}
        # Until the cluster has answered once, an unreachable bootstrap server is a
        # configuration error reported at once; afterwards it is a restart worth waiting for.
        self._contacted = False

    # --- connections ------------------------------------------------------------------------

    def __getstate__(self):  # pragma: no cover - a guard, not a feature
        raise TypeError("WireClient holds sockets and must not be pickled")

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _bootstrap_conn(self) -> _Connection:
        """Any live connection: a cached one, else the first bootstrap server that answers."""
        for conn in self._conns.values():
            return conn
        failures = []
        for host, port in self.bootstrap:
            try:
                conn = _Connection(host, port, self.timeout, self.client_id, self.security)
            except OSError as e:
                failures.append(f"{host}:{port}: {_reason(e)}")
                continue
            self._conns[f"{host}:{port}"] = conn
            return conn
        reasons = [f.split(": ", 1)[1] for f in failures] if len(failures) == 1 else failures
        message = (f"cannot connect to kafka.bootstrap.servers={self.bootstrap_servers}: "
                   + "; ".join(reasons))
        if self._contacted:
            raise _Retry(message)
        raise TxBrokerSourceError(message)

    def _node_conn(self, node: int) -> _Connection:
        conn = self._conns.get(node)
        if conn is not None:
            return conn
        if node not in self._nodes:
            self._refresh_metadata(None)
        if node not in self._nodes:
            raise _Retry(f"broker node {node} is not in the cluster metadata")
        host, port = self._nodes[node]
        # The bootstrap connection may already be this node: reuse it.
        same = self._conns.pop(f"{host}:{port}", None)
        conn = same or _Connection(host, port, self.timeout, self.client_id, self.security)
        self._conns[node] = conn
        return conn

    def _drop(self, conn: _Connection) -> None:
        for key, c in list(self._conns.items()):
            if c is conn:
                del self._conns[key]
        conn.close()

    def _call(self, what: str, fn):
        """Run ``fn()`` (which issues requests), retrying connection failures and
        retriable Kafka errors until the client's timeout."""
        deadline = time.monotonic() + self.timeout
        backoff = 0.05
        while True:
            try:
                return fn()
            except TxBrokerSourceError:
                raise
            except (_Retry, OSError, ConnectionError) as e:
                if time.monotonic() + backoff > deadline:
                    if isinstance(e, TimeoutError | socket.timeout):
                        raise TxBrokerSourceError(
                            f"{what}: no answer from the broker within {self.timeout:g} s "
                            "(kafka.request.timeout.ms)", "REQUEST_TIMED_OUT") from None
                    raise TxBrokerSourceError(f"{what}: {_reason(e)} (gave up after "
                                              f"{self.timeout:g} s)", getattr(e, "code", None)
                                              ) from None
                if not isinstance(e, _Retry):
                    self.close()  # the socket state is unknown: start over
                self._leaders.clear()
                time.sleep(backoff)
                backoff = min(backoff * 2, 1.0)

    # --- metadata ---------------------------------------------------------------------------

    def _refresh_metadata(self, topics: list[str] | None) -> dict[str, TopicInfo | int]:
        m = request_module(METADATA, METADATA_VERSION)
        items = None if topics is None else tuple(
            build(m.MetadataRequestTopic, name=t, topic_id=None) for t in topics)
        request = build(m.MetadataRequest, topics=items, allow_auto_topic_creation=False,
                        include_topic_authorized_operations=False,
                        include_cluster_authorized_operations=False)
        conn = self._bootstrap_conn()
        try:
            response = conn.request(METADATA, METADATA_VERSION, request)
        except (OSError, ConnectionError):
            self._drop(conn)
            raise
        self._contacted = True
        self._nodes = {b.node_id: (b.host, b.port) for b in response.brokers}
        out: dict[str, TopicInfo | int] = {}
        for t in response.topics:
            if t.error_code != ErrorCode.none:
                out[t.name] = t.error_code
                continue
            leaders = {p.partition_index: p.leader_id for p in t.partitions}
            for p, leader in leaders.items():
                self._leaders[(t.name, p)] = leader
            out[t.name] = TopicInfo(t.name, bool(t.is_internal), leaders)
        return out

    def topics(self, names: list[str] | None = None, *,
               missing_ok: bool = False) -> dict[str, TopicInfo]:
        """Metadata of ``names`` (all topics if None). A name that does not exist raises
        TxBrokerSourceError naming it (with ``missing_ok``, it is left out of the
        result); other errors are retried."""

        def attempt():
            found = self._refresh_metadata(names)
            result = {}
            for name, info in found.items():
                if isinstance(info, TopicInfo):
                    result[name] = info
                elif info == ErrorCode.unknown_topic_or_partition:
                    if missing_ok:
                        continue
                    raise TxBrokerSourceError(
                        f"topic {name!r} does not exist on {self.bootstrap_servers}",
                        "UNKNOWN_TOPIC_OR_PARTITION")
                elif info in RETRIABLE:
                    raise _Retry(f"metadata of topic {name!r}: {error_name(info)}",
                                 error_name(info))
                else:
                    raise TxBrokerSourceError(
                        f"metadata of topic {name!r}: broker error {error_name(info)}",
                        error_name(info))
            return result

        return self._call("Metadata", attempt)

    def _leader(self, tp: TopicPartition) -> int:
        leader = self._leaders.get(tp)
        if leader is None:
            info = self.topics([tp[0]]).get(tp[0])
            if info is None or tp[1] not in info.leaders:
                raise TxBrokerSourceError(
                    f"partition {tp[0]}-{tp[1]} does not exist", "UNKNOWN_TOPIC_OR_PARTITION")
            leader = info.leaders[tp[1]]
        if leader < 0:
            raise _Retry(f"partition {tp[0]}-{tp[1]} has no leader", "LEADER_NOT_AVAILABLE")
        return leader

    # --- offsets ----------------------------------------------------------------------------

    def list_offsets(self, partitions: Iterable[TopicPartition], timestamp: int
                     ) -> dict[TopicPartition, int]:
        """ListOffsets(read_committed) for every partition: ``timestamp`` EARLIEST gives the
        log start offset, LATEST the last stable offset."""
        wanted = sorted(set(partitions))
        what = "earliest" if timestamp == EARLIEST else "latest" if timestamp == LATEST \
            else f"timestamp {timestamp}"

        def attempt():
            by_leader: dict[int, list[TopicPartition]] = {}
            for tp in wanted:
                by_leader.setdefault(self._leader(tp), []).append(tp)
            m = request_module(LIST_OFFSETS, LIST_OFFSETS_VERSION)
            result: dict[TopicPartition, int] = {}
            for node, tps in by_leader.items():
                topics: dict[str, list] = {}
                for t, p in tps:
                    topics.setdefault(t, []).append(build(
                        m.ListOffsetsPartition, partition_index=p, current_leader_epoch=-1,
                        timestamp=timestamp))
                request = build(m.ListOffsetsRequest, replica_id=-1,
                                isolation_level=READ_COMMITTED,
                                topics=tuple(build(m.ListOffsetsTopic, name=t,
                                                   partitions=tuple(ps))
                                             for t, ps in topics.items()))
                conn = self._node_conn(node)
                try:
                    response = conn.request(LIST_OFFSETS, LIST_OFFSETS_VERSION, request)
                except (OSError, ConnectionError):
                    self._drop(conn)
                    raise
                for t in response.topics:
                    for p in t.partitions:
                        tp = (t.name, p.partition_index)
                        if p.error_code in RETRIABLE:
                            raise _Retry(f"{tp[0]}-{tp[1]}: {error_name(p.error_code)}",
                                         error_name(p.error_code))
                        if p.error_code != ErrorCode.none:
                            raise TxBrokerSourceError(
                                f"ListOffsets({what}) of {tp[0]}-{tp[1]}: "
                                f"{error_name(p.error_code)}", error_name(p.error_code))
                        result[tp] = p.offset
            missing = [tp for tp in wanted if tp not in result]
            if missing:
                raise TxBrokerSourceError(f"ListOffsets({what}): no answer for {missing}")
            return result

        if not wanted:
            return {}
        return self._call(f"ListOffsets({what})", attempt)

    def earliest(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self.list_offsets(partitions, EARLIEST)

    def latest(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The last stable offset of each partition (read_committed 'latest')."""
        return self.list_offsets(partitions, LATEST)

    # --- fetch ------------------------------------------------------------------------------

    def fetch(self, topic: str, partition: int, offset: int, *, max_bytes: int = 8 << 20,
              max_wait_ms: int = 500) -> FetchResult:
        """One read_committed Fetch of one partition from ``offset``. Kafka errors other
        than retriable ones raise TxBrokerSourceError with ``code`` set (callers handle
        OFFSET_OUT_OF_RANGE)."""
        tp = (topic, partition)
        m = request_module(FETCH, FETCH_VERSION)
        request = build(
            m.FetchRequest, replica_id=-1, max_wait=datetime.timedelta(milliseconds=max_wait_ms),
            min_bytes=1, max_bytes=max_bytes, isolation_level=READ_COMMITTED, session_id=0,
            session_epoch=-1, rack_id="", forgotten_topics_data=(),
            topics=(build(m.FetchTopic, topic=topic, partitions=(build(
                m.FetchPartition, partition=partition, current_leader_epoch=-1,
                fetch_offset=offset, last_fetched_epoch=-1, log_start_offset=-1,
                partition_max_bytes=max_bytes),)),))
        request_timeout = self.timeout + max_wait_ms / 1000

        def attempt() -> FetchResult:
            conn = self._node_conn(self._leader(tp))
            try:
                response = conn.request(FETCH, FETCH_VERSION, request, timeout=request_timeout)
            except (OSError, ConnectionError):
                self._drop(conn)
                raise
            if response.error_code != ErrorCode.none:
                code = error_name(response.error_code)
                if response.error_code in RETRIABLE:
                    raise _Retry(f"Fetch: {code}", code)
                raise TxBrokerSourceError(f"Fetch of {topic}-{partition}: {code}", code)
            for t in response.responses:
                for p in t.partitions:
                    if t.topic != topic or p.partition_index != partition:
                        continue
                    if p.error_code in RETRIABLE:
                        raise _Retry(f"{topic}-{partition}: {error_name(p.error_code)}",
                                     error_name(p.error_code))
                    if p.error_code != ErrorCode.none:
                        code = error_name(p.error_code)
                        raise TxBrokerSourceError(
                            f"Fetch of {topic}-{partition} at offset {offset}: {code}", code,
                            log_start_offset=p.log_start_offset)
                    aborted = [(a.producer_id, a.first_offset)
                               for a in (p.aborted_transactions or ())]
                    return FetchResult(bytes(p.records or b""), aborted, p.high_watermark,
                                       p.last_stable_offset, p.log_start_offset)
            raise TxBrokerSourceError(f"Fetch: the broker sent no data for {topic}-{partition}")

        return self._call(f"Fetch of {topic}-{partition}", attempt)


class _Retry(Exception):
    """A failure worth retrying after a metadata refresh (leader moved, broker loading)."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code
