"""AddOffsetsToTxn (key 25): adds the group's __consumer_offsets partition to the
transaction, before TxnOffsetCommit."""

from __future__ import annotations

from txbroker.protocol import fast_responses
from txbroker.protocol.messages import build

from ._groups import ZERO, code

API_KEY = 25
MIN_VERSION = 0
MAX_VERSION = 3


async def handle(ctx, request):
    result = await ctx.broker.transactions.add_offsets(
        request.transactional_id, request.producer_id, request.producer_epoch,
        request.group_id, ctx.version)
    if ctx.version in fast_responses.ADD_OFFSETS_VERSIONS:
        ctx.error_codes = (int(result.error),) if result.error else ()  # for /metrics
        return fast_responses.add_offsets_to_txn(ctx.version, result.error)
    return build(ctx.response_type, throttle_time=ZERO, error_code=code(result.error))
