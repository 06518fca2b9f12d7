"""ShareFetch (key 78, v1-2): share sessions, piggy-backed acknowledgements and the
acquisition of records for a share-group member (KIP-932), with a long poll like
Fetch's. Served only at share.version >= 1.

Order: the session epoch is checked (SHARE_SESSION_NOT_FOUND /
INVALID_SHARE_SESSION_EPOCH / SHARE_SESSION_LIMIT_REACHED are top-level errors) and the
session updated at once (epoch 0 opens it with the request's partitions, later epochs
add the request's and drop the forgotten ones, -1 closes it), the acknowledgements are
applied (their errors per partition, AcknowledgeErrorCode), a closing request releases
the member's records and fetches nothing, else the session's partitions
are read and their records acquired; with nothing acquired the request waits up to
MaxWaitMs for new records (or records released by other members, noticed within
RELEASE_POLL_S). The answer is sent once the acquisitions and acknowledgements are
durable. An answer lists only the partitions with records, errors or acknowledgement
results, also a new session's (as Kafka 4.4).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time

from txbroker.coordinator.share.results import AcknowledgementBatch
from txbroker.protocol.acls import AclOperation, ResourceType
from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ..context import CloseConnection, RequestContext
from ._groups import ZERO, may_read_group, ms
from ._share import DISABLED, leader, share_enabled

log = logging.getLogger(__name__)

API_KEY = 78
MIN_VERSION = 1
MAX_VERSION = 2

# A waiting ShareFetch looks again this often for records another member released
# (lock expiry, RELEASE): the log's waiters only wake on new records.
RELEASE_POLL_S = 0.25
DEFAULT_MAX_RECORDS = 500


def _top(ctx, error, message=None, lock_ms: int = 0, responses=()):
    return build(ctx.response_type, throttle_time=ZERO, error_code=error, error_message=message,
                 acquisition_lock_timeout=datetime.timedelta(milliseconds=lock_ms),
                 responses=responses, node_endpoints=())


def invalid_ids(request) -> tuple[ErrorCode, str] | None:
    """The checks before the share session (ShareFetch and ShareAcknowledge): a null
    group id is INVALID_REQUEST, as Kafka 4.4 answers; an empty one INVALID_GROUP_ID
    (Kafka opens a session for it whose share-partitions it never initializes:
    docs/compatibility.md); an empty member id INVALID_REQUEST."""
    if request.group_id is None:
        return ErrorCode.invalid_request, "Invalid group id in the request."
    if not request.group_id:
        return ErrorCode.invalid_group_id, "Invalid group id in the request."
    if not request.member_id:
        return ErrorCode.invalid_request, "Invalid member id in the request."
    return None


def acknowledgements(topics) -> dict:
    """(topic id, partition) -> its AcknowledgementBatches, for the partitions that have
    some (ShareFetch and ShareAcknowledge share the shape)."""
    out = {}
    for t in topics:
        for p in t.partitions:
            if p.acknowledgement_batches:
                out[(t.topic_id, p.partition_index)] = [
                    AcknowledgementBatch(b.first_offset, b.last_offset,
                                         tuple(int(x) for x in b.acknowledge_types))
                    for b in p.acknowledgement_batches]
    return out


def unreadable(ctx, tps) -> set:
    """The partitions of topics the principal may not READ (or that do not exist)."""
    names = {info.topic_id: name for name, info in ctx.broker.logs.topics.items()}
    if ctx.broker.authorizer is None:
        return set()
    allowed = ctx.authorized(AclOperation.READ, ResourceType.TOPIC,
                             {names[t] for t, _ in tps if t in names})
    return {(t, p) for t, p in tps if names.get(t) not in allowed}


async def handle(ctx: RequestContext, request):
    if not share_enabled(ctx):
        return _top(ctx, *DISABLED)
    broker = ctx.broker
    shares = broker.shares
    group_id, member_id = request.group_id or "", request.member_id or ""
    if (refused := invalid_ids(request)) is not None:
        return _top(ctx, *refused)
    if not may_read_group(ctx, group_id):
        return _top(ctx, ErrorCode.group_authorization_failed)
    epoch = int(request.share_session_epoch)
    if epoch == 0 and any(p.acknowledgement_batches for t in request.topics for p in t.partitions):
        # Kafka's SharePartitionManager: a new session has nothing acquired to acknowledge.
        return _top(ctx, ErrorCode.invalid_request,
                    "Acknowledge data present in the initial ShareFetch request.")
    error, message = shares.check_session(group_id, member_id, epoch, fetch=True)
    if error != ErrorCode.none.value:
        return _top(ctx, ErrorCode(error), message)
    lock_ms = shares.partition_config(group_id).record_lock_duration_ms  # the group's own
    requested = [(t.topic_id, p.partition_index) for t in request.topics for p in t.partitions]
    # Only partitions that exist join the session (a client cannot grow it with made-up
    # ids); the others are answered with their error in this response only.
    missing = missing_partitions(ctx, requested)
    requested = [tp for tp in requested if tp not in missing]
    denied = unreadable(ctx, requested)
    acks = {tp: b for tp, b in acknowledgements(request.topics).items()
            if tp not in denied and tp not in missing}
    forgotten = [(t.topic_id, p) for t in request.forgotten_topics_data for p in t.partitions]
    # The session moves on in the same turn of the loop as its check: a request racing
    # this one sees the new epoch.
    session = shares.update_session(group_id, member_id, epoch, requested, forgotten,
                                    ctx.session)
    # v2's ShareAcquireMode: 0 batch_optimized (whole batches, max_records soft), 1
    # record_limit (at most max_records).
    acquire_mode = int(getattr(request, "share_acquire_mode", 0))
    record_limit = acquire_mode == 1
    if acquire_mode not in (0, 1):
        # Kafka 4.4 moves the session on, then fails the request in ShareAcquireMode.forId.
        log.info("ShareFetch from %s (group %r, member %s): unknown ShareAcquireMode %d",
                 ctx.peer, group_id, member_id, acquire_mode)
        return _top(ctx, ErrorCode.unknown_server_error,
                    f"Unknown ShareAcquireMode {acquire_mode} (0 batch_optimized, 1 record_limit).")
    ack_results = await shares.acknowledge(group_id, member_id, acks) if acks else {}
    if acks and await broker.faults.hit("after_share_acknowledge_durable"):
        raise CloseConnection  # (the drop action: the answer is lost)
    if epoch == -1:
        await shares.close_session(group_id, member_id)
    fetchable = [tp for tp in session if tp not in denied]
    max_records = int(getattr(request, "max_records", 0)) or DEFAULT_MAX_RECORDS
    max_bytes = min(request.max_bytes if request.max_bytes > 0 else 2**31 - 1,
                    broker.fetch_max_bytes)
    deadline = time.monotonic() + ms(request.max_wait) / 1000
    fetched: dict = {}
    while fetchable:
        fetched = await shares.acquire(group_id, member_id, fetchable,
                                       max_records=max_records, max_bytes=max_bytes,
                                       record_limit=record_limit)
        remaining = deadline - time.monotonic()
        if any(f.acquired or f.error for f in fetched.values()) or remaining <= 0 \
                or broker.stopping.is_set():
            break
        await _wait(ctx, fetchable, min(remaining, RELEASE_POLL_S))
    schema = ctx.schema
    # As Kafka 4.4, also for a new session (epoch 0): partitions without records, errors
    # or acknowledgement results are left out.
    shown = [tp for tp in session if tp in ack_results or tp in denied
             or (tp in fetched and (fetched[tp].acquired or fetched[tp].error))]
    shown += [tp for tp in ack_results if tp not in shown]
    shown += [tp for tp in missing if tp not in shown]
    by_topic: dict = {}
    for tid, p in shown:
        f = fetched.get((tid, p))
        err, msg = (ErrorCode.topic_authorization_failed.value, None) if (tid, p) in denied \
            else ((f.error, f.message) if f is not None else (missing.get((tid, p), 0), None))
        ack_err, ack_msg = ack_results.get((tid, p), (0, None))
        by_topic.setdefault(tid, []).append(build(
            schema.PartitionData, partition_index=p, error_code=ErrorCode(err), error_message=msg,
            acknowledge_error_code=ack_err, acknowledge_error_message=ack_msg,
            current_leader=leader(ctx, schema.LeaderIdAndEpoch),
            records=f.records if f is not None else b"",
            acquired_records=tuple(build(schema.AcquiredRecords, first_offset=a.first_offset,
                                         last_offset=a.last_offset,
                                         delivery_count=a.delivery_count)
                                   for a in (f.acquired if f is not None else ()))))
    responses = tuple(build(schema.ShareFetchableTopicResponse, topic_id=tid, partitions=tuple(ps))
                      for tid, ps in by_topic.items())
    return _top(ctx, ErrorCode.none, None, lock_ms, responses)


def missing_partitions(ctx, tps) -> dict:
    """(topic id, partition) -> UNKNOWN_TOPIC_ID / UNKNOWN_TOPIC_OR_PARTITION."""
    sizes = {info.topic_id: info.partitions for info in ctx.broker.logs.topics.values()}
    return {(t, p): (ErrorCode.unknown_topic_id.value if t not in sizes
                     else ErrorCode.unknown_topic_or_partition.value)
            for t, p in tps if not 0 <= p < sizes.get(t, 0)}


async def _wait(ctx, tps, timeout: float) -> None:
    """Until a partition's high watermark moves, the broker stops or ``timeout``."""
    names = {info.topic_id: name for name, info in ctx.broker.logs.topics.items()}
    plogs = [plog for t, p in tps
             if (plog := ctx.broker.logs.get_log(names.get(t, ""), p)) is not None]
    wake = asyncio.get_running_loop().create_future()
    for plog in plogs:
        plog.add_waiter(wake)
    stop_wait = asyncio.ensure_future(ctx.broker.stopping.wait())
    try:
        await asyncio.wait([wake, stop_wait], timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop_wait.cancel()
        for plog in plogs:
            plog.remove_waiter(wake)
        if not wake.done():
            wake.cancel()
