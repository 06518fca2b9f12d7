"""SyncGroup (key 14): the leader's assignment, handed to every member."""

from __future__ import annotations

from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ..context import RequestContext
from ._groups import ZERO, code, may_read_group

API_KEY = 14
MIN_VERSION = 0
MAX_VERSION = 5


async def handle(ctx: RequestContext, request):
    if not may_read_group(ctx, request.group_id):
        return build(ctx.response_type, throttle_time=ZERO, error_code=ErrorCode.group_authorization_failed,
                     protocol_type=None, protocol_name=None, assignment=b"")
    result = await ctx.broker.groups.sync(
        group_id=request.group_id, generation_id=request.generation_id,
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        protocol_type=getattr(request, "protocol_type", None),
        protocol_name=getattr(request, "protocol_name", None),
        assignments={a.member_id: bytes(a.assignment) for a in request.assignments})
    return build(ctx.response_type, throttle_time=ZERO, error_code=code(result.error),
                 protocol_type=result.protocol_type, protocol_name=result.protocol_name,
                 assignment=result.assignment)
