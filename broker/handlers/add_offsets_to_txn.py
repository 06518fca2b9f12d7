"""AddOffsetsToTxn (key 25): adds the group's __consumer_offsets partition to the
transaction, before TxnOffsetCommit. v4 (KIP-890) only allows TRANSACTION_ABORTABLE
in the answer. Transactions v2 producers skip it: TxnOffsetCommit v5 adds the
partition itself. Kafka treats every version as transactions v1 (the transition
records version 0)."""

from __future__ import annotations

from txbroker.protocol import fast_responses
from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ..context import RequestContext
from ._groups import ZERO, code, may_read_group, may_write_transactional_id

API_KEY = 25
MIN_VERSION = 0
MAX_VERSION = 4


async def handle(ctx: RequestContext, request):
    # Kafka: WRITE on the transactional id, then READ on the group.
    if not may_write_transactional_id(ctx, request.transactional_id):
        error = ErrorCode.transactional_id_authorization_failed.value
    elif not may_read_group(ctx, request.group_id):
        error = ErrorCode.group_authorization_failed.value
    else:
        error = (await ctx.broker.transactions.add_offsets(
            request.transactional_id, request.producer_id, request.producer_epoch,
            request.group_id, ctx.version)).error
    return _answer(ctx, error)


def _answer(ctx, error: int):
    if ctx.version in fast_responses.ADD_OFFSETS_VERSIONS:
        ctx.error_codes = (int(error),) if error else ()  # for /metrics
        return fast_responses.add_offsets_to_txn(ctx.version, error)
    return build(ctx.response_type, throttle_time=ZERO, error_code=code(error))
