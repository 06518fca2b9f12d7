"""LeaveGroup (key 13): one member (v0-2) or a batch of members (v3+, KIP-345)."""

from __future__ import annotations

from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ..context import RequestContext
from ._groups import ZERO, code, may_read_group

API_KEY = 13
MIN_VERSION = 0
MAX_VERSION = 5


async def handle(ctx: RequestContext, request):
    if not may_read_group(ctx, request.group_id):
        return build(ctx.response_type, throttle_time=ZERO, error_code=ErrorCode.group_authorization_failed, members=())
    groups = ctx.broker.groups
    if ctx.version < 3:
        error, member_errors = groups.leave(request.group_id, [(request.member_id, None)])
        await groups.leave_durable(request.group_id)
        if error == 0 and member_errors:
            error = member_errors[0]
        return build(ctx.response_type, throttle_time=ZERO, error_code=code(error))
    members = [(m.member_id, m.group_instance_id) for m in request.members]
    error, member_errors = groups.leave(request.group_id, members)
    await groups.leave_durable(request.group_id)
    out = tuple(build(ctx.schema.MemberResponse, member_id=m, group_instance_id=i,
                      error_code=code(e))
                for (m, i), e in zip(members, member_errors, strict=False))
    return build(ctx.response_type, throttle_time=ZERO, error_code=code(error), members=out)
