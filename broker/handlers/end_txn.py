"""EndTxn (key 26): commit or abort. PrepareCommit/PrepareAbort is fsynced before the
answer; the markers and CompleteCommit/CompleteAbort follow. v5 is transactions v2
(KIP-890): the epoch is bumped and the answer carries the producer id/epoch the
producer continues with."""

from __future__ import annotations

from txbroker.protocol import fast_responses
from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ..context import CloseConnection, RequestContext
from ._groups import ZERO, code, may_write_transactional_id

API_KEY = 26
MIN_VERSION = 0
MAX_VERSION = 5


async def handle(ctx: RequestContext, request):
    broker = ctx.broker
    producer = {}
    if not may_write_transactional_id(ctx, request.transactional_id):
        error = ErrorCode.transactional_id_authorization_failed.value
    else:
        result = await broker.transactions.end_txn(
            request.transactional_id, request.producer_id, request.producer_epoch,
            bool(request.committed), ctx.version)
        error = result.error
        producer = {"producer_id": result.producer_id, "producer_epoch": result.producer_epoch}
        if await broker.faults.hit("drop_end_txn_response"):
            raise CloseConnection
    if ctx.version in fast_responses.END_TXN_VERSIONS:
        ctx.error_codes = (int(error),) if error else ()  # for /metrics
        return fast_responses.end_txn(ctx.version, error)
    if ctx.version < 5:
        producer = {}
    return build(ctx.response_type, throttle_time=ZERO, error_code=code(error), **producer)
