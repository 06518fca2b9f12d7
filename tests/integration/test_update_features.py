"""UpdateFeatures (key 57) on the raw wire against an in-process broker: Kafka's
validation and error codes in v0-2, validate_only, ApiVersions showing the new level
with a larger epoch, the level stored in the data directory winning over
``txbroker.transaction.version`` after a restart, and CLUSTER ALTER. The same
commands through Kafka's own tool are compared with Kafka 4.3.1 in
tests/differential/test_transactions_v2.py."""

from __future__ import annotations

import json

import pytest
from confluent_kafka.admin import AclOperation, ResourceType
from txbroker.broker.features import FEATURES_FILE
from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build, request_module
from txbroker.testing import BrokerThread

from tests.helpers import RawClient

from .security.test_acls import LISTENER, allow, create_acls, secured  # noqa: F401 (fixture)
from .wire_util import api_versions_request, connect

UPDATE_FEATURES, API_VERSIONS = 57, 18
TV = "transaction.version"
UPGRADE, SAFE, UNSAFE = 1, 2, 3
INVALID_UPDATE_VERSION = ErrorCode.invalid_update_version.value
PREFIX = "The update failed for all features since the following feature had an error: "


def update(client: RawClient, updates: list[tuple[str, int, int]], *, version: int = 2,
           validate_only: bool = False):
    m = request_module(UPDATE_FEATURES, version)
    keys = tuple(build(m.FeatureUpdateKey, feature=name, max_version_level=level,
                       **({"allow_downgrade": kind != UPGRADE} if version == 0
                          else {"upgrade_type": kind}))
                 for name, level, kind in updates)
    extra = {"validate_only": validate_only} if version >= 1 else {}
    return client.request(UPDATE_FEATURES, version,
                          build(m.UpdateFeaturesRequest, feature_updates=keys, **extra))


def finalized(client: RawClient) -> tuple[dict[str, int], int]:
    """The finalized levels but group.version (always 1 here, as on Kafka 4.3.1),
    share.version (2 by default) and streams.version (1 by default, both as on a new
    Kafka 4.4 cluster; these tests change transaction.version)."""
    r = client.request(API_VERSIONS, 4, api_versions_request(4))
    levels = {f.name: f.max_version_level for f in r.finalized_features}
    assert levels.pop("group.version") == 1
    assert levels.pop("share.version") == 2
    assert levels.pop("streams.version") == 1
    return levels, r.finalized_features_epoch


def test_upgrade_downgrade_dry_run_and_errors(txbroker):
    client = connect(txbroker)
    levels, epoch = finalized(client)
    assert levels == {TV: 2}
    # A dry run checks and changes nothing.
    r = update(client, [(TV, 1, SAFE)], validate_only=True)
    assert (r.error_code, r.error_message) == (0, None)
    assert finalized(client) == (levels, epoch)
    r = update(client, [(TV, 1, SAFE)])
    assert (r.error_code, r.error_message) == (0, None)
    levels, later = finalized(client)
    assert levels == {TV: 1} and later > epoch  # clients keep the highest epoch's levels
    # The same level again is fine; disabling (level 0) takes it out of the list.
    assert update(client, [(TV, 1, UPGRADE)]).error_code == 0
    assert update(client, [(TV, 0, UNSAFE)]).error_code == 0
    assert finalized(client)[0] == {}
    assert update(client, [(TV, 2, UPGRADE)]).error_code == 0
    refused = {
        (TV, 1, UPGRADE): "Can't downgrade the version of this feature without setting the "
                          "upgrade type to either safe or unsafe downgrade.",
        (TV, 2, 0): "The controller does not support the given upgrade type.",
        (TV, 2, 4): "The controller does not support the given upgrade type.",
        (TV, 3, UPGRADE): "Local controller 1 only supports versions 0-2",
        (TV, 3, SAFE): "Local controller 1 only supports versions 0-2",
        (TV, -1, SAFE): "A feature version cannot be less than 0.",
        ("eligible.leader.replicas.version", 1, UPGRADE):
            "Local controller 1 does not support this feature.",
        ("nosuch", 0, SAFE): "Feature nosuch not found.",  # `kafka-features disable`
    }
    for (name, level, kind), reason in refused.items():
        r = update(client, [(name, level, kind)])
        assert (r.error_code, r.error_message) == (
            INVALID_UPDATE_VERSION,
            f"{PREFIX}Invalid update version {level} for feature {name}. {reason}"), r
    # A failing update fails the whole request: nothing else in it is applied. With
    # several bad ones, the first in the order of Kafka's HashMap of them is reported
    # (Kafka 4.3.1 answers these two requests the same).
    r = update(client, [(TV, 1, SAFE), ("metadata.version", 27, UPGRADE)])
    assert r.error_code == INVALID_UPDATE_VERSION and "feature metadata.version" in r.error_message
    assert finalized(client)[0] == {TV: 2}
    r = update(client, [("nosuch", 1, UPGRADE), (TV, 5, UPGRADE)])
    assert r.error_message == (f"{PREFIX}Invalid update version 5 for feature {TV}. "
                               "Local controller 1 only supports versions 0-2")
    # One update per feature: the last of a name wins (as in Kafka's map of them).
    assert update(client, [(TV, 1, UPGRADE), (TV, 1, SAFE)]).error_code == 0
    assert finalized(client)[0] == {TV: 1}
    assert update(client, [(TV, 2, UPGRADE)]).error_code == 0
    # Nothing to update is no error.
    assert update(client, []).error_code == 0


