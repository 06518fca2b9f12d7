"""DescribeGroups (key 15)."""

from __future__ import annotations

from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ._groups import DESCRIBE, GROUP, ZERO, code

API_KEY = 15
MIN_VERSION = 0
MAX_VERSION = 5


async def handle(ctx, request):
    groups = ctx.broker.groups
    schema = ctx.schema
    out = []
    ops = ctx.version >= 3 and bool(getattr(request, "include_authorized_operations", False))
    for group_id in request.groups:
        if not ctx.authorize(DESCRIBE, GROUP, group_id):
            out.append(build(schema.DescribedGroup, error_code=ErrorCode.group_authorization_failed,
                             group_id=group_id, group_state="", protocol_type="",
                             protocol_data="", members=(),
                             authorized_operations=-2147483648))
            continue
        if not groups.is_ready(group_id):
            out.append(build(schema.DescribedGroup, error_code=ErrorCode.coordinator_load_in_progress,
                             group_id=group_id, group_state="", protocol_type="",
                             protocol_data="", members=(),
                             authorized_operations=-2147483648))
            continue
        d = groups.state.describe(group_id)
        members = tuple(
            build(schema.DescribedGroupMember, member_id=m.member_id,
                  group_instance_id=m.group_instance_id, client_id=m.client_id,
                  client_host=m.client_host, member_metadata=m.metadata,
                  member_assignment=m.assignment)
            for m in d.members)
        out.append(build(schema.DescribedGroup, error_code=code(0), group_id=group_id,
                         group_state=d.state, protocol_type=d.protocol_type,
                         protocol_data=d.protocol_data, members=members,
                         authorized_operations=ctx.authorized_operations(GROUP, group_id)
                         if ops else -2147483648))
    return build(ctx.response_type, throttle_time=ZERO, groups=tuple(out))
