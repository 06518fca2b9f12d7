"""DescribeGroups (key 15): classic groups.

Up to v5 a group that does not exist, and a consumer-protocol (KIP-848) or streams
(KIP-1071) group, which DescribeGroups cannot show, are described as Dead with no error. From v6 (KIP-1043)
both are GROUP_ID_NOT_FOUND (still state Dead) with Kafka 4's message in the new
``error_message``; errors before the lookup (authorization, loading) carry no message,
as Kafka's ``DescribeGroupsResponse.groupError``.
"""

from __future__ import annotations

from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ..context import RequestContext
from ._groups import DESCRIBE, GROUP, ZERO, code

API_KEY = 15
MIN_VERSION = 0
MAX_VERSION = 6

NO_OPERATIONS = -2147483648  # authorized operations not asked for / not given


def _not_found(ctx, group_id: str, message: str):
    return build(ctx.schema.DescribedGroup, error_code=ErrorCode.group_id_not_found,
                 error_message=message, group_id=group_id, group_state="Dead",
                 protocol_type="", protocol_data="", members=(),
                 authorized_operations=NO_OPERATIONS)


async def handle(ctx: RequestContext, request):
    groups = ctx.broker.groups
    schema = ctx.schema
    out = []
    ops = ctx.version >= 3 and bool(getattr(request, "include_authorized_operations", False))
    for group_id in request.groups:
        if not ctx.authorize(DESCRIBE, GROUP, group_id):
            out.append(build(schema.DescribedGroup, error_code=ErrorCode.group_authorization_failed,
                             group_id=group_id, group_state="", protocol_type="",
                             protocol_data="", members=(),
                             authorized_operations=NO_OPERATIONS))
            continue
        if not groups.is_ready(group_id):
            out.append(build(schema.DescribedGroup, error_code=ErrorCode.coordinator_load_in_progress,
                             group_id=group_id, group_state="", protocol_type="",
                             protocol_data="", members=(),
                             authorized_operations=NO_OPERATIONS))
            continue
        if ctx.version >= 6 and (groups.is_consumer_group(group_id)
                                 or groups.is_streams_group(group_id)
                                 or ctx.broker.shares.is_share_group(group_id)):
            out.append(_not_found(ctx, group_id, f"Group {group_id} is not a classic group."))
            continue
        d = groups.describe(group_id)
        if ctx.version >= 6 and d.state == "Dead":
            # The classic state answers Dead for a group it does not have (or no longer has).
            out.append(_not_found(ctx, group_id, f"Group {group_id} not found."))
            continue
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
                         if ops else NO_OPERATIONS))
    return build(ctx.response_type, throttle_time=ZERO, groups=tuple(out))
