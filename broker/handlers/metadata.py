"""Metadata (key 3): brokers, topics and partitions; auto-creates topics.

v13 (KIP-1102) adds a top-level error code, for REBOOTSTRAP_REQUIRED; Kafka 4.4's
broker always answers 0 there, and so does this one (it has nothing to rebootstrap to).
"""

from __future__ import annotations

import datetime
import logging
import uuid

from txbroker.protocol.acls import CLUSTER_NAME, AclOperation, ResourceType
from txbroker.protocol.errors import ErrorCode, KafkaError
from txbroker.protocol.messages import build

from ..context import CloseConnection, RequestContext

API_KEY = 3
MIN_VERSION = 0
MAX_VERSION = 13

log = logging.getLogger(__name__)
_ZERO = datetime.timedelta(0)
_NO_UUID = uuid.UUID(int=0)


NOT_REQUESTED = -2147483648  # authorized operations the client did not ask for
DESCRIBE, CREATE, TOPIC = AclOperation.DESCRIBE, AclOperation.CREATE, ResourceType.TOPIC


def topic_entry(ctx, name: str, error: ErrorCode = ErrorCode.none, topic_id=None,
                operations: bool = False):
    schema = ctx.schema
    broker = ctx.broker
    info = broker.logs.topics.get(name)
    partitions = ()
    internal = False
    if info is not None and error == ErrorCode.none:
        node = broker.node_id
        partitions = tuple(
            build(schema.MetadataResponsePartition, error_code=ErrorCode.none, partition_index=p,
                  leader_id=node, leader_epoch=0, replica_nodes=(node,), isr_nodes=(node,),
                  offline_replicas=())
            for p in range(info.partitions)
        )
        topic_id = info.topic_id
        internal = info.internal
    return build(schema.MetadataResponseTopic, error_code=error, name=name,
                 topic_id=topic_id or _NO_UUID, is_internal=internal, partitions=partitions,
                 topic_authorized_operations=ctx.authorized_operations(TOPIC, name)
                 if operations else NOT_REQUESTED)


def _unauthorized(ctx, name: str | None, internal: bool = False, topic_id=None):
    """TOPIC_AUTHORIZATION_FAILED. Asked by name: no topic id (Kafka does not tell whether
    a topic the principal may not describe exists); asked by id: that id and no name, as
    Kafka's KafkaApis answers."""
    return build(ctx.schema.MetadataResponseTopic,
                 error_code=ErrorCode.topic_authorization_failed, name=name,
                 topic_id=topic_id or _NO_UUID,
                 is_internal=internal, partitions=(), topic_authorized_operations=NOT_REQUESTED)


async def handle(ctx: RequestContext, request):
    broker = ctx.broker
    logs = broker.logs
    schema = ctx.schema
    topics = []
    requested = request.topics
    if ctx.version == 0 and requested == ():
        requested = None  # v0: an empty list means all topics
    ops = bool(getattr(request, "include_topic_authorized_operations", False))
    if requested is None:
        # Every topic the principal may describe; the others are left out, unlogged.
        names = sorted(logs.topics)
        describable = ctx.authorized(DESCRIBE, TOPIC, names, log_denied=False)
        for name in names:
            if name in describable:
                topics.append(topic_entry(ctx, name, operations=ops))
    else:
        allow_auto = getattr(request, "allow_auto_topic_creation", True)
        by_id = {info.topic_id: name for name, info in logs.topics.items()}
        if ctx.version < 12 and any(item.name is None for item in requested):
            # Versions 10 and 11 carry topic ids in the schema but cannot answer a topic
            # without a name; Kafka refuses such a request as invalid.
            log.warning("closing %s: Metadata v%d names a topic with a null name (topic "
                        "ids need v12+)", ctx.peer, ctx.version)
            raise CloseConnection
        describable = ctx.authorized(DESCRIBE, TOPIC, (
            item.name if item.name is not None else by_id.get(getattr(item, "topic_id", None), "")
            for item in requested))
        may_create_any = None
        for item in requested:
            name = item.name
            if name is None:
                # v10+: look up by topic id
                topic_id = getattr(item, "topic_id", None)
                found = by_id.get(topic_id)
                if found is None:
                    topics.append(build(schema.MetadataResponseTopic,
                                        error_code=ErrorCode.unknown_topic_id, name=None,
                                        topic_id=topic_id or _NO_UUID, is_internal=False,
                                        partitions=(), topic_authorized_operations=-2147483648))
                    continue
                name = found
            if name not in describable:
                topics.append(_unauthorized(ctx, item.name, topic_id=None if item.name is not None
                                            else getattr(item, "topic_id", None)))
                continue
            if name not in logs.topics:
                if allow_auto and broker.config.get("auto.create.topics.enable"):
                    # Kafka: CREATE on the cluster, or else on the topic.
                    if may_create_any is None:
                        may_create_any = ctx.authorize_cluster(CREATE, log_denied=False)
                    if not may_create_any and not ctx.authorize(CREATE, TOPIC, name):
                        topics.append(_unauthorized(ctx, name))
                        continue
                    try:
                        logs.create_topic(name, broker.config.get("num.partitions"),
                                          max_partitions=broker.config.get(
                                              "txbroker.max.partitions"))
                    except KafkaError as e:
                        log.info("metadata auto-create of %r refused: %s", name, e)
                        topics.append(topic_entry(ctx, name, e.code, operations=ops))
                        continue
                else:
                    topics.append(topic_entry(ctx, name, ErrorCode.unknown_topic_or_partition,
                                              operations=ops))
                    continue
            topics.append(topic_entry(ctx, name, operations=ops))
    host, port = broker.advertised_for(ctx.session.listener_name)
    brokers = (build(schema.MetadataResponseBroker, node_id=broker.node_id, host=host, port=port,
                     rack=None),)
    cluster_ops = NOT_REQUESTED
    if getattr(request, "include_cluster_authorized_operations", False) and ctx.version <= 10:
        cluster_ops = (ctx.authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME)
                       if ctx.authorize_cluster(DESCRIBE) else 0)
    return build(ctx.response_type, throttle_time=_ZERO, brokers=brokers,
                 cluster_id=broker.cluster_id, controller_id=broker.node_id, topics=tuple(topics),
                 cluster_authorized_operations=cluster_ops, error_code=ErrorCode.none)
