"""OffsetDelete (key 47, KIP-496): delete a group's offsets for topics it no longer uses."""

from __future__ import annotations

from txbroker.protocol.acls import AclOperation, ResourceType
from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ..context import RequestContext
from ._groups import ZERO, code

API_KEY = 47
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request):
    if not ctx.authorize(AclOperation.DELETE, ResourceType.GROUP, request.group_id):
        return build(ctx.response_type, throttle_time=ZERO,
                     error_code=ErrorCode.group_authorization_failed, topics=())
    readable = ctx.authorized(AclOperation.READ, ResourceType.TOPIC,
                              (t.name for t in request.topics))
    wanted = [(t.name, p.partition_index) for t in request.topics for p in t.partitions
              if t.name in readable]
    error, results = await ctx.broker.groups.delete_offsets(request.group_id, wanted)
    results = {**results, **{(t.name, p.partition_index): ErrorCode.topic_authorization_failed.value
                             for t in request.topics if t.name not in readable
                             for p in t.partitions}}
    schema = ctx.schema
    topics = tuple(
        build(schema.OffsetDeleteResponseTopic, name=t.name, partitions=tuple(
            build(schema.OffsetDeleteResponsePartition, partition_index=p.partition_index,
                  error_code=code(results.get((t.name, p.partition_index), 0)))
            for p in t.partitions))
        for t in request.topics) if error == 0 else ()
    return build(ctx.response_type, throttle_time=ZERO, error_code=code(error), topics=topics)
