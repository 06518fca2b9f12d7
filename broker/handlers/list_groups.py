"""ListGroups (key 16), with the states filter of v4 (KIP-518) and the types filter of
v5 (KIP-848): every group here is a classic group."""

from __future__ import annotations

from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ._groups import DESCRIBE, GROUP, ZERO

API_KEY = 16
MIN_VERSION = 0
MAX_VERSION = 5


async def handle(ctx, request):
    groups = ctx.broker.groups
    if not groups.loaded:
        return build(ctx.response_type, throttle_time=ZERO,
                     error_code=ErrorCode.coordinator_load_in_progress, groups=())
    listing = groups.state.list_groups(getattr(request, "states_filter", None) or None)
    types = getattr(request, "types_filter", None)
    if types and "classic" not in {t.lower() for t in types}:
        listing = []
    if ctx.broker.authorizer is not None and not ctx.authorize_cluster(DESCRIBE,
                                                                      log_denied=False):
        # Kafka: DESCRIBE on the cluster lists all; else each group needs DESCRIBE.
        listing = [g for g in listing if ctx.authorize(DESCRIBE, GROUP, g.group_id,
                                                       log_denied=False)]
    out = tuple(build(ctx.schema.ListedGroup, group_id=g.group_id, protocol_type=g.protocol_type,
                      group_state=g.state, group_type="classic") for g in listing)
    return build(ctx.response_type, throttle_time=ZERO, error_code=ErrorCode.none, groups=out)