@pytest.mark.parametrize("version", [0, 1])
def test_v0_and_v1_answer_per_feature(txbroker, version):
    client = connect(txbroker)
    r = update(client, [(TV, 2, UPGRADE)], version=version)
    assert r.error_code == 0
    assert [(x.feature, x.error_code, x.error_message) for x in r.results] == [(TV, 0, "NONE")]
    # v0's allow_downgrade is not an upgrade type: Kafka 4's controller treats every
    # v0 update as an upgrade, so a v0 downgrade is refused.
    r = update(client, [(TV, 1, SAFE)], version=version)
    if version == 0:
        assert (r.error_code, list(r.results)) == (INVALID_UPDATE_VERSION, [])
    else:
        assert r.error_code == 0 and [x.feature for x in r.results] == [TV]
        assert finalized(client)[0] == {TV: 1}


def test_finalized_level_survives_restart_and_wins_over_the_config_key(tmp_path):
    data = str(tmp_path / "data")
    with BrokerThread(data, {"txbroker.transaction.version": "2"}) as broker:
        client = connect(broker)
        assert update(client, [(TV, 1, SAFE)]).error_code == 0
        client.close()
    assert json.loads((tmp_path / "data" / FEATURES_FILE).read_text())["levels"] == {
        TV: 1, "group.version": 1, "share.version": 2, "streams.version": 1}
    # The config key is the level of a new data directory only (Kafka's `kafka-storage
    # format --feature`): the level UpdateFeatures stored wins.
    with BrokerThread(data, {"txbroker.transaction.version": "2"}) as broker:
        assert finalized(connect(broker))[0] == {TV: 1}
    with BrokerThread(str(tmp_path / "fresh"), {"txbroker.transaction.version": "1"}) as broker:
        assert finalized(connect(broker))[0] == {TV: 1}


def test_needs_cluster_alter(secured):  # noqa: F811 (fixture)
    """Kafka checks ALTER on the cluster (ControllerApis.handleUpdateFeatures)."""
    alice = RawClient.as_user(secured, LISTENER, "alice")
    r = update(alice, [(TV, 1, SAFE)])
    assert (r.error_code, r.error_message) == (
        ErrorCode.cluster_authorization_failed.value, "Cluster authorization failed.")
    assert finalized(alice)[0] == {TV: 2}
    create_acls(secured, allow("kafka-cluster", AclOperation.ALTER, rtype=ResourceType.BROKER))
    assert update(alice, [(TV, 1, SAFE)]).error_code == 0
    assert finalized(alice)[0] == {TV: 1}
