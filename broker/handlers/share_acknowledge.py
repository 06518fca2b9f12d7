"""ShareAcknowledge (key 79, v1-2): a share-group member acknowledges records it
acquired (ACCEPT, RELEASE, REJECT, GAP; RENEW from v2), in its share session: the
epoch must be the session's current one (0 cannot open a session:
INVALID_SHARE_SESSION_EPOCH), -1 closes it and releases what the member still holds.
Answered once the new states are durable. Served only at share.version >= 1."""

from __future__ import annotations

import datetime

from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ..context import CloseConnection, RequestContext
from ._groups import ZERO, may_read_group
from ._share import DISABLED, leader, share_enabled
from .share_fetch import acknowledgements, invalid_ids, missing_partitions, unreadable

API_KEY = 79
MIN_VERSION = 1
MAX_VERSION = 2


def _top(ctx, error, message=None, lock_ms: int = 0, responses=()):
    return build(ctx.response_type, throttle_time=ZERO, error_code=error, error_message=message,
                 acquisition_lock_timeout=datetime.timedelta(milliseconds=lock_ms),
                 responses=responses, node_endpoints=())


async def handle(ctx: RequestContext, request):
    if not share_enabled(ctx):
        return _top(ctx, *DISABLED)
    shares = ctx.broker.shares
    group_id, member_id = request.group_id or "", request.member_id or ""
    if (refused := invalid_ids(request)) is not None:
        return _top(ctx, *refused)
    if not may_read_group(ctx, group_id):
        return _top(ctx, ErrorCode.group_authorization_failed)
    epoch = int(request.share_session_epoch)
    error, message = shares.check_session(group_id, member_id, epoch, fetch=False)
    if error != ErrorCode.none.value:
        return _top(ctx, ErrorCode(error), message)
    requested = [(t.topic_id, p.partition_index) for t in request.topics for p in t.partitions]
    missing = missing_partitions(ctx, requested)  # Kafka: UNKNOWN_TOPIC_ID / _OR_PARTITION
    denied = unreadable(ctx, requested)
    acks = {tp: b for tp, b in acknowledgements(request.topics).items()
            if tp not in denied and tp not in missing}
    # The session moves on in the same turn of the loop as its check.
    shares.update_session(group_id, member_id, epoch, (), (), ctx.session)
    results = await shares.acknowledge(group_id, member_id, acks) if acks else {}
    if acks and await ctx.broker.faults.hit("after_share_acknowledge_durable"):
        raise CloseConnection
    if epoch == -1:
        await shares.close_session(group_id, member_id)
    schema = ctx.schema
    by_topic: dict = {}
    for tid, p in requested:
        err, msg = (ErrorCode.topic_authorization_failed.value, None) if (tid, p) in denied \
            else (missing[(tid, p)], None) if (tid, p) in missing \
            else results.get((tid, p), (0, None))
        by_topic.setdefault(tid, []).append(build(
            schema.PartitionData, partition_index=p, error_code=ErrorCode(err), error_message=msg,
            current_leader=leader(ctx, schema.LeaderIdAndEpoch)))
    responses = tuple(build(schema.ShareAcknowledgeTopicResponse, topic_id=tid,
                            partitions=tuple(ps)) for tid, ps in by_topic.items())
    lock_ms = shares.partition_config(group_id).record_lock_duration_ms  # the group's own
    return _top(ctx, ErrorCode.none, None, lock_ms, responses)
