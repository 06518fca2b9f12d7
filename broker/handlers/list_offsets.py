"""ListOffsets (key 2): earliest, latest, by timestamp, max timestamp."""

from __future__ import annotations

import datetime

from txbroker.protocol.acls import AclOperation, ResourceType
from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ..context import RequestContext

API_KEY = 2
MIN_VERSION = 1
MAX_VERSION = 7

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
READ_COMMITTED = 1
_ZERO = datetime.timedelta(0)


async def handle(ctx: RequestContext, request):
    logs = ctx.broker.logs
    schema = ctx.schema
    read_committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
    topics = []
    describable = ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC,
                                 (t.name for t in request.topics))
    for topic in request.topics:
        parts = []
        seen = set()
        for lp in topic.partitions:
            plog = logs.get_log(topic.name, lp.partition_index)
            error = ErrorCode.none
            offset, timestamp = -1, -1
            epoch = getattr(lp, "current_leader_epoch", -1)
            if topic.name not in describable:
                error = ErrorCode.topic_authorization_failed
            elif lp.partition_index in seen:
                error = ErrorCode.invalid_request
            elif plog is None:
                error = ErrorCode.unknown_topic_or_partition
            elif epoch is not None and epoch > 0:
                error = ErrorCode.unknown_leader_epoch
            elif plog.offline is not None:  # a failed fsync (storage/flusher.py), as Kafka
                error = ErrorCode.kafka_storage_error
            elif lp.timestamp == LATEST:
                offset = plog.last_stable_offset if read_committed else plog.high_watermark
            elif lp.timestamp == EARLIEST:
                offset = plog.log_start_offset
            elif lp.timestamp == MAX_TIMESTAMP and ctx.version < 7:
                # Kafka's answer to a query older versions cannot make (KIP-734).
                error = ErrorCode.unsupported_version
            elif lp.timestamp == MAX_TIMESTAMP:
                found = plog.max_timestamp_offset()
                if found is not None:
                    offset, timestamp = found
            elif lp.timestamp >= 0:
                found = plog.offset_for_timestamp(lp.timestamp)
                if found is not None:
                    offset, timestamp = found
                    if read_committed and offset >= plog.last_stable_offset:
                        offset, timestamp = -1, -1
            else:
                error = ErrorCode.invalid_request
            seen.add(lp.partition_index)
            parts.append(build(schema.ListOffsetsPartitionResponse,
                               partition_index=lp.partition_index, error_code=error,
                               timestamp=timestamp, offset=offset,
                               leader_epoch=0 if error == ErrorCode.none else -1))
        topics.append(build(schema.ListOffsetsTopicResponse, name=topic.name,
                            partitions=tuple(parts)))
    return build(ctx.response_type, throttle_time=_ZERO, topics=tuple(topics))
