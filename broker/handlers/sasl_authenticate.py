"""SaslAuthenticate (key 36): one SASL token each way, until the mechanism completes and
the connection has its principal. A failed authentication is answered
SASL_AUTHENTICATION_FAILED with Kafka's message after
``connection.failed.authentication.delay.ms``, and the connection is closed."""

from __future__ import annotations

import asyncio
import datetime
import logging
import struct

from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ..context import CLOSE, RequestContext
from ..security.sasl import AuthenticationFailed

API_KEY = 36
MIN_VERSION = 0
MAX_VERSION = 2

log = logging.getLogger(__name__)
_ZERO = datetime.timedelta(0)
_SIZE = struct.Struct(">i")


async def delay_and_close(ctx_or_broker, session=None) -> None:
    """Kafka delays the answer to a failed authentication (and the close after it) so
    that a client retrying wrong credentials in a loop costs the broker little."""
    broker = getattr(ctx_or_broker, "broker", ctx_or_broker)
    session = session if session is not None else ctx_or_broker.session
    session.close_after_response = True
    session.sasl_state = "failed"
    delay_ms = broker.config.get("connection.failed.authentication.delay.ms")
    if delay_ms > 0:
        await asyncio.sleep(delay_ms / 1000)


def _evaluate(session, token: bytes) -> bytes:
    """The mechanism's next token; on completion the session is authenticated."""
    server = session.sasl_server
    answer = server.evaluate(token)
    if server.principal_name is not None:
        session.principal = "User:" + server.principal_name
        session.authenticated = True
        session.sasl_state = "complete"
        session.sasl_server = None
        log.info("%s authenticated as %s with %s on listener %s", session.peer,
                 session.principal, session.sasl_mechanism, session.listener_name)
    return answer


def _log_failure(session, e: AuthenticationFailed) -> None:
    # The user name tried, never a password or token.
    log.warning("failed authentication with %s (listener %s, mechanism %s, principal %s): %s",
                session.peer, session.listener_name, session.sasl_mechanism,
                f"User:{e.user}" if e.user else "unknown", e.reason)


async def handle(ctx: RequestContext, request):
    session = ctx.session
    if session.authenticated or session.sasl_server is None:
        log.info("%s sent SaslAuthenticate on listener %s outside SASL authentication: "
                 "ILLEGAL_SASL_STATE", ctx.peer, session.listener_name)
        return build(ctx.response_type, error_code=ErrorCode.illegal_sasl_state,
                     error_message="SaslAuthenticate request received after successful "
                                   "authentication" if session.authenticated else
                                   "Unexpected SaslAuthenticate request",
                     auth_bytes=b"", session_lifetime=_ZERO)
    try:
        answer = _evaluate(session, bytes(request.auth_bytes))
    except AuthenticationFailed as e:
        _log_failure(session, e)
        await delay_and_close(ctx)
        return build(ctx.response_type, error_code=ErrorCode.sasl_authentication_failed,
                     error_message=str(e), auth_bytes=b"", session_lifetime=_ZERO)
    return build(ctx.response_type, error_code=ErrorCode.none, error_message=None,
                 auth_bytes=answer, session_lifetime=_ZERO)


async def raw_token(broker, session, frame: bytes):
    """A bare token after SaslHandshake v0: answered bare (size-prefixed); a failure
    closes the connection after the delay, with no answer, as Kafka does."""
    try:
        answer = _evaluate(session, frame)
    except AuthenticationFailed as e:
        _log_failure(session, e)
        await delay_and_close(broker, session)
        return CLOSE
    return _SIZE.pack(len(answer)) + answer
