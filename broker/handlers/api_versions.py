"""ApiVersions (key 18): the version ranges this broker implements (KIP-511 fallback),
and (v3+) the features: ``transaction.version`` supported 0-2 and finalized at
``txbroker.transaction.version``, which is how Java 4.x producers decide to use
transactions v2 (KIP-890) and how ``kafka-features describe`` shows it."""

from __future__ import annotations

import datetime
import logging
import re

from kio.schema.api_versions.v0 import response as v0
from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

API_KEY = 18
MIN_VERSION = 0
MAX_VERSION = 4

log = logging.getLogger(__name__)
_SOFTWARE = re.compile(r"^[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?$")
_ZERO = datetime.timedelta(0)
TRANSACTION_VERSION = "transaction.version"  # Kafka's feature name
TRANSACTION_VERSION_MAX = 2


def _ranges(api_version_cls) -> tuple:
    from . import supported_versions

    return tuple(
        api_version_cls(api_key=k, min_version=lo, max_version=hi)
        for k, lo, hi in supported_versions()
    )


def unsupported_version_response():
    """The v0 answer to an ApiVersions request of a version we do not know: as in
    Kafka (KIP-511), it lists only ApiVersions' own range, for the client's retry."""
    return v0.ApiVersionsResponse(
        error_code=ErrorCode.unsupported_version,
        api_keys=(v0.ApiVersion(api_key=API_KEY, min_version=MIN_VERSION,
                                max_version=MAX_VERSION),))


async def handle(ctx, request):
    schema = ctx.schema
    error = ErrorCode.none
    if ctx.version >= 3:
        name = request.client_software_name
        version = request.client_software_version
        if not _SOFTWARE.match(name or "") or not _SOFTWARE.match(version or ""):
            error = ErrorCode.invalid_request
            log.info("ApiVersions v%d from %s has an invalid client software name/version "
                     "%r/%r: answering INVALID_REQUEST", ctx.version, ctx.peer, name, version)
    if ctx.version < 3:
        return build(ctx.response_type, error_code=error, api_keys=_ranges(schema.ApiVersion),
                     throttle_time=_ZERO)
    level = ctx.broker.transaction_version
    # As Kafka: v3 leaves out supported features whose minimum is 0; a feature
    # finalized at level 0 is not listed (it is off).
    supported = () if ctx.version < 4 else (build(
        schema.SupportedFeatureKey, name=TRANSACTION_VERSION, min_version=0,
        max_version=TRANSACTION_VERSION_MAX),)
    finalized = () if level == 0 else (build(
        schema.FinalizedFeatureKey, name=TRANSACTION_VERSION, min_version_level=level,
        max_version_level=level),)
    return build(ctx.response_type, error_code=error, api_keys=_ranges(schema.ApiVersion),
                 throttle_time=_ZERO, supported_features=supported,
                 # Clients keep the finalized features of the highest epoch they saw:
                 # the broker's start time orders the levels of its incarnations.
                 finalized_features_epoch=ctx.broker.features_epoch,
                 finalized_features=finalized, zk_migration_ready=False)
