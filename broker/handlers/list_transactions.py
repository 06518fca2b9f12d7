"""ListTransactions (key 66, KIP-664); the duration filter is v1 (KIP-994), the
transactional-id pattern v2 (KIP-1152).

The pattern is a regular expression in RE2 syntax that must match the whole
transactional id, as Kafka's RE2/J ``matcher(id).matches()``; it is matched with the
linear-time engine of KIP-848 topic subscriptions (coordinator/group/topic_regex.py),
so a hostile pattern cannot stall the event loop. Null or empty: no filter. A pattern
that does not compile is INVALID_REGULAR_EXPRESSION for the whole request, after the
coordinator-loading check (Kafka's TransactionStateManager order).
"""

from __future__ import annotations

import logging

from txbroker.coordinator.group.topic_regex import RegexError, TopicRegex
from txbroker.protocol.acls import AclOperation, ResourceType
from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build
from txbroker.storage.log import now_ms

from ..context import RequestContext
from ._groups import ZERO, code

API_KEY = 66
MIN_VERSION = 0
MAX_VERSION = 2

log = logging.getLogger(__name__)


async def handle(ctx: RequestContext, request):
    result = ctx.broker.transactions.list_transactions(
        request.state_filters or (), request.producer_id_filters or (),
        getattr(request, "duration_filter", -1), now_ms())
    transactions = result.transactions
    pattern = getattr(request, "transactional_id_pattern", None)
    if pattern and not result.error:
        try:
            regex = TopicRegex(pattern)
        except RegexError as e:
            log.info("ListTransactions from %s: transactional id pattern %r is not a valid "
                     "regular expression: %s", ctx.peer, pattern[:256], e)
            return build(ctx.response_type, throttle_time=ZERO,
                         error_code=ErrorCode.invalid_regular_expression,
                         unknown_state_filters=(), transaction_states=())
        transactions = [t for t in transactions if regex.matches(t.transactional_id)]
    # Kafka lists only the transactional ids the principal may describe.
    describable = ctx.authorized(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                                 (t.transactional_id for t in transactions))
    out = tuple(build(ctx.schema.TransactionState, transactional_id=t.transactional_id,
                      producer_id=t.producer_id, transaction_state=t.state)
                for t in transactions if t.transactional_id in describable)
    return build(ctx.response_type, throttle_time=ZERO, error_code=code(result.error),
                 unknown_state_filters=tuple(result.unknown_state_filters),
                 transaction_states=out)
