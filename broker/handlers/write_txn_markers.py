"""WriteTxnMarkers (key 27): write COMMIT/ABORT markers into partitions. Kafka's
coordinator sends it to partition leaders; here the coordinator writes markers
in-process, and this API serves the KIP-664 abort path for hanging transactions
(`txbroker transactions abort`, Admin.abortTransaction)."""

from __future__ import annotations

from txbroker.coordinator.transaction.markers import write_markers
from txbroker.protocol.messages import build

API_KEY = 27
MIN_VERSION = 1
MAX_VERSION = 1


async def handle(ctx, request):
    broker = ctx.broker
    schema = ctx.schema
    out = []
    for marker in request.markers:
        partitions = [(t.name, p) for t in marker.topics for p in t.partition_indexes]
        results = await write_markers(broker.logs, broker.groups, marker.producer_id,
                                      marker.producer_epoch, bool(marker.transaction_result),
                                      partitions, marker.coordinator_epoch)
        topics = tuple(
            build(schema.WritableTxnMarkerTopicResult, name=t.name, partitions=tuple(
                build(schema.WritableTxnMarkerPartitionResult, partition_index=p,
                      error_code=results[(t.name, p)])
                for p in t.partition_indexes))
            for t in marker.topics)
        out.append(build(schema.WritableTxnMarkerResult, producer_id=marker.producer_id,
                         topics=topics))
    return build(ctx.response_type, markers=tuple(out))
