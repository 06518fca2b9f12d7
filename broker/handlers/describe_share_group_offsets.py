"""DescribeShareGroupOffsets (key 90, v0-1): per share group, per topic-partition, the
share-partition start offset (SPSO), its leader epoch and (v1) the lag, as Kafka's
``kafka-share-groups.sh --describe --offsets`` shows them. Null topics: every
partition of the group with a share state. Served only at share.version >= 1.

Authorization as Kafka's KafkaApis: DESCRIBE on the group (GROUP_AUTHORIZATION_FAILED
for the group), DESCRIBE on each named topic (TOPIC_AUTHORIZATION_FAILED on its
partitions; with null topics the unauthorized topics are left out). An unknown topic
gets UNKNOWN_TOPIC_OR_PARTITION on its partitions, an unknown group (or a classic or
consumer group) GROUP_ID_NOT_FOUND. A partition without a share state answers start
offset -1, as Kafka's share coordinator does."""

from __future__ import annotations

import uuid

from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ..context import RequestContext
from ._groups import DESCRIBE, GROUP, TOPIC, ZERO
from ._share import DISABLED, other_group_type, share_enabled

API_KEY = 90
MIN_VERSION = 0
MAX_VERSION = 1

_UNKNOWN = -1
_NO_UUID = uuid.UUID(int=0)


def _group(schema, group_id, error, message=None, topics=()):
    return build(schema.DescribeShareGroupOffsetsResponseGroup, group_id=group_id,
                 topics=tuple(topics), error_code=error, error_message=message)


def _partition(schema, p, start=_UNKNOWN, epoch=_UNKNOWN, lag=_UNKNOWN,
               error=ErrorCode.none, message=None):
    return build(schema.DescribeShareGroupOffsetsResponsePartition, partition_index=p,
                 start_offset=start, leader_epoch=epoch, lag=lag, error_code=error,
                 error_message=message)


def _lag(ctx, name: str, p: int, start: int, complete: int) -> int:
    """Kafka's share-partition lag: the records from the SPSO to the high watermark not
    yet in a final state (-1 when not known)."""
    plog = ctx.broker.logs.get_log(name, p)
    if plog is None or start < 0 or complete < 0:
        return _UNKNOWN
    return max(0, plog.high_watermark - start - complete)


async def handle(ctx: RequestContext, request):
    schema = ctx.schema
    if not share_enabled(ctx):
        return build(ctx.response_type, throttle_time=ZERO, groups=tuple(
            _group(schema, g.group_id, *DISABLED) for g in request.groups))
    shares = ctx.broker.shares
    topics_info = ctx.broker.logs.topics
    names = {info.topic_id: name for name, info in topics_info.items()}
    out = []
    for req in request.groups:
        group_id = req.group_id
        if not ctx.authorize(DESCRIBE, GROUP, group_id):
            out.append(_group(schema, group_id, ErrorCode.group_authorization_failed))
            continue
        if shares.share_group_state(group_id) is None:
            message = (f"Group {group_id} is not a share group."
                       if other_group_type(ctx, group_id) else f"Group {group_id} not found.")
            out.append(_group(schema, group_id, ErrorCode.group_id_not_found, message))
            continue
        state = shares.partition_offsets(group_id)
        if req.topics is None:
            wanted: dict[str, list[int]] = {}
            for (tid, p) in sorted(state, key=lambda tp: (names.get(tp[0], ""), tp[1])):
                if tid in names:
                    wanted.setdefault(names[tid], []).append(p)
            allowed = ctx.authorized(DESCRIBE, TOPIC, set(wanted))
            asked = [(t, ps) for t, ps in wanted.items() if t in allowed]
        else:
            asked = [(t.topic_name, list(t.partitions)) for t in req.topics]
            allowed = ctx.authorized(DESCRIBE, TOPIC, {t for t, _ in asked})
        topics = []
        for name, partitions in asked:
            info = topics_info.get(name)
            if name not in allowed:
                parts = [_partition(schema, p, error=ErrorCode.topic_authorization_failed)
                         for p in partitions]
            elif info is None:
                parts = [_partition(schema, p, error=ErrorCode.unknown_topic_or_partition,
                                    message="The topic does not exist.")
                         for p in partitions]
            else:
                parts = []
                for p in partitions:
                    if not 0 <= p < info.partitions:
                        parts.append(_partition(schema, p,
                                                error=ErrorCode.unknown_topic_or_partition,
                                                message="The partition does not exist."))
                        continue
                    got = state.get((info.topic_id, p))
                    if got is None:
                        parts.append(_partition(schema, p))
                    else:
                        start, epoch, complete = got
                        parts.append(_partition(schema, p, start, epoch,
                                                _lag(ctx, name, p, start, complete)))
            topics.append(build(schema.DescribeShareGroupOffsetsResponseTopic, topic_name=name,
                                topic_id=info.topic_id if info is not None else _NO_UUID,
                                partitions=tuple(parts)))
        out.append(_group(schema, group_id, ErrorCode.none, topics=topics))
    return build(ctx.response_type, throttle_time=ZERO, groups=tuple(out))
