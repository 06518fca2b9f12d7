"""UpdateFeatures (key 57, v0-2): change a finalized feature level, as
``kafka-features upgrade/downgrade/disable`` and Admin.updateFeatures do.

Kafka's rules (its controller's FeatureControlManager), checked per update; the first
failure fails the whole request with INVALID_UPDATE_VERSION and
nothing changes (the updates are checked in the order of the controller's HashMap of
them, one per feature name, the last one of a name winning):
- the upgrade type must be 1 (upgrade), 2 (safe downgrade) or 3 (unsafe downgrade);
  v0 has no upgrade type (its allow_downgrade flag is not read by Kafka 4's
  controller either): every v0 update is an upgrade;
- the level must be at least 0 and supported (txbroker knows transaction.version,
  0-2, share.version, 0-2, and streams.version, 0-1; an unknown feature "does not
  support this feature", or at level 0 is "not found");
- a lower level than the finalized one needs a downgrade type, a higher one the
  upgrade type.
CLUSTER ALTER is required (CLUSTER_AUTHORIZATION_FAILED). validate_only (v1+,
``--dry-run``) checks and changes nothing. The new levels are written durably to the
data directory before the answer (broker/features.py); from then on they win over
``txbroker.transaction.version``. The transaction version of a transaction is fixed
when it starts (by its client's request versions), so transactions in flight complete
as they began; new producers see the new level in ApiVersions.
v0-1 answer per feature on success; v2 only the top-level error.
"""

from __future__ import annotations

import datetime
import logging

from txbroker.protocol.acls import AclOperation
from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ..context import RequestContext
from ..features import SUPPORTED

API_KEY = 57
MIN_VERSION = 0
MAX_VERSION = 2

log = logging.getLogger(__name__)
_ZERO = datetime.timedelta(0)
UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3


def _check(feature: str, level: int, upgrade_type: int, current: int, node_id: int) -> str | None:
    """Kafka's reason to refuse one update, or None."""
    if upgrade_type not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
        return "The controller does not support the given upgrade type."
    if level < 0:
        return "A feature version cannot be less than 0."
    lo, hi = SUPPORTED.get(feature, (0, 0))
    if not lo <= level <= hi:
        if hi == 0:
            return f"Local controller {node_id} does not support this feature."
        return f"Local controller {node_id} only supports versions {lo}-{hi}"
    if level < current and upgrade_type == UPGRADE:
        return ("Can't downgrade the version of this feature without setting the upgrade "
                "type to either safe or unsafe downgrade.")
    if level > current and upgrade_type != UPGRADE:
        return "Can't downgrade to a newer version."
    if feature not in SUPPORTED:  # level 0 of an unknown feature gets this far
        return f"Feature {feature} not found."
    return None


def _java_hash_map_order(names: list[str]) -> list[str]:
    """The order a java.util.HashMap of these keys iterates them in (Kafka's controller
    checks the updates in that order, so it decides which error a request with
    several bad updates gets): by bucket of String.hashCode spread, then insertion."""
    capacity = 16
    while len(names) > capacity * 3 // 4:
        capacity *= 2

    def bucket(name: str) -> int:
        units = name.encode("utf-16-be")  # Java hashes UTF-16 code units
        h = 0
        for i in range(0, len(units), 2):
            h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (capacity - 1)

    return sorted(names, key=bucket)  # stable: insertion order within a bucket


def _answer(ctx, error: ErrorCode, message: str | None, features: tuple[str, ...] = ()):
    fields = {}
    if ctx.version <= 1:
        # Kafka's per-feature message on success is the error's name, "NONE".
        fields["results"] = tuple(build(ctx.schema.UpdatableFeatureResult, feature=name,
                                        error_code=ErrorCode.none, error_message="NONE")
                                  for name in features)
    return build(ctx.response_type, throttle_time=_ZERO, error_code=error,
                 error_message=message, **fields)


async def handle(ctx: RequestContext, request):
    broker = ctx.broker
    if not ctx.authorize_cluster(AclOperation.ALTER):
        return _answer(ctx, ErrorCode.cluster_authorization_failed,
                       "Cluster authorization failed.")
    # As Kafka's controller: one update per feature (the last of a name wins).
    wanted: dict[str, tuple[int, int]] = {
        u.feature: (int(u.max_version_level), UPGRADE if ctx.version == 0 else int(u.upgrade_type))
        for u in request.feature_updates}
    updates: dict[str, int] = {}
    for name in _java_hash_map_order(list(wanted)):
        level, upgrade_type = wanted[name]
        reason = _check(name, level, upgrade_type, broker.features.level(name), broker.node_id)
        if reason is not None:
            message = f"Invalid update version {level} for feature {name}. {reason}"
            log.warning("UpdateFeatures from %s refused: %.300s", ctx.peer, message)
            return _answer(ctx, ErrorCode.invalid_update_version,
                           "The update failed for all features since the following feature "
                           f"had an error: {message}")
        updates[name] = level
    if updates and not (ctx.version >= 1 and request.validate_only):
        try:
            broker.features.finalize(updates)
        except OSError as e:
            log.error("UpdateFeatures from %s failed: cannot store the finalized features: "
                      "%r", ctx.peer, e)
            return _answer(ctx, ErrorCode.unknown_server_error,
                           f"cannot store the finalized features: {e}")
    return _answer(ctx, ErrorCode.none, None, tuple(u.feature for u in request.feature_updates))
