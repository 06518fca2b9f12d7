"""Fetch (key 1): long poll across partitions, whole batches, sessionless sessions.

The broker does not cache fetch sessions (KIP-227 allows it): a request that
asks for a new session gets session id 0 and the client keeps sending full
fetches; an incremental fetch of an unknown session gets FETCH_SESSION_ID_NOT_FOUND.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time

from txbroker.protocol.acls import AclOperation, ResourceType
from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ..context import RequestContext

API_KEY = 1
MIN_VERSION = 4
MAX_VERSION = 12

log = logging.getLogger(__name__)
_ZERO = datetime.timedelta(0)
READ_COMMITTED = 1
INT32_MAX = 2**31 - 1


def _ms(value) -> int:
    return int(value.total_seconds() * 1000) if isinstance(value, datetime.timedelta) else int(value)


def requested_partitions(request) -> list[tuple[str, list]]:
    """The request's partitions by topic, each partition once.

    Kafka keys a fetch by topic-partition (a map), so a partition listed twice is
    fetched once, where it first appeared, with the fetch position given last; a
    request cannot make the broker read the same bytes many times over."""
    by_topic: dict[str, dict[int, object]] = {}
    for topic in request.topics:
        parts = by_topic.setdefault(topic.topic, {})
        for fp in topic.partitions:
            parts[fp.partition] = fp
    return [(name, list(parts.values())) for name, parts in by_topic.items()]


def unreadable_topics(ctx, request, partitions: list[tuple[str, list]]) -> frozenset[str]:
    """Topics this fetch may not read: Kafka wants READ on each topic from a consumer,
    CLUSTER_ACTION on the cluster from a follower (a replica id >= 0)."""
    if ctx.broker.authorizer is None:
        return frozenset()
    names = [name for name, _ in partitions]
    if getattr(request, "replica_id", -1) >= 0:
        return frozenset() if ctx.authorize_cluster(AclOperation.CLUSTER_ACTION) \
            else frozenset(names)
    return frozenset(names) - ctx.authorized(AclOperation.READ, ResourceType.TOPIC, names)


def _collect(ctx, request, read_committed: bool, partitions: list[tuple[str, list]],
             denied: frozenset[str] = frozenset()):
    """One pass over the requested partitions: (topics, bytes, any_error, logs).
    ``any_error`` leaves out the denied topics: as Kafka's KafkaApis sets unauthorized
    partitions aside before ReplicaManager's long poll, they do not end the wait of the
    partitions the principal may read."""
    logs = ctx.broker.logs
    schema = ctx.schema
    remaining = request.max_bytes if getattr(request, "max_bytes", None) is not None else INT32_MAX
    if remaining <= 0:
        remaining = INT32_MAX
    # The broker's own cap (fetch.max.bytes), whatever the client asked for.
    remaining = min(remaining, ctx.broker.fetch_max_bytes)
    min_one = True
    total = 0
    any_error = False
    touched = []
    topics = []
    for topic_name, requested in partitions:
        parts = []
        for fp in requested:
            plog = logs.get_log(topic_name, fp.partition)
            error = ErrorCode.none
            records = b""
            aborted = None
            hw = lso = start = -1
            epoch = getattr(fp, "current_leader_epoch", -1)
            if denied and topic_name in denied:
                error = ErrorCode.topic_authorization_failed
            elif plog is None:
                error = ErrorCode.unknown_topic_or_partition
            elif epoch is not None and epoch > 0:
                error = ErrorCode.unknown_leader_epoch
            elif plog.offline is not None:
                # A failed fsync took it offline (storage/flusher.py): as Kafka answers
                # a partition of an offline log directory, until the broker restarts.
                error = ErrorCode.kafka_storage_error
            else:
                touched.append(plog)
                hw = plog.high_watermark
                lso = plog.last_stable_offset
                start = plog.log_start_offset
                offset = fp.fetch_offset
                if offset < plog.log_start_offset or offset > plog.log_end_offset:
                    error = ErrorCode.offset_out_of_range
                elif remaining > 0:
                    limit = lso if read_committed else hw
                    result = plog.read(offset, min(fp.partition_max_bytes, remaining),
                                       max_offset=limit, min_one=min_one)
                    if result.data:
                        records = result.data
                        if read_committed:
                            aborted = tuple(
                                build(schema.AbortedTransaction, producer_id=a.producer_id,
                                      first_offset=a.first_offset)
                                for a in plog.aborted_transactions(offset, result.next_offset))
                        remaining -= len(records)
                        total += len(records)
                        min_one = False
            if error not in (ErrorCode.none, ErrorCode.topic_authorization_failed):
                any_error = True
            parts.append(build(schema.PartitionData, partition_index=fp.partition,
                               error_code=error, high_watermark=hw, last_stable_offset=lso,
                               log_start_offset=start,
                               aborted_transactions=(aborted or ()) if read_committed else None,
                               preferred_read_replica=-1, records=records))
        topics.append(build(schema.FetchableTopicResponse, topic=topic_name,
                            partitions=tuple(parts)))
    return tuple(topics), total, any_error, touched


async def handle(ctx: RequestContext, request):
    broker = ctx.broker
    session_epoch = getattr(request, "session_epoch", -1)
    if session_epoch not in (-1, 0):
        # An incremental fetch; no session is ever cached, so none is found (also for id 0,
        # as Kafka's FetchManager answers it).
        return build(ctx.response_type, throttle_time=_ZERO,
                     error_code=ErrorCode.fetch_session_id_not_found, session_id=0, responses=())
    read_committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
    max_wait = _ms(request.max_wait) / 1000
    min_bytes = request.min_bytes
    deadline = time.monotonic() + max_wait
    loop = asyncio.get_running_loop()
    partitions = requested_partitions(request)
    denied = unreadable_topics(ctx, request, partitions)
    while True:
        topics, total, any_error, touched = _collect(ctx, request, read_committed, partitions,
                                                     denied)
        remaining = deadline - time.monotonic()
        if total >= min_bytes or any_error or remaining <= 0 or broker.stopping.is_set() \
                or not touched:
            break
        wake = loop.create_future()
        for plog in touched:
            plog.add_waiter(wake)
        stop_wait = asyncio.ensure_future(broker.stopping.wait())
        try:
            await asyncio.wait([wake, stop_wait], timeout=remaining,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop_wait.cancel()
            for plog in touched:
                plog.remove_waiter(wake)
            if not wake.done():
                wake.cancel()
    if not any_error and not denied:
        ctx.error_codes = ()  # for /metrics: no partition of this response to look at
    return build(ctx.response_type, throttle_time=_ZERO, error_code=ErrorCode.none,
                 session_id=0, responses=topics)
