"""AddPartitionsToTxn (key 24): v0-3 from producers; v4+ (KIP-890) batches several
transactional ids and has a verify-only form brokers use among themselves."""

from __future__ import annotations

from txbroker.protocol import fast_responses
from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ._groups import ZERO, code

API_KEY = 24
MIN_VERSION = 0
MAX_VERSION = 3


async def handle(ctx, request):
    broker = ctx.broker
    schema = ctx.schema
    wanted = [(t.name, p) for t in request.v3_and_below_topics for p in t.partitions]
    # Partitions that do not exist fail; the others are then not attempted (Kafka).
    missing = [tp for tp in wanted if broker.logs.get_log(*tp) is None]
    if missing:
        errors = {tp: (ErrorCode.unknown_topic_or_partition.value if tp in missing
                       else ErrorCode.operation_not_attempted.value) for tp in wanted}
    else:
        result = await broker.transactions.add_partitions(
            request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch, wanted, ctx.version)
        errors = result.errors
    if ctx.version in fast_responses.ADD_PARTITIONS_VERSIONS:
        grouped: dict[str, list[tuple[int, int]]] = {}
        for (topic, partition), error in errors.items():
            grouped.setdefault(topic, []).append((partition, int(error)))
        ctx.error_codes = [int(e) for e in errors.values() if e]  # for /metrics
        return fast_responses.add_partitions_to_txn(ctx.version, grouped.items())
    by_topic: dict[str, list] = {}
    for (topic, partition), error in errors.items():
        by_topic.setdefault(topic, []).append(
            build(schema.AddPartitionsToTxnPartitionResult, partition_index=partition,
                  partition_error_code=code(error)))
    results = tuple(build(schema.AddPartitionsToTxnTopicResult, name=t,
                          results_by_partition=tuple(ps)) for t, ps in by_topic.items())
    return build(ctx.response_type, throttle_time=ZERO, results_by_topic_v3_and_below=results)
