"""DescribeShareGroupOffsets (key 90, v0-1): per share group, per topic-partition, the
share-partition start offset (SPSO), its leader epoch and (v1) the lag, as Kafka's
``kafka-share-groups.sh --describe --offsets`` shows them. Served only at
share.version >= 1.

As Kafka 4.4 answers it: DESCRIBE on the group (else GROUP_AUTHORIZATION_FAILED for the
group). Null topics: every partition of the group with a share state, the topics the
principal may not DESCRIBE left out (an unknown group: no topics). Named topics: no
group check at all (Kafka reads the share state without one); a topic it may not
DESCRIBE gets TOPIC_AUTHORIZATION_FAILED on its partitions (listed last, topic id
zero); a topic that does not exist, or a partition without a share state, answers start
offset -1, leader epoch 0 and lag -1 with no error ("no offset information", as
OffsetFetch). The lag is Kafka's: high watermark - SPSO - records already in a final
state after the SPSO."""

from __future__ import annotations

import uuid

from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ..context import RequestContext
from ._groups import DESCRIBE, GROUP, TOPIC, ZERO
from ._share import DISABLED, share_enabled

API_KEY = 90
MIN_VERSION = 0
MAX_VERSION = 1

_UNKNOWN = -1
_NO_UUID = uuid.UUID(int=0)
_TOPIC_AUTH_MESSAGE = "Topic authorization failed."


def _group(schema, group_id, error, message=None, topics=()):
    return build(schema.DescribeShareGroupOffsetsResponseGroup, group_id=group_id,
                 topics=tuple(topics), error_code=error, error_message=message)


def _partition(schema, p, start=_UNKNOWN, epoch=0, lag=_UNKNOWN,
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
    return plog.high_watermark - start - complete


async def handle(ctx: RequestContext, request):
    schema = ctx.schema
    if not share_enabled(ctx):
        return build(ctx.response_type, throttle_time=ZERO, groups=tuple(
            _group(schema, g.group_id, *DISABLED) for g in request.groups))
    out = []
    for req in request.groups:
        if not ctx.authorize(DESCRIBE, GROUP, req.group_id):
            out.append(_group(schema, req.group_id, ErrorCode.group_authorization_failed))
        else:
            out.append(_described(ctx, schema, req))
    return build(ctx.response_type, throttle_time=ZERO, groups=tuple(out))


def _described(ctx, schema, req):
    group_id = req.group_id
    topics_info = ctx.broker.logs.topics
    names = {info.topic_id: name for name, info in topics_info.items()}
    state = ctx.broker.shares.partition_offsets(group_id)
    denied: list = []
    if req.topics is None:
        wanted: dict[str, list[int]] = {}
        for tid, p in sorted(state, key=lambda tp: (names.get(tp[0], ""), tp[1])):
            if tid in names:
                wanted.setdefault(names[tid], []).append(p)
        allowed = ctx.authorized(DESCRIBE, TOPIC, set(wanted))
        asked = [(t, ps) for t, ps in wanted.items() if t in allowed]
    else:
        allowed = ctx.authorized(DESCRIBE, TOPIC, {t.topic_name for t in req.topics})
        asked = [(t.topic_name, list(t.partitions)) for t in req.topics if t.topic_name in allowed]
        denied = [(t.topic_name, list(t.partitions)) for t in req.topics
                  if t.topic_name not in allowed]
    known, unknown = [], []
    for name, partitions in asked:
        info = topics_info.get(name)
        if info is None:
            unknown.append(build(schema.DescribeShareGroupOffsetsResponseTopic, topic_name=name,
                                 topic_id=_NO_UUID, partitions=tuple(
                                     _partition(schema, p) for p in partitions)))
            continue
        parts = []
        for p in partitions:
            got = state.get((info.topic_id, p))
            if got is None:
                parts.append(_partition(schema, p))
            else:
                start, epoch, complete = got
                parts.append(_partition(schema, p, start, epoch,
                                        _lag(ctx, name, p, start, complete)))
        known.append(build(schema.DescribeShareGroupOffsetsResponseTopic, topic_name=name,
                           topic_id=info.topic_id, partitions=tuple(parts)))
    refused = [build(schema.DescribeShareGroupOffsetsResponseTopic, topic_name=name,
                     topic_id=_NO_UUID, partitions=tuple(
                         _partition(schema, p, error=ErrorCode.topic_authorization_failed,
                                    message=_TOPIC_AUTH_MESSAGE) for p in partitions))
               for name, partitions in denied]
    return _group(schema, group_id, ErrorCode.none, topics=known + unknown + refused)
