"""ListGroups (key 16), with the states filter of v4 (KIP-518) and the types filter of
v5 (KIP-848): classic groups (type "classic"), consumer-protocol groups (type
"consumer", protocol type "consumer", states Empty/Assigning/Reconciling/Stable),
streams groups (KIP-1071: type and protocol type "streams", states Empty/NotReady/
Assigning/Reconciling/Stable) and share groups (KIP-932: type and protocol type
"share", states Empty/Stable)."""

from __future__ import annotations

from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ..context import RequestContext
from ._groups import DESCRIBE, GROUP, ZERO

API_KEY = 16
MIN_VERSION = 0
MAX_VERSION = 5


async def handle(ctx: RequestContext, request):
    groups = ctx.broker.groups
    if not groups.loaded:
        return build(ctx.response_type, throttle_time=ZERO,
                     error_code=ErrorCode.coordinator_load_in_progress, groups=())
    states = getattr(request, "states_filter", None) or None
    listing = [(g.group_id, g.protocol_type, g.state, "classic")
               for g in groups.list_groups(states)]
    wanted = {s.lower() for s in states or ()}
    listing += [(group_id, "consumer", state, "consumer")
                for group_id, state in groups.consumer_listing()
                if not wanted or state.lower() in wanted]
    listing += [(group_id, "streams", state, "streams")
                for group_id, state in groups.streams_listing()
                if not wanted or state.lower() in wanted]
    listing += [(group_id, "share", state, "share")
                for group_id, state in ctx.broker.shares.listing()
                if not wanted or state.lower() in wanted]
    types = {t.lower() for t in getattr(request, "types_filter", None) or ()}
    if types:
        listing = [g for g in listing if g[3] in types]
    if ctx.broker.authorizer is not None and not ctx.authorize_cluster(DESCRIBE,
                                                                      log_denied=False):
        # Kafka: DESCRIBE on the cluster lists all; else each group needs DESCRIBE.
        listing = [g for g in listing if ctx.authorize(DESCRIBE, GROUP, g[0], log_denied=False)]
    out = tuple(build(ctx.schema.ListedGroup, group_id=group_id, protocol_type=protocol_type,
                      group_state=state, group_type=group_type)
                for group_id, protocol_type, state, group_type in listing)
    return build(ctx.response_type, throttle_time=ZERO, error_code=ErrorCode.none, groups=out)
