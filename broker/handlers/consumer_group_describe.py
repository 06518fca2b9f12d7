"""ConsumerGroupDescribe (key 69): consumer-protocol groups (KIP-848) with their
epochs, assignor, members, assignments and target assignments. A group that does not
exist gets GROUP_ID_NOT_FOUND; a classic group GROUP_ID_NOT_FOUND too ("is not a
consumer group"), as Kafka answers."""

from __future__ import annotations

from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ..context import RequestContext
from ._groups import DESCRIBE, GROUP, ZERO

API_KEY = 69
MIN_VERSION = 0
MAX_VERSION = 1

_NO_OPS = -2147483648


def _assignment(schema, a, names):
    return build(schema.Assignment, topic_partitions=tuple(
        build(schema.TopicPartitions, topic_id=tid, topic_name=names.get(tid, ""),
              partitions=tuple(sorted(ps)))
        for tid, ps in sorted(a.items()) if ps and tid in names))


def _failed(schema, group_id, error, message=None):
    return build(schema.DescribedGroup, error_code=error, error_message=message,
                 group_id=group_id, group_state="", group_epoch=-1, assignment_epoch=-1,
                 assignor_name="", members=(), authorized_operations=_NO_OPS)


async def handle(ctx: RequestContext, request):
    coordinator = ctx.broker.groups
    schema = ctx.schema
    ops = bool(request.include_authorized_operations)
    names = coordinator.topic_names()
    out = []
    for group_id in request.group_ids:
        if not ctx.authorize(DESCRIBE, GROUP, group_id):
            out.append(_failed(schema, group_id, ErrorCode.group_authorization_failed))
            continue
        if not coordinator.is_ready(group_id):
            out.append(_failed(schema, group_id, ErrorCode.coordinator_load_in_progress))
            continue
        g = coordinator.consumer.groups.get(group_id)
        if g is None:
            classic = (coordinator.describe(group_id).exists
                       or coordinator.is_streams_group(group_id))
            message = (f"Group {group_id} is not a consumer group." if classic
                       else f"Group {group_id} not found.")
            out.append(_failed(schema, group_id, ErrorCode.group_id_not_found, message))
            continue
        members = []
        for m in g.members.values():
            s = m.subscription
            fields = dict(member_id=m.member_id, instance_id=s.instance_id, rack_id=s.rack_id,
                          member_epoch=m.member_epoch, client_id=s.client_id,
                          client_host=s.client_host,
                          subscribed_topic_names=tuple(s.subscribed_topic_names),
                          subscribed_topic_regex=s.subscribed_topic_regex,
                          assignment=_assignment(schema, m.assigned, names),
                          target_assignment=_assignment(schema, g.target.get(m.member_id, {}),
                                                        names))
            if ctx.version >= 1:
                # KIP-1099: 0 = classic member of a migrated group, 1 = consumer protocol
                fields["member_type"] = 0 if m.uses_classic else 1
            members.append(build(schema.Member, **fields))
        out.append(build(schema.DescribedGroup, error_code=ErrorCode.none, group_id=group_id,
                         group_state=g.state, group_epoch=g.group_epoch,
                         assignment_epoch=g.assignment_epoch,
                         assignor_name=coordinator.consumer.assignor_of(g),
                         members=tuple(members),
                         authorized_operations=ctx.authorized_operations(GROUP, group_id)
                         if ops else _NO_OPS))
    return build(ctx.response_type, throttle_time=ZERO, groups=tuple(out))
