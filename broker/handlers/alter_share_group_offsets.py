"""AlterShareGroupOffsets (key 91, v0): sets share-partition start offsets
(``kafka-share-groups.sh --reset-offsets``), only while the share group is empty
(NON_EMPTY_GROUP otherwise); the group is created if it does not exist, as Kafka does.
Each share-partition gets a fresh state at its offset (SharePartition.reset_start_offset,
a ShareSnapshot in ``__share_group_state``), durable before the answer. Served only at
share.version >= 1.

Authorization as Kafka's KafkaApis: READ on the group (GROUP_AUTHORIZATION_FAILED as the
top-level error), READ on each topic (TOPIC_AUTHORIZATION_FAILED on its partitions). An
unknown topic or partition gets UNKNOWN_TOPIC_OR_PARTITION; a classic or consumer group
with this id GROUP_ID_NOT_FOUND."""

from __future__ import annotations

import uuid

from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ..context import RequestContext
from ._groups import GROUP, READ, TOPIC
from ._share import (
    DISABLED,
    NO_TOPIC_ID,
    OFFSETS_MESSAGES,
    offsets_response,
    other_group_type,
    share_enabled,
)

API_KEY = 91
MIN_VERSION = 0
MAX_VERSION = 0

def _topic(schema, name, topic_id, parts):
    return build(schema.AlterShareGroupOffsetsResponseTopic, topic_name=name,
                 topic_id=topic_id, partitions=tuple(
                     build(schema.AlterShareGroupOffsetsResponsePartition, partition_index=p,
                           error_code=e, error_message=m) for p, e, m in parts))


async def handle(ctx: RequestContext, request):
    schema = ctx.schema
    if not share_enabled(ctx):
        return offsets_response(ctx, *DISABLED)
    group_id = request.group_id
    if not ctx.authorize(READ, GROUP, group_id):
        return offsets_response(ctx, ErrorCode.group_authorization_failed, "Group authorization failed.")
    if other_group_type(ctx, group_id):
        return offsets_response(ctx, ErrorCode.group_id_not_found,
                         f"Group {group_id} is not a share group.")
    topics_info = ctx.broker.logs.topics
    allowed = ctx.authorized(READ, TOPIC, {t.topic_name for t in request.topics})
    offsets: dict[tuple[uuid.UUID, int], int] = {}
    answers: list[tuple[str, uuid.UUID, list[tuple[int, ErrorCode, str | None]]]] = []
    for t in request.topics:
        info = topics_info.get(t.topic_name)
        parts: list[tuple[int, ErrorCode, str | None]] = []
        for p in t.partitions:
            if t.topic_name not in allowed:
                parts.append((p.partition_index, ErrorCode.topic_authorization_failed,
                              "Topic authorization failed."))
            elif info is None or not 0 <= p.partition_index < info.partitions:
                parts.append((p.partition_index, ErrorCode.unknown_topic_or_partition,
                              "This server does not host this topic-partition."))
            else:
                offsets[(info.topic_id, p.partition_index)] = p.start_offset
                parts.append((p.partition_index, ErrorCode.none, None))
        answers.append((t.topic_name, info.topic_id if info is not None else NO_TOPIC_ID, parts))
    error = await ctx.broker.shares.alter_offsets(group_id, offsets)
    if error != ErrorCode.none.value:  # the top-level error alone, as Kafka
        code = ErrorCode(error)
        return offsets_response(ctx, code, OFFSETS_MESSAGES.get(code))
    # Kafka 4.4's order: the topics it does not know (or may not read) first, then the
    # others, each group in the request's order.
    answers.sort(key=lambda a: a[0] in allowed and a[0] in topics_info)
    return offsets_response(ctx, ErrorCode.none, None,
                     [_topic(schema, name, tid, parts) for name, tid, parts in answers])
