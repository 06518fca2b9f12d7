"""JoinGroup (key 11): classic group membership (held until the rebalance completes).

v8 (KIP-800) carries the member's reason for (re)joining: logged, as Kafka logs it with
the rebalance it causes. v9 (KIP-814) lets a static leader that rejoins a Stable group
be told it leads, with the members, but must skip the assignment (``skip_assignment``):
the group keeps the assignment it has. Below v9 such a leader is told the old leader id
instead, so that it does not run an assignment the group would ignore (as Kafka).
"""

from __future__ import annotations

import logging

from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ..context import RequestContext
from ._groups import ZERO, client_host, code, may_read_group, ms

API_KEY = 11
MIN_VERSION = 0
MAX_VERSION = 9

log = logging.getLogger(__name__)


async def handle(ctx: RequestContext, request):
    if not may_read_group(ctx, request.group_id):
        return build(ctx.response_type, throttle_time=ZERO,
                     error_code=ErrorCode.group_authorization_failed, generation_id=-1,
                     protocol_type=None, protocol_name="" if ctx.version < 7 else None,
                     leader="", skip_assignment=False, member_id="", members=())
    if ctx.broker.shares.is_share_group(request.group_id):
        # One id names one group type (Kafka: GroupIdNotFoundException, "not a classic
        # group").
        return build(ctx.response_type, throttle_time=ZERO,
                     error_code=ErrorCode.group_id_not_found, generation_id=-1,
                     protocol_type=None, protocol_name="" if ctx.version < 7 else None,
                     leader="", skip_assignment=False, member_id=request.member_id, members=())
    reason = getattr(request, "reason", None)
    if reason:
        log.info("member %r of group %r (client %r) joins: %r", request.member_id or "(new)",
                 request.group_id, ctx.header.client_id, reason[:256])
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
        require_known_member_id=ctx.version >= 4, supports_skip_assignment=ctx.version >= 9)
    schema = ctx.schema
    members = tuple(build(schema.JoinGroupResponseMember, member_id=m, group_instance_id=i,
                          metadata=md) for m, i, md in result.members)
    return build(ctx.response_type, throttle_time=ZERO, error_code=code(result.error),
                 generation_id=result.generation_id, protocol_type=result.protocol_type,
                 protocol_name=result.protocol_name or ("" if ctx.version < 7 else None),
                 leader=result.leader_id, skip_assignment=result.skip_assignment,
                 member_id=result.member_id, members=members)
