"""ShareGroupHeartbeat (key 76, v1): share-group membership (KIP-932): join with
member epoch 0 and the subscribed topic names, heartbeat with the current epoch, leave
with -1. The assignment comes by topic id; membership is in memory (see
coordinator/share/group.py). Served only at share.version >= 1."""

from __future__ import annotations

import datetime
import logging

from txbroker.coordinator.share.group import ShareHeartbeat
from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ..context import RequestContext
from ._groups import ZERO, client_host, may_read_group
from ._share import DISABLED, other_group_type, share_enabled

API_KEY = 76
MIN_VERSION = 1
MAX_VERSION = 1

log = logging.getLogger(__name__)


def _answer(ctx, error: ErrorCode, message: str | None = None, **fields):
    return build(ctx.response_type, throttle_time=ZERO, error_code=error, error_message=message,
                 member_id=fields.get("member_id"), member_epoch=fields.get("member_epoch", 0),
                 heartbeat_interval=fields.get("heartbeat_interval", ZERO),
                 assignment=fields.get("assignment"))


async def handle(ctx: RequestContext, request):
    if not share_enabled(ctx):
        return _answer(ctx, *DISABLED)
    if not may_read_group(ctx, request.group_id):
        return _answer(ctx, ErrorCode.group_authorization_failed)
    if request.group_id and other_group_type(ctx, request.group_id):
        return _answer(ctx, ErrorCode.group_id_not_found,
                       f"Group {request.group_id} is not a share group.")
    names = request.subscribed_topic_names
    req = ShareHeartbeat(group_id=request.group_id, member_id=request.member_id,
                         member_epoch=int(request.member_epoch), rack_id=request.rack_id,
                         subscribed_topic_names=None if names is None else tuple(names),
                         client_id=ctx.header.client_id or "", client_host=client_host(ctx.peer))
    result = ctx.broker.shares.heartbeat(req)
    error = ErrorCode(result.error)
    if error is not ErrorCode.none:
        log.info("ShareGroupHeartbeat of group %r member %r epoch %d: %s: %s", req.group_id,
                 req.member_id, req.member_epoch, error.name, result.message)
        return _answer(ctx, error, result.message)
    schema = ctx.schema
    assignment = None
    if result.assignment is not None:
        assignment = build(schema.Assignment, topic_partitions=tuple(
            build(schema.TopicPartitions, topic_id=tid, partitions=tuple(sorted(ps)))
            for tid, ps in sorted(result.assignment.items()) if ps))
    return _answer(ctx, ErrorCode.none, None, member_id=result.member_id,
                   member_epoch=result.member_epoch,
                   heartbeat_interval=datetime.timedelta(milliseconds=result.heartbeat_interval_ms),
                   assignment=assignment)
