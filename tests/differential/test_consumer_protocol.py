"""KIP-848 consumer-protocol groups, txbroker vs Kafka 4.3.1: the versions served,
the ``group.version`` feature, and what a confluent-kafka consumer with
``group.protocol=consumer`` sees."""

from __future__ import annotations

import pytest
from txbroker.protocol.messages import build, request_module

API_VERSIONS = 18


def _api_versions(broker):
    m = request_module(API_VERSIONS, 3)
    client = broker.raw()
    try:
        return client.request(API_VERSIONS, 3, build(m.ApiVersionsRequest,
                                                     client_software_name="t",
                                                     client_software_version="1"))
    finally:
        client.close()


@pytest.mark.kafka_ci
def test_versions_and_group_version_feature(broker):
    """ConsumerGroupHeartbeat 0-1 and ConsumerGroupDescribe 0-1 are served, and
    ``group.version`` is supported 0-1 and finalized at 1, as on Kafka 4.3.1."""
    r = _api_versions(broker)
    ranges = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in r.api_keys}
    supported = {f.name: (int(f.min_version), int(f.max_version)) for f in r.supported_features}
    finalized = {f.name: (int(f.min_version_level), int(f.max_version_level))
                 for f in r.finalized_features}
    print("FACTS", {k: ranges.get(k) for k in (8, 9, 15, 16, 28, 68, 69)}, supported, finalized)
    assert ranges[68] == (0, 1)
    assert ranges[69] == (0, 1)
    assert supported["group.version"] == (0, 1)
    assert finalized["group.version"] == (1, 1)
