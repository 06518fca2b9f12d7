"""OffsetFetch (key 9): committed offsets, one group (v1-7) or several (v8+);
require_stable (v7+, KIP-447) answers UNSTABLE_OFFSET_COMMIT while a
transactional commit is pending; v9 carries the member id and epoch of a
consumer-protocol group (KIP-848); v10 names topics by id (UNKNOWN_TOPIC_ID for an id no
topic has; offsets of topics that no longer exist are left out of an all-topics
answer)."""

from __future__ import annotations

from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ..context import RequestContext
from ._groups import DESCRIBE, GROUP, TOPIC, ZERO, code, names_by_topic_id

API_KEY = 9
MIN_VERSION = 1
MAX_VERSION = 10
TOPIC_IDS_SINCE = 10


def _wanted(topics, names: dict | None = None):
    """The (topic name, partition) pairs asked for; v10 names topics by id (an unknown
    id: the name "")."""
    if topics is None:
        return None
    if names is None:
        return [(t.name, p) for t in topics for p in t.partition_indexes]
    return [(names.get(t.topic_id, ""), p) for t in topics for p in t.partition_indexes]


def _group_topics(ctx, schema, found, topics_cls, partition_cls, requested=None):
    """The response topics; from v10 by topic id (``requested``: the request's topics,
    so that an unknown id is answered with that id)."""
    by_id = ctx.version >= TOPIC_IDS_SINCE
    ids = {name: info.topic_id for name, info in ctx.broker.logs.topics.items()} if by_id \
        else {}
    by_topic: dict = {}
    unknown = {}
    if by_id and requested is not None:
        known = set(ids.values())
        unknown = {t.topic_id: t.partition_indexes for t in requested if t.topic_id not in known}
    for (topic, partition), (offset, epoch, metadata, error) in found.items():
        if by_id and topic not in ids:
            continue  # an unknown id (answered below) or a topic deleted since the commit
        by_topic.setdefault(topic, []).append(
            build(partition_cls, partition_index=partition, committed_offset=offset,
                  committed_leader_epoch=epoch, metadata=metadata, error_code=code(error)))
    if not by_id:
        return tuple(build(topics_cls, name=t, partitions=tuple(ps))
                     for t, ps in by_topic.items())
    out = [build(topics_cls, topic_id=ids[t], partitions=tuple(ps)) for t, ps in by_topic.items()]
    out += [build(topics_cls, topic_id=tid, partitions=tuple(
        build(partition_cls, partition_index=p, committed_offset=-1, committed_leader_epoch=-1,
              metadata="", error_code=ErrorCode.unknown_topic_id) for p in parts))
        for tid, parts in unknown.items()]
    return tuple(out)


def _fetch(ctx, group_id: str, topics, require_stable: bool, member_id: str | None = None,
           member_epoch: int = -1, names: dict | None = None) -> tuple[int, dict]:
    """Kafka's checks around the coordinator's answer: DESCRIBE on the group, and on
    each topic: of all the group's offsets only the describable topics' are shown; a
    named topic that is not gets TOPIC_AUTHORIZATION_FAILED."""
    if not ctx.authorize(DESCRIBE, GROUP, group_id):
        return ErrorCode.group_authorization_failed.value, {}
    if ctx.broker.shares.is_share_group(group_id):
        # Kafka's ShareGroup.validateOffsetFetch: "not a consumer group".
        return ErrorCode.group_id_not_found.value, {}
    if ctx.version >= 9 and ctx.broker.groups.is_ready(group_id):
        # v9 carries the member of a consumer-protocol group (KIP-848).
        error = ctx.broker.groups.consumer_fetch_error(group_id, member_id, member_epoch)
        if error == ErrorCode.none.value:  # a streams member (KIP-1071) is checked alike
            error = ctx.broker.groups.streams_fetch_error(group_id, member_id, member_epoch)
        if error != ErrorCode.none.value:
            return error, {}
    wanted = _wanted(topics, names)
    if wanted is not None and names is not None:
        wanted = [tp for tp in wanted if tp[0]]  # unknown ids: UNKNOWN_TOPIC_ID
    error, found = ctx.broker.groups.fetch_offsets(group_id, wanted, require_stable)
    if ctx.broker.authorizer is None or not found:
        return error, found
    describable = ctx.authorized(DESCRIBE, TOPIC, {t for t, _ in found},
                                 log_denied=topics is not None)
    if topics is None:
        return error, {tp: v for tp, v in found.items() if tp[0] in describable}
    denied = (-1, -1, "", ErrorCode.topic_authorization_failed.value)
    return error, {tp: v if tp[0] in describable else denied for tp, v in found.items()}


async def handle(ctx: RequestContext, request):
    schema = ctx.schema
    require_stable = bool(getattr(request, "require_stable", False))
    if ctx.version >= 8:
        out = []
        names = names_by_topic_id(ctx) if ctx.version >= TOPIC_IDS_SINCE else None
        for g in request.groups:
            error, found = _fetch(ctx, g.group_id, g.topics, require_stable,
                                  getattr(g, "member_id", None),
                                  int(getattr(g, "member_epoch", -1)), names)
            topics = _group_topics(ctx, schema, found, schema.OffsetFetchResponseTopics,
                                   schema.OffsetFetchResponsePartitions,
                                   g.topics if error == ErrorCode.none.value else None)
            out.append(build(schema.OffsetFetchResponseGroup, group_id=g.group_id,
                             topics=topics, error_code=code(error)))
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
