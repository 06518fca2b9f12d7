"""ShareGroupDescribe (key 77, v1): share groups (KIP-932) with their epochs, the
"simple" assignor and members with their assignments. An unknown group gets
GROUP_ID_NOT_FOUND, a classic or consumer group GROUP_ID_NOT_FOUND ("is not a share
group"), as Kafka answers. Served only at share.version >= 1."""

from __future__ import annotations

from txbroker.coordinator.share.assignor import SIMPLE_ASSIGNOR_NAME
from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ..context import RequestContext
from ._groups import DESCRIBE, GROUP, ZERO
from ._share import DISABLED, other_group_type, share_enabled

API_KEY = 77
MIN_VERSION = 1
MAX_VERSION = 1

_NO_OPS = -2147483648


def _failed(schema, group_id, error, message=None):
    # Epochs 0, as Kafka 4.4 answers a group it cannot describe (the schema's default).
    return build(schema.DescribedGroup, error_code=error, error_message=message,
                 group_id=group_id, group_state="", group_epoch=0, assignment_epoch=0,
                 assignor_name="", members=(), authorized_operations=_NO_OPS)


async def handle(ctx: RequestContext, request):
    schema = ctx.schema
    if not share_enabled(ctx):
        return build(ctx.response_type, throttle_time=ZERO, groups=tuple(
            _failed(schema, g, *DISABLED) for g in request.group_ids))
    shares = ctx.broker.shares
    shares.ensure_loaded()  # the groups known from __share_group_state after a restart
    names = {info.topic_id: name for name, info in ctx.broker.logs.topics.items()}
    ops = bool(request.include_authorized_operations)
    out = []
    for group_id in request.group_ids:
        if not ctx.authorize(DESCRIBE, GROUP, group_id):
            out.append(_failed(schema, group_id, ErrorCode.group_authorization_failed))
            continue
        g = shares.groups.groups.get(group_id)
        if g is None:
            message = (f"Group {group_id} is not a share group."
                       if other_group_type(ctx, group_id) else f"Group {group_id} not found.")
            out.append(_failed(schema, group_id, ErrorCode.group_id_not_found, message))
            continue
        members = tuple(build(
            schema.Member, member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
            client_id=m.client_id, client_host=m.client_host,
            subscribed_topic_names=m.subscribed_topic_names,
            assignment=build(schema.Assignment, topic_partitions=tuple(
                build(schema.TopicPartitions, topic_id=tid, topic_name=names[tid],
                      partitions=tuple(sorted(ps)))
                for tid, ps in sorted(m.assigned.items()) if ps and tid in names)))
            for m in g.members.values())
        out.append(build(schema.DescribedGroup, error_code=ErrorCode.none, group_id=group_id,
                         group_state=g.state, group_epoch=g.group_epoch,
                         assignment_epoch=g.assignment_epoch, assignor_name=SIMPLE_ASSIGNOR_NAME,
                         members=members,
                         authorized_operations=ctx.authorized_operations(GROUP, group_id)
                         if ops else _NO_OPS))
    return build(ctx.response_type, throttle_time=ZERO, groups=tuple(out))
