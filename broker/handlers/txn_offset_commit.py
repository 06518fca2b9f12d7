"""TxnOffsetCommit (key 28): offsets committed inside a transaction (KIP-98, KIP-447).

The group coordinator writes them in a transactional batch of the producer; they
become visible only when the transaction's COMMIT marker reaches the group's
__consumer_offsets partition. v3+ carries the member id and generation, checked
like an OffsetCommit (KIP-447). The group's offsets partition must be in the
producer's transaction: up to v4 AddOffsetsToTxn put it there (checked; v4 may
answer TRANSACTION_ABORTABLE); from v5 (transactions v2) it is added here, as
Kafka's group coordinator does it with its partition leader's AddPartitionsToTxn.
"""

from __future__ import annotations

from txbroker.protocol import fast_responses
from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ..context import RequestContext
from ._groups import (
    ZERO,
    code,
    commit_entries,
    may_read_group,
    may_write_transactional_id,
    split_commit_entries,
)

API_KEY = 28
MIN_VERSION = 0
MAX_VERSION = 5


async def handle(ctx: RequestContext, request):
    entries = commit_entries(request)
    # Kafka: WRITE on the transactional id, READ on the group, READ on each topic.
    denied = {}
    if not may_write_transactional_id(ctx, request.transactional_id):
        error = ErrorCode.transactional_id_authorization_failed.value
    elif not may_read_group(ctx, request.group_id):
        error = ErrorCode.group_authorization_failed.value
    elif ctx.broker.shares.is_share_group(request.group_id):
        # A share group has no committed offsets (Kafka: "not a consumer group"); checked
        # before the offsets partition joins the transaction.
        error = ErrorCode.group_id_not_found.value
    else:
        entries, denied = split_commit_entries(ctx, entries)
        error = (await ctx.broker.transactions.add_offsets_partition(
            request.transactional_id, request.producer_id, request.producer_epoch,
            request.group_id) if ctx.version >= 5
            else ctx.broker.check_txn_offset_commit(request))
    if error:
        results = {(e.topic, e.partition): error for e in entries}
    elif denied and not entries:
        results = {}
    else:
        results = await ctx.broker.groups.txn_commit_offsets(
            group_id=request.group_id, producer_id=request.producer_id,
            producer_epoch=request.producer_epoch,
            generation_id=getattr(request, "generation_id", -1),
            member_id=getattr(request, "member_id", "") or "",
            group_instance_id=getattr(request, "group_instance_id", None), entries=entries)
    results.update(denied)
    if ctx.version in fast_responses.TXN_OFFSET_COMMIT_VERSIONS:
        ctx.error_codes = [int(e) for e in results.values() if e]  # for /metrics
        return fast_responses.txn_offset_commit(ctx.version, [
            (topic.name, [(p.partition_index, int(results[(topic.name, p.partition_index)]))
                          for p in topic.partitions])
            for topic in request.topics])
    schema = ctx.schema
    topics = tuple(
        build(schema.TxnOffsetCommitResponseTopic, name=topic.name, partitions=tuple(
            build(schema.TxnOffsetCommitResponsePartition, partition_index=p.partition_index,
                  error_code=code(results[(topic.name, p.partition_index)]))
            for p in topic.partitions))
        for topic in request.topics)
    return build(ctx.response_type, throttle_time=ZERO, topics=topics)
