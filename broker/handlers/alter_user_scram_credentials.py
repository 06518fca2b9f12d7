"""AlterUserScramCredentials (key 51, KIP-554): upsert or delete SCRAM credentials. The
client sends the salted password (it paid the PBKDF2); the broker keeps the stored and
server keys derived from it, durably (broker/security/scram_credentials.py), before answering.
Per-user errors as Kafka's ScramControlManager: DUPLICATE_RESOURCE for a user altered
twice in one request, UNACCEPTABLE_CREDENTIAL for an empty name or iterations outside
4096..16384, UNSUPPORTED_SASL_MECHANISM for an unknown mechanism, RESOURCE_NOT_FOUND
for deleting a credential that does not exist."""

from __future__ import annotations

import asyncio
import logging

from txbroker.protocol import scram
from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ..context import RequestContext
from ..security.scram_credentials import MECHANISM_TYPES
from ._acls import scram_credentials_error
from ._groups import ZERO

API_KEY = 51
MIN_VERSION = 0
MAX_VERSION = 0

log = logging.getLogger(__name__)
DUPLICATE = (ErrorCode.duplicate_resource, "A user credential cannot be altered twice in the same request")


def _check_name_and_mechanism(name: str, mechanism: int) -> tuple[ErrorCode, str] | None:
    if not name:
        return ErrorCode.unacceptable_credential, "Username must not be empty"
    if mechanism not in MECHANISM_TYPES:
        return ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"
    return None


async def handle(ctx: RequestContext, request):
    denied = scram_credentials_error(ctx, alter=True)
    if denied is not None:  # ALTER on the cluster, checked before anything is changed
        names = dict.fromkeys(x.name for x in (*request.deletions, *request.upsertions))
        return build(ctx.response_type, throttle_time=ZERO, results=tuple(
            build(ctx.schema.AlterUserScramCredentialsResult, user=name, error_code=denied,
                  error_message=None) for name in names))
    store = ctx.broker.scram_credentials
    errors: dict[str, tuple[ErrorCode, str]] = {}
    deletions: dict[str, tuple[str, str]] = {}
    upserts: dict[str, tuple[tuple[str, str], scram.ScramCredential]] = {}
    for d in request.deletions:
        if d.name in errors:
            continue
        if deletions.pop(d.name, None) is not None:
            errors[d.name] = DUPLICATE
            continue
        problem = _check_name_and_mechanism(d.name, d.mechanism)
        if problem is None and store.get(d.name, MECHANISM_TYPES[d.mechanism]) is None:
            problem = (ErrorCode.resource_not_found,
                       "Attempt to delete a user credential that does not exist")
        if problem is not None:
            errors[d.name] = problem
        else:
            deletions[d.name] = (d.name, MECHANISM_TYPES[d.mechanism])
    for u in request.upsertions:
        if u.name in errors:
            continue
        if deletions.pop(u.name, None) is not None or upserts.pop(u.name, None) is not None:
            errors[u.name] = DUPLICATE
            continue
        problem = _check_name_and_mechanism(u.name, u.mechanism)
        if problem is None and u.iterations < scram.MIN_ITERATIONS:
            problem = (ErrorCode.unacceptable_credential, "Too few iterations")
        elif problem is None and u.iterations > scram.MAX_ITERATIONS:
            problem = (ErrorCode.unacceptable_credential, "Too many iterations")
        if problem is not None:
            errors[u.name] = problem
            continue
        mech_name = MECHANISM_TYPES[u.mechanism]
        cred = scram.credential_from_salted_password(scram.mechanism(mech_name), bytes(u.salted_password),
                                                     bytes(u.salt), u.iterations)
        upserts[u.name] = ((u.name, mech_name), cred)
    if deletions or upserts:
        # Durable before the answer; the store serializes concurrent rewrites.
        await asyncio.get_running_loop().run_in_executor(
            None, store.apply, dict(upserts.values()), list(deletions.values()))
        log.info("%s (%s) altered SCRAM credentials: upserted %s, deleted %s", ctx.peer,
                 ctx.principal, sorted(f"{n}/{m}" for (n, m), _ in upserts.values()) or "none",
                 sorted(f"{n}/{m}" for n, m in deletions.values()) or "none")
    results = [build(ctx.schema.AlterUserScramCredentialsResult, user=name,
                     error_code=ErrorCode.none, error_message=None)
               for name in [*deletions, *upserts]]
    results += [build(ctx.schema.AlterUserScramCredentialsResult, user=name, error_code=code,
                      error_message=message) for name, (code, message) in errors.items()]
    return build(ctx.response_type, throttle_time=ZERO, results=tuple(results))
