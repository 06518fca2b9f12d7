"""Metadata (key 3): brokers, topics and partitions; auto-creates topics."""

from __future__ import annotations

import datetime
import logging
import uuid

from txbroker.protocol.errors import ErrorCode, KafkaError
from txbroker.protocol.messages import build

from ..context import CloseConnection

API_KEY = 3
MIN_VERSION = 0
MAX_VERSION = 12

log = logging.getLogger(__name__)
_ZERO = datetime.timedelta(0)
_NO_UUID = uuid.UUID(int=0)


def topic_entry(ctx, name: str, error: ErrorCode = ErrorCode.none, topic_id=None):
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
                 topic_authorized_operations=-2147483648)


async def handle(ctx, request):
    broker = ctx.broker
    logs = broker.logs
    schema = ctx.schema
    topics = []
    requested = request.topics
    if ctx.version == 0 and requested == ():
        requested = None  # v0: an empty list means all topics
    if requested is None:
        for name in sorted(logs.topics):
            topics.append(topic_entry(ctx, name))
    else:
        allow_auto = getattr(request, "allow_auto_topic_creation", True)
        by_id = {info.topic_id: name for name, info in logs.topics.items()}
        if ctx.version < 12 and any(item.name is None for item in requested):
            # Versions 10 and 11 carry topic ids in the schema but cannot answer a topic
            # without a name; Kafka refuses such a request as invalid.
            log.warning("closing %s: Metadata v%d names a topic with a null name (topic "
                        "ids need v12+)", ctx.peer, ctx.version)
            raise CloseConnection
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
            if name not in logs.topics:
                if allow_auto and broker.config.get("auto.create.topics.enable"):
                    try:
                        logs.create_topic(name, broker.config.get("num.partitions"),
                                          max_partitions=broker.config.get(
                                              "txbroker.max.partitions"))
                    except KafkaError as e:
                        log.info("metadata auto-create of %r refused: %s", name, e)
                        topics.append(topic_entry(ctx, name, e.code))
                        continue
                else:
                    topics.append(topic_entry(ctx, name, ErrorCode.unknown_topic_or_partition))
                    continue
            topics.append(topic_entry(ctx, name))
    host, port = broker.advertised_for(ctx.session.listener_name)
    brokers = (build(schema.MetadataResponseBroker, node_id=broker.node_id, host=host, port=port,
                     rack=None),)
    return build(ctx.response_type, throttle_time=_ZERO, brokers=brokers,
                 cluster_id=broker.cluster_id, controller_id=broker.node_id, topics=tuple(topics),
                 cluster_authorized_operations=-2147483648)
