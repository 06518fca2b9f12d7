"""AddPartitionsToTxn (key 24): v0-3 from producers; v4+ (KIP-890) batches several
transactional ids and is what partition leaders send the coordinator (CLUSTER_ACTION):
verify-only to check a transactions v1 write, or (verify_only false) to add the
partition of a transactions v2 write (Produce v12+, TxnOffsetCommit v5+). Here
the leaders are in-process; the wire form serves Kafka tooling and tests."""

from __future__ import annotations

from txbroker.protocol import fast_responses
from txbroker.protocol.acls import AclOperation, ResourceType
from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ..context import RequestContext
from ._groups import ZERO, code

WRITE, TOPIC, TRANSACTIONAL_ID = (AclOperation.WRITE, ResourceType.TOPIC,
                                  ResourceType.TRANSACTIONAL_ID)

API_KEY = 24
MIN_VERSION = 0
MAX_VERSION = 5


async def handle(ctx: RequestContext, request):
    if ctx.version >= 4:
        return await _handle_batched(ctx, request)
    broker = ctx.broker
    schema = ctx.schema
    wanted = [(t.name, p) for t in request.v3_and_below_topics for p in t.partitions]
    tid = request.v3_and_below_transactional_id
    # Kafka: WRITE on the transactional id, then WRITE on each topic (never granted on an
    # internal topic); partitions denied or missing fail, the others are not attempted.
    failed = {}
    if not ctx.authorize(WRITE, TRANSACTIONAL_ID, tid):
        failed = {tp: ErrorCode.transactional_id_authorization_failed.value for tp in wanted}
    elif broker.authorizer is not None:
        topics = broker.logs.topics
        writable = ctx.authorized(WRITE, TOPIC, {
            t for t, _ in wanted if t not in topics or not topics[t].internal})
        failed = {tp: ErrorCode.topic_authorization_failed.value for tp in wanted
                  if tp[0] not in writable}
    failed.update({tp: ErrorCode.unknown_topic_or_partition.value for tp in wanted
                   if tp not in failed and broker.logs.get_log(*tp) is None})
    if failed:
        errors = {tp: failed.get(tp, ErrorCode.operation_not_attempted.value) for tp in wanted}
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


async def _handle_batched(ctx, request):
    """v4+: one result per transaction. Kafka: CLUSTER_ACTION on the cluster, else
    the whole request is CLUSTER_AUTHORIZATION_FAILED."""
    broker = ctx.broker
    schema = ctx.schema
    if not ctx.authorize_cluster(AclOperation.CLUSTER_ACTION):
        return build(ctx.response_type, throttle_time=ZERO,
                     error_code=ErrorCode.cluster_authorization_failed,
                     results_by_transaction=())
    out = []
    for txn in request.transactions:
        wanted = [(t.name, p) for t in txn.topics for p in t.partitions]
        missing = {tp for tp in wanted if broker.logs.get_log(*tp) is None}
        if missing:
            errors = {tp: (ErrorCode.unknown_topic_or_partition.value if tp in missing
                           else ErrorCode.operation_not_attempted.value) for tp in wanted}
        elif txn.verify_only:
            errors = broker.transactions.verify_partitions(
                txn.transactional_id, txn.producer_id, txn.producer_epoch, wanted)
        else:
            errors = (await broker.transactions.add_partitions(
                txn.transactional_id, txn.producer_id, txn.producer_epoch, wanted,
                ctx.version)).errors
        by_topic: dict[str, list] = {}
        for (topic, partition), error in errors.items():
            by_topic.setdefault(topic, []).append(
                build(schema.AddPartitionsToTxnPartitionResult, partition_index=partition,
                      partition_error_code=code(error)))
        out.append(build(schema.AddPartitionsToTxnResult, transactional_id=txn.transactional_id,
                         topic_results=tuple(
                             build(schema.AddPartitionsToTxnTopicResult, name=name,
                                   results_by_partition=tuple(parts))
                             for name, parts in by_topic.items())))
    return build(ctx.response_type, throttle_time=ZERO, error_code=ErrorCode.none,
                 results_by_transaction=tuple(out))
