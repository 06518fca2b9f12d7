"""DeleteGroups (key 42): Empty groups only (NON_EMPTY_GROUP otherwise)."""

from __future__ import annotations

from txbroker.protocol.messages import build

from ._groups import ZERO, code

API_KEY = 42
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(ctx, request):
    results = await ctx.broker.groups.delete_groups(list(request.groups_names))
    out = tuple(build(ctx.schema.DeletableGroupResult, group_id=g, error_code=code(e))
                for g, e in results.items())
    return build(ctx.response_type, throttle_time=ZERO, results=out)
