"""JoinGroup (key 11): classic group membership (held until the rebalance completes)."""

from __future__ import annotations

from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ._groups import ZERO, client_host, code, may_read_group, ms

API_KEY = 11
MIN_VERSION = 0
MAX_VERSION = 7


async def handle(ctx, request):
    if not may_read_group(ctx, request.group_id):
        return build(ctx.response_type, throttle_time=ZERO,
                     error_code=ErrorCode.group_authorization_failed, generation_id=-1,
                     protocol_type=None, protocol_name="" if ctx.version < 7 else None,
                     leader="", skip_assignment=False, member_id="", members=())
    session_ms = ms(request.session_timeout)
    rebalance = getattr(request, "rebalance_timeout", None)
    result = await ctx.broker.groups.join(
        group_id=request.group_id, member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        client_id=ctx.header.client_id or "", client_host=client_host(ctx.peer),
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=ms(rebalance) if rebalance is not None else session_ms,
        protocol_type=request.protocol_type,
        protocols=[(p.name, bytes(p.metadata)) for p in request.protocols],
        require_known_member_id=ctx.version >= 4)
    schema = ctx.schema
    members = tuple(build(schema.JoinGroupResponseMember, member_id=m, group_instance_id=i,
                          metadata=md) for m, i, md in result.members)
    return build(ctx.response_type, throttle_time=ZERO, error_code=code(result.error),
                 generation_id=result.generation_id, protocol_type=result.protocol_type,
                 protocol_name=result.protocol_name or ("" if ctx.version < 7 else None),
                 leader=result.leader_id, skip_assignment=result.skip_assignment,
                 member_id=result.member_id, members=members)
