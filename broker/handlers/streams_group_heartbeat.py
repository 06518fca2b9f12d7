"""StreamsGroupHeartbeat (key 88, v0-1): the streams group protocol of KIP-1071 (Kafka
Streams' ``group.protocol=streams``): join with member epoch 0 and the topology,
heartbeat with the owned tasks, leave with -1 (or -2, static). The coordinator
(coordinator/group/streams_coordinator.py) answers once the records of the change are
durable. Served only at streams.version >= 1.

Kafka's KafkaApis checks, in order: the feature, READ on the group, a joining topology's
topic names (Kafka's internal topics, invalid names: STREAMS_INVALID_TOPOLOGY) and
DESCRIBE on every topic it names (TOPIC_AUTHORIZATION_FAILED); after the coordinator,
the internal topics it asks for are created in the background if the principal may
CREATE them (on the cluster, else per topic); the others are named in the
MISSING_INTERNAL_TOPICS status ("Unauthorized to CREATE on topics ...").
"""

from __future__ import annotations

import datetime
import logging

from txbroker.coordinator.group.group_configs import STREAMS_ACCEPTABLE_RECOVERY_LAG
from txbroker.coordinator.group.streams_coordinator import PartitionCounts
from txbroker.coordinator.internal_topic import OFFSETS_TOPIC, partition_for
from txbroker.coordinator.streams.results import StreamsHeartbeat
from txbroker.coordinator.streams.topology import (
    MISSING_INTERNAL_TOPICS,
    InvalidTopologyError,
    Status,
    configure_topics,
)
from txbroker.protocol.acls import AclOperation, ResourceType
from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ..context import RequestContext
from ._groups import DESCRIBE, TOPIC, ZERO, client_host, may_read_group, ms
from ._streams import (
    DISABLED,
    copartition_indexes_valid,
    streams_enabled,
    task_ids,
    tasks_from,
    topology_from,
    topology_problem,
    topology_topics,
)

API_KEY = 88
MIN_VERSION = 0
MAX_VERSION = 1  # v1 (protocol/schemas/): the response's int64 AcceptableRecoveryLag,
                 # TopologyDescriptionRequired and the MISSING_CLIENT_TAGS status

log = logging.getLogger(__name__)

# group.streams.acceptable.recovery.lag (v0 carries it as an int32).
ACCEPTABLE_RECOVERY_LAG = 10_000
MISSING_CLIENT_TAGS = 6


def _answer(ctx, error: ErrorCode, message: str | None = None, **fields):
    if ctx.header.api_version >= 1:
        # The group's streams.acceptable.recovery.lag; an error answer keeps the
        # field's default, -1, as Kafka's.
        lag = fields.get("acceptable_recovery_lag", -1)
    else:
        lag = ACCEPTABLE_RECOVERY_LAG if not error else 0
    return build(ctx.response_type, throttle_time=ZERO, error_code=error, error_message=message,
                 member_id=fields.get("member_id", ""), member_epoch=fields.get("member_epoch", 0),
                 heartbeat_interval=fields.get("heartbeat_interval", ZERO),
                 acceptable_recovery_lag=lag, topology_description_required=False,
                 task_offset_interval=fields.get("task_offset_interval", ZERO),
                 status=fields.get("status"), active_tasks=fields.get("active_tasks"),
                 standby_tasks=fields.get("standby_tasks"),
                 warmup_tasks=fields.get("warmup_tasks"),
                 endpoint_information_epoch=fields.get("endpoint_information_epoch", 0),
                 partitions_by_user_endpoint=fields.get("partitions_by_user_endpoint"))


