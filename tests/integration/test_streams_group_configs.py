"""A streams group's own streams.* group configs (KIP-1071): set with confluent-kafka's
AdminClient as Kafka 4.4 takes and checks them, and applied by the streams coordinator to
that group only: the heartbeat interval its members are told and the standby tasks its
assignment holds (raw StreamsGroupHeartbeat, as tests/integration/test_streams_groups_wire.py)."""

from __future__ import annotations

import dataclasses
import time

import pytest
from kio.schema.errors import ErrorCode as E
from txbroker.protocol.messages import request_module

from tests.integration.test_streams_groups_wire import (
    ENABLED,
    active,
    describe,
    heartbeat,
    heartbeat_request,
)
from tests.integration.wire_util import API_VERSIONS, api_versions_request, connect

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)


@pytest.fixture
def txbroker_config():
    return dict(ENABLED)


def alter(bootstrap: str, group: str, **configs: str) -> None:
    """IncrementalAlterConfigs SET of ``configs`` (dots written as underscores); raises
    the client's KafkaException if the broker refuses them."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(name.replace("_", "."), value, incremental_operation=AlterConfigOpType.SET)
        for name, value in configs.items()])
    admin.incremental_alter_configs([res])[res].result(15)


def refused(bootstrap: str, group: str, **configs: str) -> str:
    with pytest.raises(ck.KafkaException) as e:
        alter(bootstrap, group, **configs)
    assert e.value.args[0].code() == ck.KafkaError.INVALID_CONFIG
    return str(e.value)


def standby(response) -> set[tuple[str, int]]:
    return {(t.subtopology_id, p) for t in response.standby_tasks or () for p in t.partitions}


def test_streams_group_configs_checked_as_kafka(txbroker):
    bootstrap = txbroker.bootstrap
    assert "streams.num.standby.replicas must be less than or equal to 2" in refused(
        bootstrap, "app", streams_num_standby_replicas="3")
    assert "streams.heartbeat.interval.ms must be in the range 5000 to 15000 inclusive." in \
        refused(bootstrap, "app", streams_heartbeat_interval_ms="100")
    assert "streams.task.offset.interval.ms must be greater than or equal to 15000" in \
        refused(bootstrap, "app", streams_task_offset_interval_ms="1000")
    assert ("streams.assignor.name 'range' is not a registered task assignor. Registered "
            "assignors are: [sticky].") in refused(bootstrap, "app", streams_assignor_name="range")
    assert "streams.rack.aware.assignment.tags must not contain duplicate tag keys." in refused(
        bootstrap, "app", streams_rack_aware_assignment_tags="zone, rack,zone")
    alter(bootstrap, "app", streams_initial_rebalance_delay_ms="0",
          streams_rack_aware_assignment_tags="zone")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(ResourceType.GROUP, "app")
    configs = admin.describe_configs([res])[res].result(15)
    assert (configs["streams.initial.rebalance.delay.ms"].value,
            configs["streams.initial.rebalance.delay.ms"].source) == (
        "0", ConfigSource.GROUP_CONFIG.value)
    assert (configs["streams.num.standby.replicas"].value,
            configs["streams.num.standby.replicas"].source) == (
        "0", ConfigSource.DEFAULT_CONFIG.value)


def test_a_groups_heartbeat_interval_and_standby_replicas_take_effect(txbroker):
    """Two members of a group with streams.num.standby.replicas=1 each get the other's
    active tasks as standby tasks, and are told the group's heartbeat interval; a group
    without configs gets the broker's and no standby tasks."""
    txbroker.create_topic("input", 2)
    alter(txbroker.bootstrap, "app", streams_num_standby_replicas="1",
          streams_heartbeat_interval_ms="7000")
    client = connect(txbroker)
    try:
        r = heartbeat(client, "other", "o1", 0)
        assert (r.error_code, r.heartbeat_interval.total_seconds()) == (0, 5.0), r
        members = ["m1", "m2"]
        epochs, owned, standbys, interval = {}, {}, {}, {}
        for m in members:
            r = heartbeat(client, "app", m, 0)
            assert r.error_code == 0, r.error_message
            epochs[m], owned[m], standbys[m] = r.member_epoch, active(r), standby(r)
            interval[m] = r.heartbeat_interval.total_seconds()
        deadline = time.monotonic() + 20  # the changelog topic is created in the background
        while time.monotonic() < deadline:
            for m in members:
                r = heartbeat(client, "app", m, epochs[m], owned=owned[m])
                assert r.error_code == 0, r.error_message
                epochs[m] = r.member_epoch
                if r.active_tasks is not None:
                    owned[m], standbys[m] = active(r), standby(r)
            if (describe(client, "app")[0].group_state == "Stable"
                    and all(owned.values()) and all(standbys.values())):
                break
            time.sleep(0.02)
        assert interval == {"m1": 7.0, "m2": 7.0}
        assert owned["m1"] | owned["m2"] == {("0", 0), ("0", 1)}, owned
        assert standbys == {"m1": owned["m2"], "m2": owned["m1"]}, (owned, standbys)
    finally:
        client.close()


