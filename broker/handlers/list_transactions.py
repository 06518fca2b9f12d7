"""ListTransactions (key 66, KIP-664); the duration filter is v1."""

from __future__ import annotations

from txbroker.protocol.acls import AclOperation, ResourceType
from txbroker.protocol.messages import build
from txbroker.storage.log import now_ms

from ._groups import ZERO, code

API_KEY = 66
MIN_VERSION = 0
MAX_VERSION = 1


async def handle(ctx, request):
    result = ctx.broker.transactions.state.list_transactions(
        request.state_filters or (), request.producer_id_filters or (),
        getattr(request, "duration_filter", -1), now_ms())
    # Kafka lists only the transactional ids the principal may describe.
    describable = ctx.authorized(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                                 (t.transactional_id for t in result.transactions))
    out = tuple(build(ctx.schema.TransactionState, transactional_id=t.transactional_id,
                      producer_id=t.producer_id, transaction_state=t.state)
                for t in result.transactions if t.transactional_id in describable)
    return build(ctx.response_type, throttle_time=ZERO, error_code=code(result.error),
                 unknown_state_filters=tuple(result.unknown_state_filters),
                 transaction_states=out)
