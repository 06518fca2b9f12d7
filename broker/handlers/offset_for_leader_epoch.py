"""OffsetForLeaderEpoch (key 23, KIP-101/KIP-320): the end offset of a leader epoch.

The Java consumer asks it to validate its position after a metadata change (KIP-320).
One broker leads every partition in epoch 0 from its creation, so epoch 0 ends at the
log end offset; an epoch this broker never had is answered (-1, -1), as Kafka answers
an epoch above its latest, and a current epoch above 0 is UNKNOWN_LEADER_EPOCH.
Versions 0-1 are gone from Kafka 4 (KIP-896)."""

from __future__ import annotations

import datetime

from txbroker.protocol.acls import AclOperation, ResourceType
from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ..context import RequestContext

API_KEY = 23
MIN_VERSION = 2
MAX_VERSION = 4

LEADER_EPOCH = 0
UNDEFINED = -1
_ZERO = datetime.timedelta(0)


def _end_offset(logs, topic: str, p) -> tuple[ErrorCode, int, int]:
    """(error, leader epoch, end offset) of one partition."""
    plog = logs.get_log(topic, p.partition)
    if plog is None:
        return ErrorCode.unknown_topic_or_partition, UNDEFINED, UNDEFINED
    current = getattr(p, "current_leader_epoch", -1)
    if current > LEADER_EPOCH:
        return ErrorCode.unknown_leader_epoch, UNDEFINED, UNDEFINED
    if p.leader_epoch != LEADER_EPOCH:
        return ErrorCode.none, UNDEFINED, UNDEFINED
    return ErrorCode.none, LEADER_EPOCH, plog.log_end_offset


async def handle(ctx: RequestContext, request):
    logs = ctx.broker.logs
    schema = ctx.schema
    topics = []
    # Kafka: CLUSTER_ACTION on the cluster (a follower) or DESCRIBE on each topic.
    describable = None if ctx.authorize_cluster(AclOperation.CLUSTER_ACTION, log_denied=False) \
        else ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC,
                            (t.topic for t in request.topics))
    for t in request.topics:
        parts = []
        for p in t.partitions:
            if describable is not None and t.topic not in describable:
                error, epoch, end = ErrorCode.topic_authorization_failed, UNDEFINED, UNDEFINED
            else:
                error, epoch, end = _end_offset(logs, t.topic, p)
            parts.append(build(schema.EpochEndOffset, error_code=error, partition=p.partition,
                               leader_epoch=epoch, end_offset=end))
        topics.append(build(schema.OffsetForLeaderTopicResult, topic=t.topic,
                            partitions=tuple(parts)))
    return build(ctx.response_type, throttle_time=_ZERO, topics=tuple(topics))
