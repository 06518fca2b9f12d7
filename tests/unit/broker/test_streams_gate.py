"""streams.version (KIP-1071): Kafka 4.4's levels 0-1, 1 by default as on a new Kafka 4.4
cluster; 0 (configured or downgraded) turns streams groups off."""

from __future__ import annotations

from txbroker.broker.config import BrokerConfig
from txbroker.broker.features import STREAMS_VERSION, SUPPORTED, FinalizedFeatures


def test_streams_version_levels_and_updates(tmp_path):
    assert SUPPORTED[STREAMS_VERSION] == (0, 1)
    off = FinalizedFeatures(str(tmp_path), 2)
    assert off.level(STREAMS_VERSION) == 0 and STREAMS_VERSION not in off.levels
    on = FinalizedFeatures(str(tmp_path), 2, streams_version=1)
    assert on.level(STREAMS_VERSION) == 1
    # UpdateFeatures turns it on and off again; the stored level wins after a restart.
    off.finalize({STREAMS_VERSION: 1})
    assert FinalizedFeatures(str(tmp_path), 2).level(STREAMS_VERSION) == 1
    off.finalize({STREAMS_VERSION: 0})
    assert FinalizedFeatures(str(tmp_path), 2, streams_version=1).level(STREAMS_VERSION) == 0


def test_streams_broker_keys_have_kafka_defaults():
    config = BrokerConfig({})
    assert config.get("txbroker.streams.version") == 1
    assert config.get("group.streams.session.timeout.ms") == 45000
    assert config.get("group.streams.heartbeat.interval.ms") == 5000
    assert config.get("group.streams.num.standby.replicas") == 0
    assert config.get("group.streams.max.size") == 2**31 - 1
    assert config.get("group.streams.task.offset.interval.ms") == 60000
    assert config.get("group.streams.initial.rebalance.delay.ms") == 3000
    assert config.get("group.streams.assignment.interval.ms") == 1000


def test_streams_apis_advertised_only_at_streams_version_1(tmp_path):
    from txbroker.broker.handlers import GATED, advertised_versions

    streams_apis = {88, 89}
    assert {k for k, (feature, _) in GATED.items() if feature == STREAMS_VERSION} == streams_apis
    off = FinalizedFeatures(str(tmp_path), 2)
    assert not streams_apis & {k for k, _, _ in advertised_versions(off.levels)}
    on = FinalizedFeatures(str(tmp_path), 2, streams_version=1)
    assert {(88, 0, 1), (89, 0, 1)} <= set(advertised_versions(on.levels))
