"""``txbroker groups`` on streams groups (KIP-1071) against an in-process broker, the
group made by raw StreamsGroupHeartbeat requests: listed with its type, described as
kafka-streams-groups.sh describes it (lag per partition of the active tasks, members
with their tasks, state), reset only once inactive, its offsets deleted and the group
deleted."""

from __future__ import annotations

import confluent_kafka as ck
import pytest
from kio.schema.errors import ErrorCode as E
from txbroker.protocol.messages import build, request_module

from ..clients import unique_topic
from ..test_streams_groups_wire import ENABLED, heartbeat, settle, topology
from ..wire_util import connect
from .test_share_group_tools import groups
from .test_tools import table_rows


@pytest.fixture
def txbroker_config() -> dict[str, str]:
    return dict(ENABLED)


def commit_offset(client, group: str, member: str, epoch: int, topic: str, partition: int,
                  offset: int) -> None:
    """OffsetCommit as a streams member commits (its member id and epoch)."""
    cm = request_module(8, 9)
    r = client.request(8, 9, build(
        cm.OffsetCommitRequest, group_id=group, generation_id_or_member_epoch=epoch,
        member_id=member, group_instance_id=None, topics=(build(
            cm.OffsetCommitRequestTopic, name=topic, partitions=(build(
                cm.OffsetCommitRequestPartition, partition_index=partition,
                committed_offset=offset, committed_leader_epoch=-1,
                committed_metadata=None),)),)))
    assert r.topics[0].partitions[0].error_code == E.none


def streams_group(txbroker, topic: str, group: str) -> tuple[object, dict[str, int]]:
    """Two members of ``group`` reading ``topic`` (the helpers' topology's "input": 3 partitions, 2 records each), Stable;
    m1 committed offset 1 of partition 0. Returns the connection and the epochs."""
    txbroker.create_topic(topic, 3)
    p = ck.Producer({"bootstrap.servers": txbroker.bootstrap})
    for i in range(6):
        p.produce(topic, value=b"v%d" % i, partition=i % 3)
    assert p.flush(10) == 0
    client = connect(txbroker)
    epochs, _owned = settle(client, group, ["m1", "m2"], topo=topology(
        source=topic, changelog=f"{group}-store-changelog"))
    commit_offset(client, group, "m1", epochs["m1"], topic, 0, 1)
    return client, epochs


def test_streams_group_list_describe_reset_delete_offsets_and_delete(txbroker):
    b = txbroker.bootstrap
    topic, group = "input", unique_topic("tools-stg")
    client, epochs = streams_group(txbroker, topic, group)
    try:
        assert table_rows(groups(b, "list", "--type", "streams", "--state").stdout) == [
            [group, "Streams", "Stable"]]
        assert group not in groups(b, "list", "--type", "classic", "consumer").stdout.split()

        r = groups(b, "describe", "--group", group)
        assert r.stdout.splitlines()[0].split() == ["GROUP", "TOPIC", "PARTITION", "OFFSET-LAG"]
        assert table_rows(r.stdout) == [[group, topic, "0", "1"], [group, topic, "1", "2"],
                                        [group, topic, "2", "2"]]
        r = groups(b, "describe", "--group", group, "--verbose")
        assert table_rows(r.stdout)[:2] == [[group, topic, "0", "1", "-", "2", "1"],
                                            [group, topic, "1", "-", "-", "2", "2"]]

        r = groups(b, "describe", "--group", group, "--members")
        assert r.stdout.splitlines()[0].split() == ["GROUP", "MEMBER", "PROCESS", "CLIENT-ID",
                                                    "ASSIGNMENTS"]
        rows = {row[1]: row for row in table_rows(r.stdout)}
        assert sorted(rows) == ["m1", "m2"]
        tasks = [t for row in rows.values() for t in "".join(row[4:]).split(";") if t]
        # Each member: "ACTIVE: 0:[...]" with the three tasks split between them.
        assert sorted(tasks) == sorted(["ACTIVE:0:[1]", "ACTIVE:0:[0,2]"]) or sorted(
            tasks) == sorted(["ACTIVE:0:[0]", "ACTIVE:0:[1,2]"]), tasks
        r = groups(b, "describe", "--group", group, "--members", "--verbose")
        row = table_rows(r.stdout)[0]
        assert row[:3] == [group, str(epochs["m1"]), "1"] and row[4] == "streams"
        assert "TARGET-ACTIVE:" in row

        r = groups(b, "describe", "--group", group, "--state", "--verbose")
        [row] = table_rows(r.stdout)
        assert [row[0], *row[-4:]] == [group, "Stable", str(epochs["m1"]), str(epochs["m1"]),
                                       "2"]

        # --all-groups finds it by ListGroups and describes it as a streams group too.
        r = groups(b, "describe", "--all-groups", "--state")
        assert [group, "Stable", "2"] in [[row[0], *row[-2:]] for row in table_rows(r.stdout)]

        r = groups(b, "reset-offsets", "--group", group, "--all-input-topics", "--to-latest",
                   "--execute", ok=False)
        assert r.returncode == 1
        assert "inactive, but the current state is Stable" in r.stderr
        # No topology description plugin: Kafka's tool's error, exit 1.
        r = groups(b, "describe", "--group", group, "--topology", ok=False)
        assert (r.returncode, r.stdout, r.stderr.strip()) == (
            1, "", f"Error: No topology description is stored for streams group '{group}'.")
        for m in ("m1", "m2"):
            assert heartbeat(client, group, m, -1).error_code == E.none
    finally:
        client.close()

    assert groups(b, "describe", "--group", group, "--members").stdout == ""
    r = groups(b, "describe", "--group", group, "--state")
    assert r.stderr.strip() == f"Error: Streams group '{group}' has no active members."
    assert [table_rows(r.stdout)[0][0], *table_rows(r.stdout)[0][-2:]] == [group, "Empty", "0"]
    # The reset is done, then the named topic (there is none) is deleted.
    r = groups(b, "reset-offsets", "--group", group, "--all-input-topics", "--to-latest",
               "--execute", "--delete-internal-topic", f"{group}-nope-changelog", ok=False)
    assert table_rows(r.stdout) == [[group, topic, "0", "2"]]
    assert (r.returncode, r.stderr.strip()) == (1, (
        f"Error: Deleting internal topics for group '{group}' failed because the topics do "
        "not exist."))
    r = groups(b, "delete-offsets", "--group", group, "--input-topic", topic)
    assert r.stdout.splitlines()[0] == f"Request succeeded for deleting offsets from group {group}."
    assert table_rows(r.stdout[r.stdout.index("\n") + 1:]) == [
        [topic, str(p), "Successful"] for p in range(3)]
    changelog = f"{group}-store-changelog"
    assert txbroker.call(lambda broker: changelog in broker.logs.topics)
    r = groups(b, "delete", "--group", group, "--delete-all-internal-topics")
    assert r.stdout.splitlines() == [
        f"Deletion of requested streams groups ('{group}') was successful.",
        f"Deletion of associated internal topics of the streams groups ('{group}') was "
        "successful."]
    assert not txbroker.call(lambda broker: changelog in broker.logs.topics)
    assert group not in groups(b, "list").stdout.split()
