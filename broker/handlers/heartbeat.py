"""Heartbeat (key 12)."""

from __future__ import annotations

from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ..context import RequestContext
from ._groups import ZERO, code, may_read_group

API_KEY = 12
MIN_VERSION = 0
MAX_VERSION = 4


async def handle(ctx: RequestContext, request):
    if not may_read_group(ctx, request.group_id):
        return build(ctx.response_type, throttle_time=ZERO, error_code=ErrorCode.group_authorization_failed)
    error = ctx.broker.groups.heartbeat(
        group_id=request.group_id, generation_id=request.generation_id,
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None))
    return build(ctx.response_type, throttle_time=ZERO, error_code=code(error))