HB1, DESCRIBE1 = request_module(88, 1), request_module(89, 1)
MISSING_CLIENT_TAGS = 6


def as_v1(request, **changes):
    """A v0 StreamsGroupHeartbeatRequest as v1 (the same fields), with ``changes``."""
    values = {f.name: getattr(request, f.name) for f in dataclasses.fields(request)}
    return HB1.StreamsGroupHeartbeatRequest(**{**values, **changes})


def test_v1_tells_the_groups_recovery_lag_and_missing_client_tags(txbroker):
    """v1 (Kafka 4.4): AcceptableRecoveryLag is the group's streams.acceptable.recovery.lag,
    a member without a tag of streams.rack.aware.assignment.tags gets MISSING_CLIENT_TAGS
    (never at v0), and describe v1 names the assignor and, asked for the topology
    description, says it is not stored (no description plugin)."""
    txbroker.create_topic("input", 1)
    alter(txbroker.bootstrap, "app", streams_acceptable_recovery_lag="20000000000",
          streams_rack_aware_assignment_tags="zone, rack")
    client = connect(txbroker)
    try:
        versions = {k.api_key: (k.min_version, k.max_version) for k in client.request(
            API_VERSIONS, 3, api_versions_request(3)).api_keys}
        assert (versions[88], versions[89]) == ((0, 1), (0, 1))
        v0 = heartbeat(client, "app", "m0", 0)
        assert v0.error_code == 0 and MISSING_CLIENT_TAGS not in {s.status_code for s in v0.status}
        request = heartbeat_request("app", "m1", 0)
        request = as_v1(request, client_tags=(HB1.KeyValue(key="rack", value="r1"),))
        r = client.request(88, 1, request)
        assert (r.error_code, r.acceptable_recovery_lag, r.topology_description_required) == (
            0, 20_000_000_000, False), r
        assert [(s.status_code, s.status_detail) for s in r.status
                if s.status_code == MISSING_CLIENT_TAGS] == [(MISSING_CLIENT_TAGS, (
                    "Missing required client tags for rack-aware standby assignment: [zone]. "
                    "Configure them via 'client.tag.<tagKey>' in your Streams config."))]
        r = client.request(88, 1, as_v1(request, member_id="x", member_epoch=5, topology=None))
        assert (r.error_code, r.acceptable_recovery_lag) == (E.unknown_member_id, -1), r
        for include, status in ((True, 1), (False, 0)):
            (g, unknown) = client.request(89, 1, DESCRIBE1.StreamsGroupDescribeRequest(
                group_ids=("app", "nope"), include_authorized_operations=False,
                include_topology_description=include)).groups
            assert (g.error_code, g.assignor_name, g.topology_description_status,
                    g.topology_description) == (0, "sticky", status, None)
            assert (unknown.error_code, unknown.assignor_name,
                    unknown.topology_description_status) == (E.group_id_not_found, None, 0)
    finally:
        client.close()
