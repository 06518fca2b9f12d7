"""``txbroker groups`` on share groups (KIP-932) against an in-process broker, with a
real confluent-kafka ShareConsumer putting the group in each state: listed with its type,
described as kafka-share-groups.sh describes it (start offset and lag per partition,
members, state), reset, its offsets deleted and the group deleted."""

from __future__ import annotations

import pytest

from tests.helpers import wait_until

from ..clients import unique_topic
from ..test_share_groups import ENABLED, ck, poll_until, produce, share_consumer
from .test_tools import cli, table_rows


@pytest.fixture
def txbroker_config() -> dict[str, str]:
    return dict(ENABLED)


def groups(b: str, *argv: str, ok: bool = True):
    r = cli("groups", "--bootstrap-server", b, *argv)
    if ok:
        assert r.returncode == 0, r.stderr
    return r


def test_share_group_list_describe_reset_delete_offsets_and_delete(txbroker):
    b = txbroker.bootstrap
    topic, other = unique_topic("tools-share"), unique_topic("tools-share-other")
    group = unique_topic("tools-sg")
    txbroker.create_topic(topic, 2)
    txbroker.create_topic(other, 1)
    p = ck.Producer({"bootstrap.servers": b})
    for i in range(10):
        p.produce(topic, value=b"v%d" % i, partition=i % 2)
    assert p.flush(10) == 0

    c = share_consumer(b, group, topic, explicit=True, **{"client.id": "tools-share-client"})
    try:
        got = poll_until(c, 10)
        assert len(got) == 10
        # Partition 0: 0..2 accepted, 3..4 released; partition 1: all released.
        for m in got:
            accepted = m.partition() == 0 and m.offset() < 3
            c.acknowledge(m, ck.AcknowledgeType.ACCEPT if accepted else ck.AcknowledgeType.RELEASE)
        c.commit_sync(10)

        r = groups(b, "list", "--type")
        assert [group, "Share"] in table_rows(r.stdout)
        r = groups(b, "list", "--type", "share", "--state")
        assert table_rows(r.stdout) == [[group, "Share", "Stable"]]
        assert group not in groups(b, "list", "--type", "classic", "consumer").stdout.split()
        assert group in groups(b, "list").stdout.split()

        r = groups(b, "describe", "--group", group)
        assert r.stdout.splitlines()[0].split() == ["GROUP", "TOPIC", "PARTITION",
                                                    "START-OFFSET", "LAG"]
        assert table_rows(r.stdout) == [[group, topic, "0", "3", "2"], [group, topic, "1", "0", "5"]]
        r = groups(b, "describe", "--group", group, "--verbose")
        assert table_rows(r.stdout) == [[group, topic, "0", "0", "3", "2"],
                                        [group, topic, "1", "0", "0", "5"]]
        r = groups(b, "describe", "--group", group, "--members")
        [row] = table_rows(r.stdout)
        assert row[0] == group and row[-3:] == ["tools-share-client", "2", f"{topic}:0,1"]
        r = groups(b, "describe", "--group", group, "--members", "--verbose")
        assert r.stdout.splitlines()[0].split()[-2:] == ["MEMBER-EPOCH", "ASSIGNMENT"]
        [row] = table_rows(r.stdout)
        assert int(row[-2]) >= 1
        r = groups(b, "describe", "--group", group, "--state")
        assert table_rows(r.stdout)[0][-2:] == ["Stable", "1"]

        # A member: nothing may be reset or deleted (Kafka's words).
        r = groups(b, "reset-offsets", "--group", group, "--all-topics", "--to-earliest",
                   "--execute", ok=False)
        assert r.returncode == 1 and f"Share group '{group}' is not empty." in r.stderr
        r = groups(b, "delete-offsets", "--group", group, "--topic", topic, ok=False)
        assert r.returncode == 1 and "The group is not empty." in r.stderr
        r = groups(b, "delete", "--group", group, ok=False)
        assert r.returncode == 1 and "NON_EMPTY_GROUP" in r.stderr
    finally:
        c.close()

    assert wait_until(lambda: table_rows(groups(b, "list", "--type", "share", "--state").stdout)
                      == [[group, "Share", "Empty"]])
    r = groups(b, "describe", "--group", group, "--state")
    assert table_rows(r.stdout)[0][-2:] == ["Empty", "0"]
    r = groups(b, "describe", "--group", group, "--members")
    assert r.stdout.strip() == f"Share group '{group}' has no active members."

    def reset(*how: str) -> list[list[str]]:
        return table_rows(groups(b, "reset-offsets", "--group", group, *how).stdout)

    def start_offsets() -> dict[str, str]:
        return {row[2]: row[3] for row in table_rows(groups(b, "describe", "--group", group).stdout)}

    # A dry run by default; --to-offset is clamped to the log's end, as Kafka's tool does.
    assert reset("--topic", f"{topic}:0", "--to-earliest") == [[group, topic, "0", "0"]]
    assert start_offsets() == {"0": "3", "1": "0"}
    assert reset("--topic", f"{topic}:1", "--to-offset", "100", "--execute") == \
        [[group, topic, "1", "5"]]
    assert start_offsets() == {"0": "3", "1": "5"}
    r = groups(b, "describe", "--group", group)
    assert table_rows(r.stdout)[1][-1] == "0"  # nothing left to deliver on partition 1
    assert reset("--all-topics", "--to-datetime", "2000-01-01T00:00:00.000Z") == \
        [[group, topic, "0", "0"], [group, topic, "1", "0"]]
    assert reset("--all-topics", "--to-latest", "--dry-run") == \
        [[group, topic, "0", "5"], [group, topic, "1", "5"]]
    r = groups(b, "reset-offsets", "--group", group, "--all-topics", "--shift-by", "1", ok=False)
    assert r.returncode == 1 and "--shift-by" in r.stderr
    assert start_offsets() == {"0": "3", "1": "5"}

    # Offsets: a topic with no share state is Kafka's error row; then the group's own.
    r = groups(b, "delete-offsets", "--group", group, "--topic", other, ok=False)
    assert r.returncode == 1
    assert table_rows(r.stdout) == [[other, "Error:", "There", "is", "no", "offset",
                                     "information", "to", "delete."]]
    r = groups(b, "delete-offsets", "--group", group, "--topic", topic)
    assert table_rows(r.stdout) == [[topic, "Successful"]]
    r = groups(b, "describe", "--group", group)
    assert r.stdout.strip() == f"Share group '{group}' has no offset information."

    r = groups(b, "delete", "--group", group)
    assert "was successful" in r.stdout
    assert group not in groups(b, "list").stdout.split()


def test_delete_offsets_is_for_share_groups(txbroker):
    b = txbroker.bootstrap
    topic = unique_topic("tools-share-classic")
    txbroker.create_topic(topic, 1)
    produce(b, topic, 1)
    r = groups(b, "delete-offsets", "--group", unique_topic("no-such-group"), "--topic", topic,
               ok=False)
    assert r.returncode == 1 and "is not a share group" in r.stderr
