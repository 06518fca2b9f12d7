"""OffsetCommit (key 8): member and simple (assign()-style) offset commits."""

from __future__ import annotations

from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ._groups import ZERO, code, commit_entries, may_read_group, ms, split_commit_entries

API_KEY = 8
MIN_VERSION = 2
MAX_VERSION = 9


async def handle(ctx, request):
    entries = commit_entries(request)
    if not may_read_group(ctx, request.group_id):
        denied = ErrorCode.group_authorization_failed.value
        return _answer(ctx, request, {(e.topic, e.partition): denied for e in entries})
    entries, denied = split_commit_entries(ctx, entries)
    retention = getattr(request, "retention_time", None)
    retention_ms = ms(retention) if retention is not None else -1
    results = await ctx.broker.groups.commit_offsets(
        group_id=request.group_id,
        generation_id=getattr(request, "generation_id_or_member_epoch", -1),
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        entries=entries, api_version=ctx.version,
        retention_ms=retention_ms if retention_ms >= 0 else None) if entries else {}
    return _answer(ctx, request, {**results, **denied})


def _answer(ctx, request, results: dict):
    schema = ctx.schema
    topics = tuple(
        build(schema.OffsetCommitResponseTopic, name=topic.name, partitions=tuple(
            build(schema.OffsetCommitResponsePartition, partition_index=p.partition_index,
                  error_code=code(results[(topic.name, p.partition_index)]))
            for p in topic.partitions))
        for topic in request.topics)
    return build(ctx.response_type, throttle_time=ZERO, topics=topics)
