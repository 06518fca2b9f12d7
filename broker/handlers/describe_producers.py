"""DescribeProducers (key 61, KIP-664): the idempotent/transactional producers a
partition knows, with their open transaction's first offset (find hanging ones)."""

from __future__ import annotations

from txbroker.protocol.acls import AclOperation, ResourceType
from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ..context import RequestContext
from ._groups import ZERO

API_KEY = 61
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request):
    logs = ctx.broker.logs
    schema = ctx.schema
    topics = []
    for topic in request.topics:
        parts = []
        readable = ctx.authorize(AclOperation.READ, ResourceType.TOPIC, topic.name)
        for p in topic.partition_indexes:
            plog = logs.get_log(topic.name, p)
            if not readable:
                parts.append(build(schema.PartitionResponse, partition_index=p,
                                   error_code=ErrorCode.topic_authorization_failed,
                                   error_message=None, active_producers=()))
                continue
            if plog is None:
                parts.append(build(schema.PartitionResponse, partition_index=p,
                                   error_code=ErrorCode.unknown_topic_or_partition,
                                   error_message=f"unknown partition {topic.name}-{p}",
                                   active_producers=()))
                continue
            producers = tuple(
                build(schema.ProducerState, producer_id=e.producer_id,
                      producer_epoch=e.epoch, last_sequence=e.last_seq,
                      last_timestamp=e.last_timestamp, coordinator_epoch=e.coordinator_epoch,
                      current_txn_start_offset=_start(plog.ongoing_transaction_start(
                          e.producer_id)))
                for e in plog.producers())
            parts.append(build(schema.PartitionResponse, partition_index=p,
                               error_code=ErrorCode.none, error_message=None,
                               active_producers=producers))
        topics.append(build(schema.TopicResponse, name=topic.name, partitions=tuple(parts)))
    return build(ctx.response_type, throttle_time=ZERO, topics=tuple(topics))


def _start(offset: int | None) -> int:
    return -1 if offset is None else offset
