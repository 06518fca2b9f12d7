"""Broker metrics in the Prometheus text format (served on ``/metrics``).

Counters and histograms that change on the request path are plain attributes
updated in place: one dict lookup and a few additions per request. Everything
that can be read off the broker's state (offsets, transactions, group lag) is
computed when scraped. No client library: the text format is simple, and the
broker stays free of a dependency for it (the tests check the output with
``prometheus_client``'s parser). docs/operations.md lists every metric with its
Kafka JMX counterpart.
"""

from __future__ import annotations

import asyncio
import math
import time
from bisect import bisect_left
from collections.abc import Iterable, Iterator
from dataclasses import fields, is_dataclass
from enum import Enum
from functools import cache
from typing import TYPE_CHECKING, Any, Protocol, get_args

from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import api_name
from txbroker.storage.disk_conditions import CONDITIONS

from .features import SHARE_VERSION, STREAMS_VERSION

if TYPE_CHECKING:
    from txbroker.coordinator.group.coordinator import GroupCoordinator
    from txbroker.coordinator.share.coordinator import ShareCoordinator
    from txbroker.coordinator.transaction.coordinator import TransactionCoordinator
    from txbroker.storage.manager import LogManager

    from .features import FinalizedFeatures

# Seconds. Requests: from a sub-millisecond Metadata to a Fetch long poll (fetch.max.wait.ms).
REQUEST_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                   2.5, 5.0, 10.0, 30.0)
# A flush round: page cache to disk, tens of microseconds (tmpfs) to seconds (a busy disk).
FLUSH_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                 0.25, 0.5, 1.0, 2.5, 10.0)


class Histogram:
    """Cumulative only when rendered: ``observe`` is one bisect and two additions."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one: above every bound (+Inf)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        # bisect_left: a value equal to a bound falls in that bucket (Prometheus' "le").
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    @property
    def count(self) -> int:
        return sum(self.counts)

    def samples(self, name: str, labels: str) -> Iterator[str]:
        sep = "," if labels else ""
        running = 0
        for bound, n in zip(self.bounds, self.counts, strict=False):
            running += n
            yield f'{name}_bucket{{{labels}{sep}le="{_float(bound)}"}} {running}'
        running += self.counts[-1]
        yield f'{name}_bucket{{{labels}{sep}le="+Inf"}} {running}'
        braces = f"{{{labels}}}" if labels else ""
        yield f"{name}_sum{braces} {_float(self.sum)}"
        yield f"{name}_count{braces} {running}"


class RequestStats:
    """Everything counted per (API key, version)."""

    __slots__ = ("count", "bytes_in", "bytes_out", "time")

    def __init__(self) -> None:
        self.count = 0
        self.bytes_in = 0
        self.bytes_out = 0
        self.time = Histogram(REQUEST_BUCKETS)


class BrokerMetrics:
    """The counters the request path and the flusher update."""

    def __init__(self) -> None:
        self.requests: dict[tuple[int, int], RequestStats] = {}
        self.errors: dict[tuple[int, int], int] = {}  # (API key, error code) -> responses
        self.flush_time = Histogram(FLUSH_BUCKETS)
        # Console logins and admin bearer tokens refused, by reason (broker/console/throttle.py).
        self.login_failures: dict[str, int] = {}

    def count_login_failure(self, reason: str) -> None:
        self.login_failures[reason] = self.login_failures.get(reason, 0) + 1

    def stats(self, api_key: int, version: int) -> RequestStats:
        stats = self.requests.get((api_key, version))
        if stats is None:
            stats = self.requests[(api_key, version)] = RequestStats()
        return stats

    def count_errors(self, api_key: int, codes: Iterable[int]) -> None:
        errors = self.errors
        for code in codes:
            key = (api_key, code)
            errors[key] = errors.get(key, 0) + 1

    def request_done(self, api_key: int, version: int, started: float, frame_size: int,
                     response: Any, encoded: bytes | None, error_codes: Any) -> None:
        """One answered request. ``error_codes``: what the handler reported (a fast path
        that encoded its own bytes, or () for none), else None to look in ``response``."""
        stats = self.requests.get((api_key, version))
        if stats is None:
            stats = self.requests[(api_key, version)] = RequestStats()
        stats.count += 1
        stats.bytes_in += frame_size + 4
        if encoded is not None:
            stats.bytes_out += len(encoded)
        if error_codes is None:
            error_codes = () if response is None or type(response) is bytes \
                else response_error_codes(response)
        if error_codes:
            self.count_errors(api_key, error_codes)
        stats.time.observe(time.perf_counter() - started)

    def observe_flush(self, seconds: float, files: int) -> None:
        self.flush_time.observe(seconds)


# --- error codes in responses ----------------------------------------------------------


@cache
def _error_plan(cls: type) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """For a kio response entity: its error code fields, and the fields holding nested
    entities that may carry error codes themselves (others are never visited)."""
    errors = []
    nested = []
    for f in fields(cls):
        if f.metadata.get("kafka_type") == "error_code":
            errors.append(f.name)
            continue
        child = _entity_type(f.type)
        if child is not None and any(_error_plan(child)):
            nested.append(f.name)
    return tuple(errors), tuple(nested)


def _entity_type(tp: Any) -> type | None:
    """The entity class of a field typed ``Entity``, ``tuple[Entity, ...]`` or ``... | None``."""
    if isinstance(tp, type):
        return tp if is_dataclass(tp) else None
    for arg in get_args(tp):
        if arg is not Ellipsis and (found := _entity_type(arg)) is not None:
            return found
    return None


def response_error_codes(message: Any) -> list[int]:
    """Every non-zero error code in a kio response (per partition, per topic, top
    level): what Kafka's ErrorsPerSec counts, one per occurrence."""
    out: list[int] = []
    _collect_errors(message, out)
    return out


