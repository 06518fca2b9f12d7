"""OffsetDelete (key 47, KIP-496): delete a group's offsets for topics it no longer uses."""

from __future__ import annotations

from txbroker.protocol.messages import build

from ._groups import ZERO, code

API_KEY = 47
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx, request):
    wanted = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    error, results = await ctx.broker.groups.delete_offsets(request.group_id, wanted)
    schema = ctx.schema
    topics = tuple(
        build(schema.OffsetDeleteResponseTopic, name=t.name, partitions=tuple(
            build(schema.OffsetDeleteResponsePartition, partition_index=p.partition_index,
                  error_code=code(results.get((t.name, p.partition_index), 0)))
            for p in t.partitions))
        for t in request.topics) if error == 0 else ()
    return build(ctx.response_type, throttle_time=ZERO, error_code=code(error), topics=topics)
