"""DescribeTopicPartitions (key 75, KIP-966): topics' partitions, paginated by a cursor.

Kafka's tools (kafka-topics --describe) prefer it to Metadata. Pages follow Kafka's
rules: topics sorted by name, at most ``response_partition_limit`` partitions (at least
one, at most 2000) per response, and ``next_cursor`` naming the first partition left
out. One broker has no eligible leader replicas: those lists are empty."""

from __future__ import annotations

import datetime
import uuid

from txbroker.protocol.acls import AclOperation, ResourceType
from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ..context import RequestContext

API_KEY = 75
MIN_VERSION = 0
MAX_VERSION = 0

# Kafka's max.request.partition.size.limit default.
MAX_PARTITIONS_PER_RESPONSE = 2000
NO_OPERATIONS = -2147483648

_ZERO = datetime.timedelta(0)
_NO_UUID = uuid.UUID(int=0)


def _topic(schema, name: str, error: ErrorCode, topic_id=_NO_UUID, internal: bool = False,
           partitions: tuple = (), operations: int = NO_OPERATIONS):
    return build(schema.DescribeTopicPartitionsResponseTopic, error_code=error, name=name,
                 topic_id=topic_id, is_internal=internal, partitions=partitions,
                 topic_authorized_operations=operations)


async def handle(ctx: RequestContext, request):
    broker = ctx.broker
    topics_info = broker.logs.topics
    schema = ctx.schema
    node = broker.node_id
    requested = sorted({t.name for t in request.topics})
    # Kafka: DESCRIBE on each topic; all topics -> only the describable ones, unlogged;
    # named ones -> TOPIC_AUTHORIZATION_FAILED.
    names = requested or sorted(ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC,
                                               topics_info, log_denied=False))
    describable = ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, requested)
    cursor = request.cursor
    if cursor is not None:
        if requested and cursor.topic_name not in requested:
            # Kafka refuses a cursor outside the topics asked for, on every topic.
            return build(ctx.response_type, throttle_time=_ZERO, next_cursor=None, topics=tuple(
                _topic(schema, name, ErrorCode.invalid_request)
                for name in dict.fromkeys(t.name for t in request.topics)))
        names = [n for n in names if n >= cursor.topic_name]
    remaining = max(1, min(request.response_partition_limit, MAX_PARTITIONS_PER_RESPONSE))
    out = []
    next_cursor = None
    for name in names:
        if remaining <= 0:
            next_cursor = build(schema.Cursor, topic_name=name, partition_index=0)
            break
        if requested and name not in describable:
            out.append(_topic(schema, name, ErrorCode.topic_authorization_failed))
            continue
        info = topics_info.get(name)
        if info is None:
            out.append(_topic(schema, name, ErrorCode.unknown_topic_or_partition))
            continue
        start = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        indexes = range(max(start, 0), info.partitions)
        taken = indexes[:remaining]
        remaining -= len(taken)
        partitions = tuple(
            build(schema.DescribeTopicPartitionsResponsePartition, error_code=ErrorCode.none,
                  partition_index=p, leader_id=node, leader_epoch=0, replica_nodes=(node,),
                  isr_nodes=(node,), eligible_leader_replicas=(), last_known_elr=(),
                  offline_replicas=())
            for p in taken)
        out.append(_topic(schema, name, ErrorCode.none, info.topic_id, info.internal, partitions,
                          ctx.authorized_operations(ResourceType.TOPIC, name)))
        if len(taken) < len(indexes):
            next_cursor = build(schema.Cursor, topic_name=name,
                                partition_index=indexes[len(taken)])
            break
    return build(ctx.response_type, throttle_time=_ZERO, topics=tuple(out),
                 next_cursor=next_cursor)
