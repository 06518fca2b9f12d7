"""OffsetFetch (key 9): committed offsets, one group (v1-7) or several (v8+);
require_stable (v7+, KIP-447) answers UNSTABLE_OFFSET_COMMIT while a
transactional commit is pending."""

from __future__ import annotations

from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ._groups import ZERO, code

API_KEY = 9
MIN_VERSION = 1
MAX_VERSION = 9


def _wanted(topics):
    if topics is None:
        return None
    return [(t.name, p) for t in topics for p in t.partition_indexes]


def _group_topics(ctx, schema, found, topics_cls, partition_cls):
    by_topic: dict[str, list] = {}
    for (topic, partition), (offset, epoch, metadata, error) in found.items():
        by_topic.setdefault(topic, []).append(
            build(partition_cls, partition_index=partition, committed_offset=offset,
                  committed_leader_epoch=epoch, metadata=metadata, error_code=code(error)))
    return tuple(build(topics_cls, name=t, partitions=tuple(ps)) for t, ps in by_topic.items())


async def handle(ctx, request):
    groups = ctx.broker.groups
    schema = ctx.schema
    require_stable = bool(getattr(request, "require_stable", False))
    if ctx.version >= 8:
        out = []
        for g in request.groups:
            error, found = groups.fetch_offsets(g.group_id, _wanted(g.topics), require_stable)
            out.append(build(schema.OffsetFetchResponseGroup, group_id=g.group_id,
                             topics=_group_topics(ctx, schema, found,
                                                  schema.OffsetFetchResponseTopics,
                                                  schema.OffsetFetchResponsePartitions),
                             error_code=code(error)))
        return build(ctx.response_type, throttle_time=ZERO, groups=tuple(out))
    error, found = groups.fetch_offsets(request.group_id, _wanted(request.topics), require_stable)
    topics = _group_topics(ctx, schema, found, schema.OffsetFetchResponseTopic,
                           schema.OffsetFetchResponsePartition)
    if ctx.version < 2 and error != ErrorCode.none.value:
        # v0-1 have no top-level error: report it on every requested partition.
        found = {tp: (-1, -1, "", error) for tp in (_wanted(request.topics) or [])}
        topics = _group_topics(ctx, schema, found, schema.OffsetFetchResponseTopic,
                               schema.OffsetFetchResponsePartition)
    return build(ctx.response_type, throttle_time=ZERO, topics=topics, error_code=code(error))
