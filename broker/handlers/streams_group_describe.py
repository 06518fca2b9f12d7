"""StreamsGroupDescribe (key 89, v0-1): streams groups (KIP-1071) with their epochs,
topology, members, assignments and target assignments. A group that does not exist, or
of another type, is GROUP_ID_NOT_FOUND; DESCRIBE on the group is required, and, as
Kafka's KafkaApis, DESCRIBE on every topic of its topology (else
TOPIC_AUTHORIZATION_FAILED). Served only at streams.version >= 1."""

from __future__ import annotations

from txbroker.coordinator.group.group_configs import STREAMS_ASSIGNOR_NAME
from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ..context import RequestContext
from ._groups import DESCRIBE, GROUP, TOPIC, ZERO
from ._streams import DISABLED, streams_enabled, task_ids, topology_topics

API_KEY = 89
MIN_VERSION = 0
MAX_VERSION = 1  # v1 (protocol/schemas/): TopologyDescription(Status), AssignorName

_NO_OPS = -2147483648
# TopologyDescriptionStatus: txbroker has no topology description plugin, so a described
# group's description is NOT_STORED when asked for (as Kafka without the plugin).
NOT_REQUESTED, NOT_STORED = 0, 1


def _failed(schema, group_id: str, error: ErrorCode, message: str | None = None):
    return build(schema.DescribedGroup, error_code=error, error_message=message,
                 group_id=group_id, group_state="", group_epoch=-1, assignment_epoch=-1,
                 topology=None, members=(), authorized_operations=_NO_OPS)


def _topic_infos(schema, infos, partitions):
    return tuple(build(schema.TopicInfo, name=t.name, partitions=partitions.get(t.name, t.partitions),
                       replication_factor=t.replication_factor,
                       topic_configs=tuple(build(schema.KeyValue, key=k, value=v)
                                           for k, v in sorted(t.configs)))
                 for t in sorted(infos, key=lambda t: t.name))


def _topology(schema, topology, logs):
    """As Kafka's asStreamsGroupDescribeTopology: sorted; internal topics with the
    partition counts they have."""
    if topology is None:
        return None
    counts = {name: logs.topics[name].partitions for name in topology_topics(topology)
              if name in logs.topics}
    return build(schema.Topology, epoch=topology.epoch, subtopologies=tuple(
        build(schema.Subtopology, subtopology_id=s.subtopology_id,
              source_topics=tuple(sorted(s.source_topics)),
              repartition_sink_topics=tuple(sorted(s.repartition_sink_topics)),
              state_changelog_topics=_topic_infos(schema, s.state_changelog_topics, counts),
              repartition_source_topics=_topic_infos(schema, s.repartition_source_topics, counts))
        for s in sorted(topology.subtopologies, key=lambda s: s.subtopology_id)))


def _assignment(schema, tasks):
    return build(schema.Assignment, active_tasks=task_ids(schema.TaskIds, tasks.active),
                 standby_tasks=task_ids(schema.TaskIds, tasks.standby),
                 warmup_tasks=task_ids(schema.TaskIds, tasks.warmup))


def _task_offsets(schema, offsets):
    """The offsets a member last reported (Kafka keeps them in memory)."""
    return tuple(build(schema.TaskOffset, subtopology_id=s, partition=p, offset=o)
                 for (s, p), o in sorted(offsets.items()))


def _member(schema, m):
    endpoint = m["user_endpoint"]
    return build(schema.Member, member_id=m["member_id"], member_epoch=m["member_epoch"],
                 instance_id=m["instance_id"], rack_id=m["rack_id"], client_id=m["client_id"],
                 client_host=m["client_host"], topology_epoch=m["topology_epoch"],
                 process_id=m["process_id"],
                 user_endpoint=None if endpoint is None else build(
                     schema.Endpoint, host=endpoint[0], port=endpoint[1]),
                 client_tags=tuple(build(schema.KeyValue, key=k, value=v)
                                   for k, v in m["client_tags"] or ()),
                 task_offsets=_task_offsets(schema, m["task_offsets"][0]),
                 task_end_offsets=_task_offsets(schema, m["task_offsets"][1]),
                 assignment=_assignment(schema, m["assignment"]),
                 target_assignment=_assignment(schema, m["target_assignment"]), is_classic=False)


async def handle(ctx: RequestContext, request):
    schema = ctx.schema
    if not streams_enabled(ctx):
        error, message = DISABLED
        return build(ctx.response_type, throttle_time=ZERO, groups=tuple(
            _failed(schema, g, error, message) for g in request.group_ids))
    coordinator = ctx.broker.groups
    ops = bool(request.include_authorized_operations)
    status = NOT_STORED if getattr(request, "include_topology_description", False) \
        else NOT_REQUESTED
    out = []
    allowed = [g for g in request.group_ids if ctx.authorize(DESCRIBE, GROUP, g)]
    ready = [g for g in allowed if coordinator.is_ready(g)]
    described = coordinator.streams_describe(ready)
    for group_id in request.group_ids:
        if group_id not in allowed:
            out.append(_failed(schema, group_id, ErrorCode.group_authorization_failed))
            continue
        if group_id not in described:
            out.append(_failed(schema, group_id, ErrorCode.coordinator_load_in_progress))
            continue
        d = described[group_id]
        if d is None:
            other = (coordinator.is_consumer_group(group_id)
                     or coordinator.describe(group_id).exists
                     or ctx.broker.shares.is_share_group(group_id))
            out.append(_failed(schema, group_id, ErrorCode.group_id_not_found,
                               f"Group {group_id} is not a streams group." if other
                               else f"Group {group_id} not found."))
            continue
        topology = d["topology"]
        if topology is not None and ctx.broker.authorizer is not None:
            names = topology_topics(topology)
            if len(ctx.authorized(DESCRIBE, TOPIC, names)) != len(set(names)):
                out.append(_failed(schema, group_id, ErrorCode.topic_authorization_failed,
                                   "The group has described topic(s) that the client is not "
                                   "authorized to describe."))
                continue
        out.append(build(
            schema.DescribedGroup, error_code=ErrorCode.none, error_message=None,
            group_id=group_id, group_state=d["state"], group_epoch=d["group_epoch"],
            assignment_epoch=d["assignment_epoch"],
            topology=_topology(schema, topology, ctx.broker.logs),
            members=tuple(_member(schema, m) for m in d["members"]),
            authorized_operations=ctx.authorized_operations(GROUP, group_id) if ops else _NO_OPS,
            topology_description=None, topology_description_status=status,
            assignor_name=coordinator.group_configs.value(group_id, STREAMS_ASSIGNOR_NAME)))
    return build(ctx.response_type, throttle_time=ZERO, groups=tuple(out))
