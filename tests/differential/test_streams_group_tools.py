"""``kafka-streams-groups.sh`` (KIP-1071) on txbroker and on Apache Kafka 4.4.0: a streams
group made by raw StreamsGroupHeartbeat requests (two members, one stateful
subtopology) is listed and described (offsets, members, state), refused a reset while
Stable, then, once its members left, reset, its offsets deleted and deleted. The same
lines on both brokers but the coordinator's address, the epochs and the ASSIGNOR cell
of a StreamsGroupDescribe v0 broker (docs/compatibility.md); on txbroker, ``txbroker
groups`` prints the same rows as Kafka's tool."""

from __future__ import annotations

from collections.abc import Iterator

import confluent_kafka as ck
import pytest
from kio.schema.errors import ErrorCode as E

from tests.differential.jvm import run_tools
from tests.integration.test_streams_groups_wire import heartbeat, settle, topology
from tests.integration.tools.test_streams_group_tools import commit_offset
from tests.integration.tools.test_tools import cli
from tests.integration.txn_util import unique
from tests.integration.wire_util import API_VERSIONS, api_versions_request

from .conftest import BROKER_PARAMS, COMMON_CONFIG, Broker, running_broker
from .test_streams_group_wire import ready

# The members stand still while Kafka's tool runs (a JVM start or two): the default
# session timeout (45 s) keeps them. Kafka 4.4 has streams.version 1 on a new cluster.
CONFIG = {
    "txbroker": {**COMMON_CONFIG, "txbroker.streams.version": "1"},
    "kafka": {**COMMON_CONFIG, "group.streams.initial.rebalance.delay.ms": "0"},
}


@pytest.fixture(scope="module", params=BROKER_PARAMS)
def streams_broker(request, tmp_path_factory) -> Iterator[Broker]:
    yield from running_broker(request.param, tmp_path_factory, CONFIG[request.param])


def stable_group(broker, group: str, topic: str) -> tuple[object, dict[str, int]]:
    """Members m1 and m2 of ``group`` (one subtopology reading ``topic``), Stable, both
    owning tasks; the connection they heartbeat on and their epochs."""
    client = broker.raw()
    # Kafka creates the changelog topic before the first assignment.
    epochs, _owned = settle(client, group, ["m1", "m2"],
                            topo=topology(source=topic, changelog=f"{group}-store-changelog"),
                            timeout=60)
    return client, epochs


def describe_version(broker) -> int:
    """The highest StreamsGroupDescribe version the broker serves."""
    client = broker.raw()
    try:
        keys = client.request(API_VERSIONS, 3, api_versions_request(3)).api_keys
        return max(k.max_version for k in keys if k.api_key == 89)
    finally:
        client.close()


