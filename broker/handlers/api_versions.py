"""ApiVersions (key 18): the version ranges this broker implements (KIP-511 fallback),
and (v3+) the features: ``transaction.version`` supported 0-2 and finalized at
``txbroker.transaction.version`` or the level UpdateFeatures set (broker/features.py),
which is how Java 4.x producers decide to use transactions v2 (KIP-890) and how
``kafka-features describe`` shows it. The share-group APIs are listed only while
``share.version`` is finalized at 1 or more (handlers.GATED), as Kafka lists them."""

from __future__ import annotations

import datetime
import logging
import re

from kio.schema.api_versions.v0 import response as v0
from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ..context import RequestContext
from ..features import SUPPORTED

API_KEY = 18
MIN_VERSION = 0
MAX_VERSION = 4

log = logging.getLogger(__name__)
_SOFTWARE = re.compile(r"^[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?$")
_ZERO = datetime.timedelta(0)


def _ranges(api_version_cls, levels) -> tuple:
    from . import advertised_versions

    return tuple(
        api_version_cls(api_key=k, min_version=lo, max_version=hi)
        for k, lo, hi in advertised_versions(levels)
    )


def unsupported_version_response():
    """The v0 answer to an ApiVersions request of a version we do not know: as in
    Kafka (KIP-511), it lists only ApiVersions' own range, for the client's retry."""
    return v0.ApiVersionsResponse(
        error_code=ErrorCode.unsupported_version,
        api_keys=(v0.ApiVersion(api_key=API_KEY, min_version=MIN_VERSION,
                                max_version=MAX_VERSION),))


async def handle(ctx: RequestContext, request):
    schema = ctx.schema
    error = ErrorCode.none
    if ctx.version >= 3:
        name = request.client_software_name
        version = request.client_software_version
        if not _SOFTWARE.match(name or "") or not _SOFTWARE.match(version or ""):
            error = ErrorCode.invalid_request
            log.info("ApiVersions v%d from %s has an invalid client software name/version "
                     "%r/%r: answering INVALID_REQUEST", ctx.version, ctx.peer, name, version)
    features = ctx.broker.features
    api_keys = _ranges(schema.ApiVersion, features.levels)
    if ctx.version < 3:
        return build(ctx.response_type, error_code=error, api_keys=api_keys,
                     throttle_time=_ZERO)
    # As Kafka: v3 leaves out supported features whose minimum is 0; a feature
    # finalized at level 0 is not listed (it is off).
    supported = tuple(build(schema.SupportedFeatureKey, name=name, min_version=lo,
                            max_version=hi)
                      for name, (lo, hi) in SUPPORTED.items() if ctx.version >= 4 or lo > 0)
    finalized = tuple(build(schema.FinalizedFeatureKey, name=name, min_version_level=level,
                            max_version_level=level)
                      for name, level in features.levels.items() if level > 0)
    return build(ctx.response_type, error_code=error, api_keys=api_keys,
                 throttle_time=_ZERO, supported_features=supported,
                 # Clients keep the finalized features of the highest epoch they saw:
                 # the broker's start time orders the levels of its incarnations.
                 finalized_features_epoch=features.epoch,
                 finalized_features=finalized, zk_migration_ready=False)
