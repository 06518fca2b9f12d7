"""share.version gates the share-group APIs (KIP-932): advertised only at level 1."""

from __future__ import annotations

from txbroker.broker.features import SHARE_VERSION, SUPPORTED, FinalizedFeatures
from txbroker.broker.handlers import GATED, advertised_versions, supported_versions

SHARE_APIS = {76, 77, 78, 79, 90, 91, 92}


def test_share_apis_advertised_only_at_share_version_1(tmp_path):
    assert SUPPORTED[SHARE_VERSION] == (0, 2)  # Kafka 4.4: level 2 adds the DLQ
    assert {k for k, (feature, _) in GATED.items() if feature == SHARE_VERSION} == SHARE_APIS
    off = FinalizedFeatures(str(tmp_path), 2)
    assert off.level(SHARE_VERSION) == 0 and SHARE_VERSION not in off.levels
    assert not SHARE_APIS & {k for k, _, _ in advertised_versions(off.levels)}
    on = FinalizedFeatures(str(tmp_path), 2, share_version=1)
    assert {k for k, _, _ in advertised_versions(on.levels)} == \
        {k for k, _, _ in supported_versions()} - {88, 89}  # streams.version is still 0
    assert (78, 1, 2) in advertised_versions(on.levels)
    assert (90, 0, 1) in advertised_versions(on.levels)
    # UpdateFeatures turns it on and off again; the stored level wins after a restart.
    off.finalize({SHARE_VERSION: 1})
    assert FinalizedFeatures(str(tmp_path), 2).level(SHARE_VERSION) == 1
    off.finalize({SHARE_VERSION: 0})
    assert FinalizedFeatures(str(tmp_path), 2, share_version=1).level(SHARE_VERSION) == 0