def _collect_errors(entity: Any, out: list[int]) -> None:
    error_fields, nested = _error_plan(type(entity))
    for name in error_fields:
        code = getattr(entity, name)
        if code:
            out.append(code.value if isinstance(code, Enum) else int(code))
    for name in nested:
        value = getattr(entity, name)
        if value is None:
            continue
        if isinstance(value, tuple):
            for item in value:
                _collect_errors(item, out)
        else:
            _collect_errors(value, out)


# --- rendering -----------------------------------------------------------------------


def _label(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _float(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return str(code)


class _Text:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str) -> None:
        self.lines.append(f"# HELP {name} {help_text}")
        self.lines.append(f"# TYPE {name} {kind}")

    def sample(self, name: str, labels: dict[str, object] | None, value: float) -> None:
        if labels:
            text = ",".join(f'{k}="{_label(v)}"' for k, v in labels.items())
            self.lines.append(f"{name}{{{text}}} {_float(value)}")
        else:
            self.lines.append(f"{name} {_float(value)}")


class MetricsSource(Protocol):
    """What the /metrics page reads of the running broker (broker/server.py's Broker).
    A Protocol rather than an import of Broker: the server imports this module."""

    metrics: BrokerMetrics
    logs: LogManager
    transactions: TransactionCoordinator
    groups: GroupCoordinator
    features: FinalizedFeatures

    @property
    def connection_count(self) -> int: ...

    @property
    def shares_if_built(self) -> ShareCoordinator | None: ...


def render(broker: MetricsSource) -> str:
    """The whole /metrics page."""
    out = _Text()
    _requests(out, broker.metrics)
    _connections_and_flush(out, broker)
    _transactions(out, broker)
    _partitions(out, broker)
    _groups(out, broker)
    shares = broker.shares_if_built
    # Share groups on (share.version 1 or more) and in use: never built just to be scraped.
    if shares is not None and broker.features.level(SHARE_VERSION) >= 1:
        _share_groups(out, shares)
    _storage(out, broker)
    return "\n".join(out.lines) + "\n"


def _requests(out: _Text, metrics: BrokerMetrics) -> None:
    keys = sorted(metrics.requests, key=lambda k: (api_name(k[0]), k[1]))
    out.family("txbroker_requests_total", "counter",
               "Requests handled, by API and version (Kafka: RequestMetrics RequestsPerSec).")
    for key in keys:
        out.sample("txbroker_requests_total", {"api": api_name(key[0]), "version": key[1]},
                   metrics.requests[key].count)
    name = "txbroker_request_total_time_seconds"
    out.family(name, "histogram", "Time from a request's frame to its response, by API and "
               "version (Kafka: RequestMetrics TotalTimeMs).")
    for key in keys:
        labels = f'api="{_label(api_name(key[0]))}",version="{key[1]}"'
        out.lines.extend(metrics.requests[key].time.samples(name, labels))
    out.family("txbroker_request_errors_total", "counter", "Error codes in responses, one per "
               "occurrence (partition, topic or request level), by API and error (Kafka: "
               "RequestMetrics ErrorsPerSec).")
    for (api_key, code), count in sorted(metrics.errors.items(),
                                         key=lambda kv: (api_name(kv[0][0]), kv[0][1])):
        out.sample("txbroker_request_errors_total",
                   {"api": api_name(api_key), "error": _error_name(code)}, count)
    by_api: dict[str, list[int]] = {}
    for key in keys:
        stats = metrics.requests[key]
        totals = by_api.setdefault(api_name(key[0]), [0, 0])
        totals[0] += stats.bytes_in
        totals[1] += stats.bytes_out
    out.family("txbroker_network_incoming_bytes_total", "counter",
               "Request bytes received (frames with their size prefix), by API (Kafka: "
               "socket-server-metrics incoming-byte-total).")
    for api, (bytes_in, _) in by_api.items():
        out.sample("txbroker_network_incoming_bytes_total", {"api": api}, bytes_in)
    out.family("txbroker_network_outgoing_bytes_total", "counter",
               "Response bytes sent (frames with their size prefix), by API (Kafka: "
               "socket-server-metrics outgoing-byte-total).")
    for api, (_, bytes_out) in by_api.items():
        out.sample("txbroker_network_outgoing_bytes_total", {"api": api}, bytes_out)


def _connections_and_flush(out: _Text, broker: MetricsSource) -> None:
    flusher = broker.logs.flusher
    out.family("txbroker_connections", "gauge", "Open client connections.")
    out.sample("txbroker_connections", None, broker.connection_count)
    out.family("txbroker_event_loop_tasks", "gauge", "asyncio tasks not yet done on the "
               "broker's event loop (flat under a steady load: growth is a leak).")
    out.sample("txbroker_event_loop_tasks", None, _task_count())
    out.family("txbroker_flush_rounds_total", "counter",
               "Flush rounds (group commit: one fsync per dirty file per round).")
    out.sample("txbroker_flush_rounds_total", None, flusher.rounds)
    out.family("txbroker_fsyncs_total", "counter", "Files fsynced.")
    out.sample("txbroker_fsyncs_total", None, flusher.fsyncs)
    name = "txbroker_log_flush_time_seconds"
    out.family(name, "histogram", "Duration of a flush round, its files fsynced in parallel "
               "(Kafka: LogFlushStats LogFlushRateAndTimeMs).")
    out.lines.extend(broker.metrics.flush_time.samples(name, ""))


def _task_count() -> int:
    """The running loop's tasks (the page is rendered on the broker's loop); 0 off a loop."""
    try:
        return len(asyncio.all_tasks())
    except RuntimeError:
        return 0


def _transactions(out: _Text, broker: MetricsSource) -> None:
    coordinator = broker.transactions
    out.family("txbroker_transactions_total", "counter",
               "Transactions completed (markers written), by outcome: committed, aborted "
               "(by the client, or by recovery), timed_out (transaction.timeout.ms), fenced "
               "(a new producer instance's InitProducerId).")
    for outcome, count in coordinator.outcomes.items():
        out.sample("txbroker_transactions_total", {"outcome": outcome}, count)
    state = coordinator.state
    starts = state.open_transaction_starts() if state.loaded else []
    now_ms = time.time() * 1000
    out.family("txbroker_transactions_ongoing", "gauge",
               "Transactions begun and not complete (Ongoing, PrepareCommit, PrepareAbort).")
    out.sample("txbroker_transactions_ongoing", None, len(starts))
    out.family("txbroker_transaction_oldest_age_seconds", "gauge",
               "Age of the oldest transaction not complete (0 if none).")
    valid = [s for s in starts if s >= 0]
    out.sample("txbroker_transaction_oldest_age_seconds", None,
               max(0.0, (now_ms - min(valid)) / 1000) if valid else 0)
    out.family("txbroker_transactional_ids", "gauge", "Transactional ids, by state.")
    for name, count in sorted(state.state_counts().items()):
        out.sample("txbroker_transactional_ids", {"state": name}, count)


_PARTITION_GAUGES = (
    ("log_start_offset", "First offset kept (Kafka: Log LogStartOffset).",
     lambda p: p.log_start_offset),
    ("high_watermark", "High watermark: the offset after the last record a read_uncommitted "
     "consumer sees.", lambda p: p.high_watermark),
    ("last_stable_offset", "Last stable offset: where read_committed consumers stop (first "
     "offset of the oldest open transaction, else the high watermark).",
     lambda p: p.last_stable_offset),
    ("last_stable_offset_lag", "High watermark minus last stable offset: records held back "
     "from read_committed consumers by open transactions (Kafka: Partition "
     "LastStableOffsetLag).", lambda p: p.high_watermark - p.last_stable_offset),
    ("ongoing_transactions", "Producers with an open transaction in the partition.",
     lambda p: p.ongoing_transaction_count()),
    ("log_end_offset", "Log end offset (Kafka: Log LogEndOffset).", lambda p: p.log_end_offset),
    ("log_size_bytes", "Bytes in the partition's segments (Kafka: Log Size).",
     lambda p: p.size_bytes),
    ("log_segments", "Segments (Kafka: Log NumLogSegments).", lambda p: len(p.segments)),
)


def _partitions(out: _Text, broker: MetricsSource) -> None:
    logs = sorted(broker.logs.logs.values(), key=lambda p: (p.topic, p.partition))
    for name, help_text, getter in _PARTITION_GAUGES:
        metric = f"txbroker_partition_{name}"
        out.family(metric, "gauge", help_text)
        for p in logs:
            out.sample(metric, {"topic": p.topic, "partition": p.partition}, getter(p))


# Every state is sampled (0 when no group is in it), so a dashboard has its series.
_CLASSIC_STATES = ("Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead")
_CONSUMER_STATES = ("Empty", "Assigning", "Reconciling", "Stable")
_STREAMS_STATES = ("Empty", "NotReady", "Assigning", "Reconciling", "Stable")


def _groups(out: _Text, broker: MetricsSource) -> None:
    groups = broker.groups
    out.family("txbroker_group_rebalances_total", "counter",
               "Rebalances by group protocol: classic, join phases completed (a new "
               "generation); consumer (KIP-848), target assignments computed.")
    out.sample("txbroker_group_rebalances_total", {"protocol": "classic"}, groups.rebalances)
    out.sample("txbroker_group_rebalances_total", {"protocol": "consumer"},
               groups.consumer.rebalances)
    out.family("txbroker_groups", "gauge", "Groups by protocol and state (Kafka's "
               "classic-group-count, consumer-group-count and streams-group-count).")
    protocols = [("classic", _CLASSIC_STATES, [(g.group_id, g.state)
                                               for g in groups.list_groups()]),
                 ("consumer", _CONSUMER_STATES, groups.consumer_listing())]
    if broker.features.level(STREAMS_VERSION) >= 1:  # (streams groups on: KIP-1071)
        protocols.append(("streams", _STREAMS_STATES, groups.streams_listing()))
    for protocol, states, listing in protocols:
        counts = dict.fromkeys(states, 0)
        for _group_id, state in listing:
            counts[state] = counts.get(state, 0) + 1
        for state, n in counts.items():
            out.sample("txbroker_groups", {"protocol": protocol, "state": state}, n)
    rows = []
    for group in groups.offsets.groups():
        for (topic, partition), committed in sorted(groups.offsets.group_offsets(group).items()):
            plog = broker.logs.get_log(topic, partition)
            if plog is None:
                continue
            rows.append((group, topic, partition, committed.offset, plog))
    families = (
        ("txbroker_consumergroup_current_offset", "Committed offset of a group, per partition.",
         lambda offset, p: offset),
        ("txbroker_consumergroup_lag", "High watermark minus committed offset (what Kafka's "
         "kafka-consumer-groups.sh shows as LAG).", lambda offset, p: max(0, p.high_watermark
                                                                          - offset)),
        ("txbroker_consumergroup_lag_read_committed", "Last stable offset minus committed "
         "offset: what a read_committed consumer can still read now.",
         lambda offset, p: max(0, p.last_stable_offset - offset)),
    )
    for name, help_text, value in families:
        out.family(name, "gauge", help_text)
        for group, topic, partition, offset, plog in rows:
            out.sample(name, {"group": group, "topic": topic, "partition": partition},
                       value(offset, plog))


_SHARE_STATES = ("Empty", "Stable")
_SHARE_COUNTERS = (
    ("acquired_records", "Records delivered to share consumers (acquired by ShareFetch)."),
    ("redelivered_records", "Records delivered with a delivery count above 1 (released, "
     "expired or recovered after a crash before)."),
    ("lock_expired_records", "Records whose acquisition lock ran out "
     "(group.share.record.lock.duration.ms) before they were acknowledged."),
    ("dlq_records", "Records written to a share group's dead-letter topic."),
)
_ACK_TYPES = (("accept", "accepted_records"), ("release", "released_records"),
              ("reject", "rejected_records"), ("renew", "renewed_records"))


def _share_groups(out: _Text, shares: ShareCoordinator) -> None:
    """Counters of the share coordinator's ShareStats, and gauges read off its state:
    one pass over its groups and one over its share-partitions (each O(1))."""
    stats = shares.stats
    for field, help_text in _SHARE_COUNTERS:
        name = f"txbroker_share_{field}_total"
        out.family(name, "counter", help_text)
        out.sample(name, None, getattr(stats, field))
    out.family("txbroker_share_acknowledged_records_total", "counter",
               "Records acknowledged by share consumers, by acknowledge type (Kafka's "
               "record-acknowledgement meter).")
    for ack_type, field in _ACK_TYPES:
        out.sample("txbroker_share_acknowledged_records_total", {"type": ack_type},
                   getattr(stats, field))
    counts = dict.fromkeys(_SHARE_STATES, 0)
    members = 0
    for group in shares.groups.groups.values():
        counts[group.state] = counts.get(group.state, 0) + 1
        members += len(group.members)
    out.family("txbroker_share_groups", "gauge", "Share groups by state (Kafka's "
               "share-group-count).")
    for state, n in counts.items():
        out.sample("txbroker_share_groups", {"state": state}, n)
    out.family("txbroker_share_group_members", "gauge", "Members of share groups.")
    out.sample("txbroker_share_group_members", None, members)
    out.family("txbroker_share_inflight_records", "gauge", "Offsets in the in-flight windows "
               "of the share-partitions in memory (start offset to end offset).")
    out.sample("txbroker_share_inflight_records", None,
               sum(p.in_flight_record_count for p in shares.partitions.values()))


def _storage(out: _Text, broker: MetricsSource) -> None:
    """The data directory's conditions (storage/disk_conditions.py), refused writes,
    offline partitions and failed fsyncs: what an alert on a full or failing disk needs."""
    disk = broker.logs.disk
    out.family("txbroker_storage_condition", "gauge", "1 while the data directory is in the "
               "condition (disk_full: ENOSPC/EDQUOT, read_only: EROFS, io_error: EIO/ENOTCONN), "
               "else 0.")
    for condition in CONDITIONS:
        out.sample("txbroker_storage_condition", {"condition": condition},
                   1 if condition in disk.active else 0)
    out.family("txbroker_storage_refused_writes_total", "counter",
               "Writes refused by the file system with an expected errno, by errno.")
    for name, count in sorted(disk.refused_by_errno.items()):
        out.sample("txbroker_storage_refused_writes_total", {"errno": name}, count)
    out.family("txbroker_storage_write_retries_total", "counter",
               "Retries of the broker's own writes (markers, checkpoints) during a condition.")
    out.sample("txbroker_storage_write_retries_total", None, disk.retries)
    space = disk.free_space()
    if space is not None:
        out.family("txbroker_storage_free_bytes", "gauge",
                   "Free bytes on the data directory's file system (statvfs f_bavail).")
        out.sample("txbroker_storage_free_bytes", None, space[0])
    out.family("txbroker_offline_partitions", "gauge", "Partitions a failed fsync took "
               "offline until a restart (Kafka: KafkaController OfflinePartitionsCount).")
    out.sample("txbroker_offline_partitions", None,
               sum(1 for p in broker.logs.logs.values() if p.offline is not None))
    out.family("txbroker_fsync_failures_total", "counter",
               "fsyncs that failed (each took its partition offline).")
    out.sample("txbroker_fsync_failures_total", None, broker.logs.flusher.failed_fsyncs)
    out.family("txbroker_console_login_failures_total", "counter", "Console logins and admin "
               "bearer tokens refused, by reason: wrong_token, throttled (too soon after a "
               "failure from that address).")
    for reason in ("wrong_token", "throttled"):
        out.sample("txbroker_console_login_failures_total", {"reason": reason},
                   broker.metrics.login_failures.get(reason, 0))

