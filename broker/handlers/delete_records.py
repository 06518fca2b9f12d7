"""DeleteRecords (key 21): move partitions' log start offsets forward (KIP-107)."""

from __future__ import annotations

import datetime
import logging

from txbroker.protocol.acls import AclOperation, ResourceType
from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ..context import RequestContext

API_KEY = 21
MIN_VERSION = 0
MAX_VERSION = 2

HIGH_WATERMARK = -1  # "delete everything below the high watermark"

log = logging.getLogger(__name__)
_ZERO = datetime.timedelta(0)


def _delete(logs, topic: str, partition: int, offset: int) -> tuple[ErrorCode, int]:
    """(error, low watermark) of one partition, as Kafka's replica manager answers."""
    plog = logs.get_log(topic, partition)
    if plog is None:
        return ErrorCode.unknown_topic_or_partition, -1
    if plog.offline is not None:
        # A failed fsync took it offline: Kafka answers a partition of an offline log
        # directory so; moving its start would write a checkpoint for a log it distrusts.
        return ErrorCode.kafka_storage_error, -1
    if "delete" not in plog.config.cleanup_policy:
        # Kafka refuses to move the start of a compact-only log.
        return ErrorCode.policy_violation, -1
    target = plog.high_watermark if offset == HIGH_WATERMARK else offset
    if target < 0 or target > plog.high_watermark:
        return ErrorCode.offset_out_of_range, -1
    return ErrorCode.none, plog.delete_records_before(target)


async def handle(ctx: RequestContext, request):
    logs = ctx.broker.logs
    schema = ctx.schema
    changed = False
    topics = []
    deletable = ctx.authorized(AclOperation.DELETE, ResourceType.TOPIC,
                               (t.name for t in request.topics))
    for topic in request.topics:
        parts = []
        for p in topic.partitions:
            if topic.name not in deletable:
                parts.append(build(schema.DeleteRecordsPartitionResult,
                                   partition_index=p.partition_index, low_watermark=-1,
                                   error_code=ErrorCode.topic_authorization_failed))
                continue
            before = logs.get_log(topic.name, p.partition_index)
            start = before.log_start_offset if before is not None else -1
            error, low = _delete(logs, topic.name, p.partition_index, p.offset)
            changed |= error == ErrorCode.none and low != start
            parts.append(build(schema.DeleteRecordsPartitionResult,
                               partition_index=p.partition_index, low_watermark=low,
                               error_code=error))
        topics.append(build(schema.DeleteRecordsTopicResult, name=topic.name,
                            partitions=tuple(parts)))
    if changed:
        # Durable before the answer: a restart must not bring deleted records back
        # (Kafka checkpoints log start offsets only once a minute).
        try:
            await logs.write_checkpoints_now()
        except OSError as e:
            log.warning("log start offset checkpoint not written: %s", e)
    return build(ctx.response_type, throttle_time=_ZERO, topics=tuple(topics))
