"""OffsetFetch (key 9): committed offsets, one group (v1-7) or several (v8+);
require_stable (v7+, KIP-447) answers UNSTABLE_OFFSET_COMMIT while a
transactional commit is pending."""

from __future__ import annotations

from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ._groups import DESCRIBE, GROUP, TOPIC, ZERO, code

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


def _fetch(ctx, group_id: str, topics, require_stable: bool, member_id: str | None = None,
           member_epoch: int = -1) -> tuple[int, dict]:
    """Kafka's checks around the coordinator's answer: DESCRIBE on the group, and on
    each topic: of all the group's offsets only the describable topics' are shown; a
    named topic that is not gets TOPIC_AUTHORIZATION_FAILED."""
    if not ctx.authorize(DESCRIBE, GROUP, group_id):
        return ErrorCode.group_authorization_failed.value, {}
    if ctx.version >= 9 and ctx.broker.groups.is_ready(group_id):
        # v9 carries the member of a consumer-protocol group (KIP-848).
        error = ctx.broker.groups.consumer_fetch_error(group_id, member_id, member_epoch)
        if error != ErrorCode.none.value:
            return error, {}
    error, found = ctx.broker.groups.fetch_offsets(group_id, _wanted(topics), require_stable)
    if ctx.broker.authorizer is None or not found:
        return error, found
    describable = ctx.authorized(DESCRIBE, TOPIC, {t for t, _ in found},
                                 log_denied=topics is not None)
    if topics is None:
        return error, {tp: v for tp, v in found.items() if tp[0] in describable}
    denied = (-1, -1, "", ErrorCode.topic_authorization_failed.value)
    return error, {tp: v if tp[0] in describable else denied for tp, v in found.items()}


async def handle(ctx, request):
    schema = ctx.schema
    require_stable = bool(getattr(request, "require_stable", False))
    if ctx.version >= 8:
        out = []
        for g in request.groups:
            error, found = _fetch(ctx, g.group_id, g.topics, require_stable,
                                  getattr(g, "member_id", None),
                                  int(getattr(g, "member_epoch", -1)))
            out.append(build(schema.OffsetFetchResponseGroup, group_id=g.group_id,
                             topics=_group_topics(ctx, schema, found,
                                                  schema.OffsetFetchResponseTopics,
                                                  schema.OffsetFetchResponsePartitions),
                             error_code=code(error)))
        return build(ctx.response_type, throttle_time=ZERO, groups=tuple(out))
    error, found = _fetch(ctx, request.group_id, request.topics, require_stable)
    topics = _group_topics(ctx, schema, found, schema.OffsetFetchResponseTopic,
                           schema.OffsetFetchResponsePartition)
    if ctx.version < 2 and error != ErrorCode.none.value:
        # v0-1 have no top-level error: report it on every requested partition.
        found = {tp: (-1, -1, "", error) for tp in (_wanted(request.topics) or [])}
        topics = _group_topics(ctx, schema, found, schema.OffsetFetchResponseTopic,
                               schema.OffsetFetchResponsePartition)
    return build(ctx.response_type, throttle_time=ZERO, topics=topics, error_code=code(error))
