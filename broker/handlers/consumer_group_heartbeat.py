"""ConsumerGroupHeartbeat (key 68): the consumer group protocol of KIP-848 (join with
member epoch 0, heartbeat, leave with -1, static leave with -2). The coordinator
answers once the records of the change are durable; the assignment is sent by topic id."""

from __future__ import annotations

import datetime
import logging

from txbroker.coordinator.group.consumer_group import owned_from
from txbroker.coordinator.group.consumer_state import HeartbeatRequest
from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ..context import RequestContext
from ..features import GROUP_VERSION
from ._groups import ZERO, client_host, may_read_group, ms

API_KEY = 68
MIN_VERSION = 0
MAX_VERSION = 1

log = logging.getLogger(__name__)


def _answer(ctx, error: ErrorCode, message: str | None = None, **fields):
    return build(ctx.response_type, throttle_time=ZERO, error_code=error, error_message=message,
                 member_id=fields.get("member_id"), member_epoch=fields.get("member_epoch", 0),
                 heartbeat_interval=fields.get("heartbeat_interval", ZERO),
                 assignment=fields.get("assignment"))


async def handle(ctx: RequestContext, request):
    if ctx.broker.features.level(GROUP_VERSION) < 1:
        # Kafka with group.version 0: the consumer protocol is not enabled.
        return _answer(ctx, ErrorCode.unsupported_version,
                       "The new group coordinator is not enabled (group.version 0).")
    if not may_read_group(ctx, request.group_id):
        return _answer(ctx, ErrorCode.group_authorization_failed)
    if request.group_id and (ctx.broker.shares.is_share_group(request.group_id)
                             or ctx.broker.groups.is_streams_group(request.group_id)):
        # One id names one group type: as Kafka answers for a share group's id.
        return _answer(ctx, ErrorCode.group_id_not_found,
                       f"Group {request.group_id} is not a consumer group.")
    rebalance = request.rebalance_timeout
    req = HeartbeatRequest(
        group_id=request.group_id, member_id=request.member_id,
        member_epoch=int(request.member_epoch), instance_id=request.instance_id,
        rack_id=request.rack_id,
        rebalance_timeout_ms=ms(rebalance) if rebalance is not None else -1,
        subscribed_topic_names=None if request.subscribed_topic_names is None
        else tuple(request.subscribed_topic_names),
        # v1 added the regex (KIP-848's v0 has no such field).
        subscribed_topic_regex=getattr(request, "subscribed_topic_regex", None),
        server_assignor=request.server_assignor, owned=owned_from(request.topic_partitions),
        client_id=ctx.header.client_id or "", client_host=client_host(ctx.peer),
        version=ctx.version)
    result = await ctx.broker.groups.consumer_heartbeat(req)
    error = ErrorCode(result.error)
    if error is not ErrorCode.none:
        if result.message:
            log.info("ConsumerGroupHeartbeat of group %r member %r epoch %d: %s: %s",
                     req.group_id, req.member_id, req.member_epoch, error.name, result.message)
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
