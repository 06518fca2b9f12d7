"""DeleteGroups (key 42): Empty groups only (NON_EMPTY_GROUP otherwise). A share group
(KIP-932) is deleted by the share coordinator, with its share-partitions' state."""

from __future__ import annotations

from txbroker.protocol.acls import AclOperation, ResourceType
from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ..context import RequestContext
from ._groups import ZERO, code

API_KEY = 42
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(ctx: RequestContext, request):
    names = list(request.groups_names)
    deletable = ctx.authorized(AclOperation.DELETE, ResourceType.GROUP, names)
    shares = ctx.broker.shares
    results = await ctx.broker.groups.delete_groups(
        [g for g in names if g in deletable and not shares.is_share_group(g)])
    results.update({g: shares.delete_group(g) for g in names
                    if g in deletable and shares.is_share_group(g)})
    results.update({g: ErrorCode.group_authorization_failed.value
                    for g in names if g not in deletable})
    out = tuple(build(ctx.schema.DeletableGroupResult, group_id=g, error_code=code(e))
                for g, e in results.items())
    return build(ctx.response_type, throttle_time=ZERO, results=out)