def test_streams_group_tools(streams_broker, jvm_classes, tmp_path):
    b = streams_broker
    group = unique("stg")
    topic = b.topic("stg-in", 3)
    p = ck.Producer({"bootstrap.servers": b.bootstrap})
    for i in range(6):
        p.produce(topic, value=b"v%d" % i, partition=i % 3)
    assert p.flush(10) == 0
    del p
    ready(b, group)
    client, epochs = stable_group(b, group, topic)
    sg = ["kafka-streams-groups", "--bootstrap-server", b.bootstrap]
    changelog = f"{group}-store-changelog"
    try:
        commit_offset(client, group, "m1", epochs["m1"], topic, 0, 1)
        if not b.is_kafka:
            ours = [cli("groups", "--bootstrap-server", b.bootstrap, "describe", "--group",
                        group, *view).stdout.split("\n")
                    for view in (["--verbose"], ["--members", "--verbose"],
                                 ["--state", "--verbose"])]
        live = run_tools(jvm_classes, tmp_path / "live", [
            [*sg, "--list", "--state"],
            [*sg, "--describe", "--group", group],
            [*sg, "--describe", "--group", group, "--verbose"],
            [*sg, "--describe", "--group", group, "--members"],
            [*sg, "--describe", "--group", group, "--members", "--verbose"],
            [*sg, "--describe", "--group", group, "--state", "--verbose"],
            [*sg, "--describe", "--group", group, "--topology"],
            [*sg, "--delete", "--group", group, "--delete-all-internal-topics"],
            [*sg, "--reset-offsets", "--group", group, "--all-input-topics", "--to-latest",
             "--execute"],
        ])
        for m in ("m1", "m2"):
            assert heartbeat(client, group, m, -1).error_code == E.none
    finally:
        client.close()
    gone = run_tools(jvm_classes, tmp_path / "empty", [
        [*sg, "--describe", "--group", group],
        [*sg, "--describe", "--group", group, "--state"],
        [*sg, "--reset-offsets", "--group", group, "--all-input-topics", "--to-latest",
         "--dry-run"],
        [*sg, "--reset-offsets", "--group", group, "--input-topic", topic, "--to-earliest",
         "--execute"],
        [*sg, "--delete-offsets", "--group", group, "--input-topic", topic],
        # The changelog topic is deleted with the reset; so "all" finds it gone.
        [*sg, "--reset-offsets", "--group", group, "--all-input-topics", "--to-earliest",
         "--execute", "--delete-internal-topic", changelog],
        [*sg, "--delete", "--group", group, "--delete-all-internal-topics"],
        [*sg, "--list"],
    ])
    assert [r.exit for r in live + gone] == [0] * 6 + [1] + [0] * 10, live + gone
    assert changelog not in b.admin.list_topics(timeout=10).topics
    listed, offsets, verbose, members, members_verbose, state, topology_view, not_empty, \
        refused = live
    assert [group, "Stable"] in listed.table()
    expected_offsets = [[group, topic, "0", "1"], [group, topic, "1", "2"],
                        [group, topic, "2", "2"]]
    assert offsets.table()[0] == ["GROUP", "TOPIC", "PARTITION", "OFFSET-LAG"]
    assert sorted(offsets.table()[1:]) == expected_offsets
    assert verbose.table()[0] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET",
                                  "LEADER-EPOCH", "LOG-END-OFFSET", "OFFSET-LAG"]
    assert sorted(verbose.table()[1:]) == [[group, topic, "0", "1", "-", "2", "1"],
                                           [group, topic, "1", "-", "-", "2", "2"],
                                           [group, topic, "2", "-", "-", "2", "2"]]
    # The helpers' process ids are uuid5 of the member id; the sticky assignor gives the
    # second member to join two of the three tasks on both brokers.
    p1, p2 = "ca996425-384f-58b0-8c25-be950041619d", "7326e1dd-7466-5990-9afc-0954641523cb"
    assert members.table()[0] == ["GROUP", "MEMBER", "PROCESS", "CLIENT-ID", "ASSIGNMENTS"]
    assert sorted(members.table()[1:]) == [[group, "m1", p1, "raw", "ACTIVE:", "0:[1];"],
                                           [group, "m2", p2, "raw", "ACTIVE:", "0:[0,2];"]]
    # The epochs as the members saw them (the same on both brokers: a new group starts at
    # group and assignment epoch 1, as in Kafka 4.4).
    epoch = str(epochs["m1"])
    assert members_verbose.table()[0][:6] == [
        "GROUP", "TARGET-ASSIGNMENT-EPOCH", "TOPOLOGY-EPOCH", "MEMBER", "MEMBER-PROTOCOL",
        "MEMBER-EPOCH"]
    assert sorted(members_verbose.table()[1:]) == [
        [group, epoch, "1", "m1", "streams", epoch, p1, "raw", "ACTIVE:", "0:[1];",
         "TARGET-ACTIVE:", "0:[1];"],
        [group, epoch, "1", "m2", "streams", epoch, p2, "raw", "ACTIVE:", "0:[0,2];",
         "TARGET-ACTIVE:", "0:[0,2];"]]
    (header, row) = state.table()
    assert header == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNOR", "STATE", "GROUP-EPOCH",
                      "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"]
    # StreamsGroupDescribe v0 names no assignor (an empty cell); v1 does.
    assignor = ["sticky"] if describe_version(b) >= 1 else []
    assert b.is_kafka <= bool(assignor)
    assert [row[0], row[2], *row[3:]] == [group, "(1)", *assignor, "Stable", epoch, epoch, "2"]
    assert refused.lines()[0] == (f"Error: Assignments can only be reset if the group "
                                  f"'{group}' is inactive, but the current state is Stable.")
    # Neither broker has a topology description plugin.
    assert topology_view.lines() == [
        f"Error: No topology description is stored for streams group '{group}'."]
    assert not_empty.lines() == [
        "Error: Deletion of some streams groups failed:",
        f"* Group '{group}' could not be deleted due to: org.apache.kafka.common.errors."
        f"GroupNotEmptyException: Streams group '{group}' is not EMPTY."]

    if not b.is_kafka:
        # txbroker groups prints the rows Kafka's tool prints (it asks with
        # StreamsGroupDescribe v0: no assignor).
        for mine, theirs in zip(ours, (verbose, members_verbose, state), strict=True):
            assert sorted(line.split() for line in mine if line) == sorted(
                [cell for cell in row if cell != "sticky"] for row in theirs.table())

    empty_offsets, empty_state, dry_run, not_part, delete_offsets, reset, delete, after = gone
    assert empty_offsets.lines() == []
    assert empty_state.lines()[0] == f"Error: Streams group '{group}' has no active members."
    assert empty_state.table()[2][-2:] == ["Empty", "0"]
    assert dry_run.table()[1:] == [[group, topic, "0", "2"]]
    # No topology once the members left: a named topic is "not part of the group".
    assert not_part.lines()[0] == f"Error: One or more topics are not part of the group '{group}'."
    assert delete_offsets.lines()[0] == f"Request succeeded for deleting offsets from group {group}."
    assert delete_offsets.table()[2:] == [[topic, str(p), "Successful"] for p in range(3)]
    # (no offsets left to reset: an empty table)
    assert reset.table() == [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]]
    assert delete.lines() == [
        f"Failed to delete internal topic: {changelog}",
        f"Deletion of requested streams groups ('{group}') was successful.",
        "Deletion of some associated internal topics failed:",
        f"* Internal topics of the streams group '{group}' could not be deleted due to: "
        "org.apache.kafka.common.errors.UnknownTopicOrPartitionException: This server does "
        "not host this topic-partition."]
    assert group not in after.output.split()
