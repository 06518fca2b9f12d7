"""DescribeUserScramCredentials (key 50, KIP-554): each user's SCRAM mechanisms and
iterations (never salts or keys). Errors per user as Kafka's ScramImage.describe:
RESOURCE_NOT_FOUND for a user without credentials, DUPLICATE_RESOURCE for a user named
twice; no users (or null) lists every user."""

from __future__ import annotations

from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ..context import RequestContext
from ..security.scram_credentials import MECHANISM_NUMBERS
from ._acls import scram_credentials_error
from ._groups import ZERO

API_KEY = 50
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request):
    schema = ctx.schema
    denied = scram_credentials_error(ctx, alter=False)
    if denied is not None:  # DESCRIBE on the cluster, checked before anything is looked up
        return build(ctx.response_type, throttle_time=ZERO, error_code=denied,
                     error_message=None, results=())
    known = ctx.broker.scram_credentials.users()
    if request.users:
        counts: dict[str, int] = {}
        for user in request.users:
            counts[user.name] = counts.get(user.name, 0) + 1
    else:
        counts = dict.fromkeys(sorted(known), 1)
    results = []
    for name, count in counts.items():
        if count > 1:
            results.append(build(schema.DescribeUserScramCredentialsResult, user=name,
                                 error_code=ErrorCode.duplicate_resource,
                                 error_message="Cannot describe SCRAM credentials for the same "
                                               f"user twice in a single request: {name}",
                                 credential_infos=()))
        elif name not in known:
            results.append(build(schema.DescribeUserScramCredentialsResult, user=name,
                                 error_code=ErrorCode.resource_not_found,
                                 error_message="Attempt to describe a user credential that does "
                                               f"not exist: {name}",
                                 credential_infos=()))
        else:
            infos = tuple(build(schema.CredentialInfo, mechanism=MECHANISM_NUMBERS[mech],
                                iterations=iterations)
                          for mech, iterations in sorted(known[name].items()))
            results.append(build(schema.DescribeUserScramCredentialsResult, user=name,
                                 error_code=ErrorCode.none, error_message=None,
                                 credential_infos=infos))
    return build(ctx.response_type, throttle_time=ZERO, error_code=ErrorCode.none,
                 error_message=None, results=tuple(results))