def _tasks_overflow_records(broker, group_id: str, topology) -> bool:
    """Whether a joining topology has so many tasks (against the topics as they are)
    that a member's assignment record cannot fit in max.message.bytes of
    ``__consumer_offsets``: every active task is some member's, at 4 bytes a task, so one
    member of the group (with the joining one) gets at least total / members of them.
    Kafka computes that assignment and then fails to write it (UNKNOWN_SERVER_ERROR);
    it is refused here before the assignment is computed, so its cost stays bounded by
    the record size too. A topology that cannot be configured is left to the
    coordinator (its status or error)."""
    try:
        tasks = configure_topics(topology, PartitionCounts(broker.logs.topics)).tasks
    except InvalidTopologyError:
        return False
    total = sum((tasks or {}).values())
    if not total:
        return False
    g = broker.groups.streams.get(group_id)
    members = (len(g.p.members) if g is not None else 0) + 1
    topics = broker.logs.topics
    # Before __consumer_offsets exists: the broker's message.max.bytes it will have.
    limit = int(broker.logs.broker_defaults.get("max.message.bytes", 1048588))
    if OFFSETS_TOPIC in topics:
        plog = broker.logs.get_log(OFFSETS_TOPIC,
                                   partition_for(group_id, topics[OFFSETS_TOPIC].partitions))
        if plog is not None:
            limit = plog.config.max_message_bytes
    return -(-total // members) * 4 > limit


def _request(ctx, request, topology) -> StreamsHeartbeat:
    rebalance = request.rebalance_timeout
    endpoint = request.user_endpoint
    tags = request.client_tags
    return StreamsHeartbeat(
        group_id=request.group_id, member_id=request.member_id,
        member_epoch=int(request.member_epoch), instance_id=request.instance_id,
        rack_id=request.rack_id,
        rebalance_timeout_ms=ms(rebalance) if rebalance is not None else -1,
        topology=topology, active_tasks=tasks_from(request.active_tasks),
        standby_tasks=tasks_from(request.standby_tasks),
        warmup_tasks=tasks_from(request.warmup_tasks), process_id=request.process_id,
        user_endpoint=None if endpoint is None else (endpoint.host, int(endpoint.port)),
        client_tags=None if tags is None else tuple((kv.key, kv.value) for kv in tags),
        shutdown_application=bool(request.shutdown_application),
        client_id=ctx.header.client_id or "", client_host=client_host(ctx.peer),
        endpoint_information_epoch=int(request.endpoint_information_epoch),
        task_offsets=_offsets(request.task_offsets),
        task_end_offsets=_offsets(request.task_end_offsets))


def _offsets(wire) -> tuple[tuple[str, int, int], ...] | None:
    return None if wire is None else tuple(
        (o.subtopology_id, int(o.partition), int(o.offset)) for o in wire)


def _creatable(ctx, names: list[str]) -> tuple[list[str], list[str]]:
    """(may create, may not): CREATE on the cluster allows all, else per topic."""
    if ctx.broker.authorizer is None or ctx.authorize_cluster(AclOperation.CREATE,
                                                              log_denied=False):
        return names, []
    allowed = ctx.authorized(AclOperation.CREATE, ResourceType.TOPIC, names)
    return [n for n in names if n in allowed], [n for n in names if n not in allowed]


async def handle(ctx: RequestContext, request):
    broker = ctx.broker
    if not streams_enabled(ctx):
        return _answer(ctx, *DISABLED)
    if not may_read_group(ctx, request.group_id):
        return _answer(ctx, ErrorCode.group_authorization_failed)
    topology = topology_from(request.topology)
    if topology is not None:
        topics = topology_topics(topology)
        problem = topology_problem(topics)
        if problem is not None:
            log.info("StreamsGroupHeartbeat of group %r refused: %s", request.group_id, problem)
            return _answer(ctx, ErrorCode.streams_invalid_topology, problem)
        if len(ctx.authorized(DESCRIBE, TOPIC, topics)) != len(set(topics)):
            return _answer(ctx, ErrorCode.topic_authorization_failed)
    if request.group_id and broker.shares.is_share_group(request.group_id):
        return _answer(ctx, ErrorCode.group_id_not_found,
                       f"Group {request.group_id} is not a streams group.")
    if topology is not None and not copartition_indexes_valid(topology):
        # Kafka's coordinator fails on the index (UNKNOWN_SERVER_ERROR, no message) and
        # writes nothing.
        log.info("StreamsGroupHeartbeat of group %r refused: a copartition group names a "
                 "topic index out of range", request.group_id)
        return _answer(ctx, ErrorCode.unknown_server_error)
    if topology is not None and _tasks_overflow_records(broker, request.group_id, topology):
        log.info("StreamsGroupHeartbeat of group %r refused: its topology's tasks cannot fit "
                 "in the members' assignment records", request.group_id)
        return _answer(ctx, ErrorCode.unknown_server_error)
    hb = _request(ctx, request, topology)
    result = await broker.groups.streams_heartbeat(hb)
    error = ErrorCode(result.error)
    if error is not ErrorCode.none:
        log.info("StreamsGroupHeartbeat of group %r member %r epoch %d: %s: %s", hb.group_id,
                 hb.member_id, hb.member_epoch, error.name, result.message)
        return _answer(ctx, error, result.message)
    statuses = list(result.statuses)
    if result.internal_topics_to_create:
        by_name = {t.name: t for t in result.internal_topics_to_create}
        allowed, denied = _creatable(ctx, sorted(by_name))
        broker.groups.create_streams_topics([by_name[n] for n in allowed],
                                            broker.config.get("txbroker.max.partitions"))
        if denied:
            statuses = _unauthorized(statuses, denied)
    groups = broker.groups
    if ctx.header.api_version >= 1:  # v0 clients do not know the status (KAFKA-20744)
        missing = groups.streams_missing_client_tags(hb.group_id, result.member_id)
        if missing:
            statuses.append(Status(MISSING_CLIENT_TAGS, "Missing required client tags for "
                                   f"rack-aware standby assignment: [{', '.join(missing)}]. "
                                   "Configure them via 'client.tag.<tagKey>' in your Streams "
                                   "config."))
    schema = ctx.schema
    a = result.assignment
    return _answer(
        ctx, ErrorCode.none, None, member_id=result.member_id, member_epoch=result.member_epoch,
        acceptable_recovery_lag=groups.group_configs.value(hb.group_id,
                                                           STREAMS_ACCEPTABLE_RECOVERY_LAG),
        heartbeat_interval=datetime.timedelta(milliseconds=result.heartbeat_interval_ms),
        task_offset_interval=datetime.timedelta(milliseconds=result.task_offset_interval_ms),
        status=tuple(build(schema.Status, status_code=s.code, status_detail=s.detail)
                     for s in statuses),
        active_tasks=None if a is None else task_ids(schema.TaskIds, a.active),
        standby_tasks=None if a is None else task_ids(schema.TaskIds, a.standby),
        warmup_tasks=None if a is None else task_ids(schema.TaskIds, a.warmup),
        endpoint_information_epoch=result.endpoint_information_epoch,
        partitions_by_user_endpoint=_by_endpoint(schema, result.partitions_by_endpoint))


def _by_endpoint(schema, endpoints):
    """PartitionsByUserEndpoint: each member's endpoint and its tasks' partitions."""
    if endpoints is None:
        return None

    def topic_partitions(pairs):
        return tuple(build(schema.TopicPartition, topic=topic, partitions=parts)
                     for topic, parts in pairs)

    return tuple(build(schema.EndpointToPartitions,
                       user_endpoint=build(schema.Endpoint, host=e.host, port=e.port),
                       active_partitions=topic_partitions(e.active),
                       standby_partitions=topic_partitions(e.standby)) for e in endpoints)


def _unauthorized(statuses: list[Status], denied: list[str]) -> list[Status]:
    """KafkaApis names the topics it may not create in the MISSING_INTERNAL_TOPICS status."""
    note = f"Unauthorized to CREATE on topics {', '.join(denied)}."
    for i, s in enumerate(statuses):
        if s.code == MISSING_INTERNAL_TOPICS:
            statuses[i] = Status(s.code, f"{s.detail}; {note}")
            return statuses
    return [*statuses, Status(MISSING_INTERNAL_TOPICS, note)]
