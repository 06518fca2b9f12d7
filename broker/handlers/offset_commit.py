"""OffsetCommit (key 8): member and simple (assign()-style) offset commits; v9 carries
the member epoch of a consumer-protocol group (KIP-848), v10 names topics by id
(UNKNOWN_TOPIC_ID for an id no topic has)."""

from __future__ import annotations

from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ..context import RequestContext
from ._groups import (
    ZERO,
    code,
    commit_entries,
    may_read_group,
    ms,
    names_by_topic_id,
    split_commit_entries,
)

API_KEY = 8
MIN_VERSION = 2
MAX_VERSION = 10
TOPIC_IDS_SINCE = 10


async def handle(ctx: RequestContext, request):
    names = names_by_topic_id(ctx) if ctx.version >= TOPIC_IDS_SINCE else None
    entries = commit_entries(request, names)
    if not may_read_group(ctx, request.group_id):
        denied = ErrorCode.group_authorization_failed.value
        return _answer(ctx, request, {(e.topic, e.partition): denied for e in entries}, names)
    if ctx.broker.shares.is_share_group(request.group_id):
        # A share group has no committed offsets (Kafka: "not a consumer group").
        return _answer(ctx, request, {(e.topic, e.partition): ErrorCode.group_id_not_found.value
                                      for e in entries}, names)
    unknown = {(e.topic, e.partition): ErrorCode.unknown_topic_id.value
               for e in entries if not e.topic}
    entries, denied = split_commit_entries(ctx, [e for e in entries if e.topic])
    denied.update(unknown)
    retention = getattr(request, "retention_time", None)
    retention_ms = ms(retention) if retention is not None else -1
    results = await ctx.broker.groups.commit_offsets(
        group_id=request.group_id,
        generation_id=getattr(request, "generation_id_or_member_epoch", -1),
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        entries=entries, api_version=ctx.version,
        retention_ms=retention_ms if retention_ms >= 0 else None) if entries else {}
    return _answer(ctx, request, {**results, **denied}, names)


def _answer(ctx, request, results: dict, names: dict | None):
    schema = ctx.schema
    topics = []
    ordered = request.topics
    if names is not None:  # as Kafka: the topics of unknown ids first
        ordered = sorted(ordered, key=lambda t: t.topic_id in names)
    for topic in ordered:
        name = topic.name if names is None else names.get(topic.topic_id, "")
        partitions = tuple(
            build(schema.OffsetCommitResponsePartition, partition_index=p.partition_index,
                  error_code=code(results[(name, p.partition_index)]))
            for p in topic.partitions)
        key = {"name": name} if names is None else {"topic_id": topic.topic_id}
        topics.append(build(schema.OffsetCommitResponseTopic, partitions=partitions, **key))
    topics = tuple(topics)
    return build(ctx.response_type, throttle_time=ZERO, topics=topics)
