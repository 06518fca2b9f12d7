"""SaslHandshake (key 17): the client names its SASL mechanism. v1 (and v0, deprecated
in Kafka 4 but still served) as Kafka's SaslServerAuthenticator: after v1 the tokens
come in SaslAuthenticate requests, after v0 as bare size-prefixed frames."""

from __future__ import annotations

import logging

from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ..context import RequestContext
from .sasl_authenticate import delay_and_close

API_KEY = 17
MIN_VERSION = 0
MAX_VERSION = 1

log = logging.getLogger(__name__)


async def handle(ctx: RequestContext, request):
    session = ctx.session
    listener = ctx.broker.listeners_by_name.get(session.listener_name)
    sasl = listener.sasl if listener is not None else None
    if sasl is None or session.sasl_state != "handshake":
        # Not a SASL listener, or already authenticated: Kafka's KafkaApis answers so.
        log.info("%s sent SaslHandshake on listener %s outside a SASL handshake: "
                 "ILLEGAL_SASL_STATE", ctx.peer, session.listener_name)
        return build(ctx.response_type, error_code=ErrorCode.illegal_sasl_state, mechanisms=())
    mechanisms = tuple(sasl.mechanisms)
    if request.mechanism not in sasl.mechanisms:
        log.warning("failed authentication with %s (listener %s): SASL mechanism %r is not "
                    "enabled (enabled: %s)", ctx.peer, session.listener_name, request.mechanism,
                    ", ".join(mechanisms))
        await delay_and_close(ctx)
        return build(ctx.response_type, error_code=ErrorCode.unsupported_sasl_mechanism,
                     mechanisms=mechanisms)
    session.sasl_mechanism = request.mechanism
    session.sasl_server = sasl.server_for(request.mechanism, ctx.broker.scram_credentials)
    session.sasl_state = "authenticate" if ctx.version >= 1 else "raw"
    return build(ctx.response_type, error_code=ErrorCode.none, mechanisms=mechanisms)
