"""Share groups (KIP-932) with Kafka's own Java code and with franz-go, on txbroker and
Apache Kafka 4.4.0: the Java KafkaShareConsumer 4.4.0 in implicit and explicit
acknowledgement modes with the Admin share-group calls (tests/jvm/JavaShareConsumer.java),
``kafka-share-groups.sh`` and ``kafka-console-share-consumer.sh`` (run in one JVM by
tests/jvm/ToolRunner.java), and franz-go's share consumer (tests/go/sharegroup)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.differential import share_util
from tests.differential.jvm import run_java_steps, run_tools
from tests.differential.share_util import new_group, poll_until, produce, share_consumer
from tests.integration.txn_util import unique
from tests.kafka_reference import ROOT

share_broker = share_util.share_broker  # the fixture: txbroker, then Kafka


def test_java_share_consumer(share_broker, jvm_classes):
    steps = run_java_steps(jvm_classes, "JavaShareConsumer", share_broker.bootstrap,
                           unique("jshare"))
    failed = {name: detail for name, (ok, detail) in steps.items() if not ok}
    assert not failed, failed
    ten = ",".join(f"{i}:1" for i in range(10))
    assert {name: detail for name, (_, detail) in steps.items()} == {
        "admin.setup": "",
        # Implicit mode: commitSync accepts; a record produced afterwards comes alone.
        "consumer.implicit": f"first={ten} after=10:1",
        # Offset 0 RELEASEd comes back with delivery count 2; offset 1 REJECTed never (a
        # record produced afterwards comes alone).
        "consumer.explicit": f"first={ten} again=0:2 more=10:1",
        "admin.describeShareGroups": "state=Empty members=0",
        "admin.listShareGroupOffsets": "lag=0",
        "admin.alterShareGroupOffsets": "after=" + ",".join(f"{i}:1" for i in range(5, 11)),
        "admin.deleteShareGroups": "deleted=2",
    }


def _rows(result) -> list[list[str]]:
    return result.table()


def test_share_group_tools(share_broker, jvm_classes, tmp_path):
    """kafka-console-share-consumer reads a share group; kafka-share-groups lists,
    describes (offsets, members, state), resets, deletes offsets and deletes it, first
    with a live member (refused: not empty), then with none. The same lines on both
    brokers but the epochs and one start offset (docs/compatibility.md)."""
    b = share_broker
    kafka = b.is_kafka
    topic, live_topic = b.topic("sgt"), b.topic("sgt-live", 2)
    group, live = new_group(b, "sgt"), new_group(b, "sgt-live")
    produce(b, topic, 10)
    produce(b, live_topic, 4)
    bs = ["--bootstrap-server", b.bootstrap]
    sg = ["kafka-share-groups", *bs]
    member = share_consumer(b, live, live_topic, **{"client.id": "live-one"})
    try:
        assert len(poll_until(member, 4)) == 4
        with_member = run_tools(jvm_classes, tmp_path / "live", [
            [*sg, "--describe", "--group", live, "--members", "--verbose"],
            [*sg, "--describe", "--group", live, "--state"],
            [*sg, "--reset-offsets", "--group", live, "--topic", live_topic, "--to-earliest",
             "--execute"],
            [*sg, "--delete-offsets", "--group", live, "--topic", live_topic],
            [*sg, "--delete", "--group", live],
            [*sg, "--list", "--state", "Stable"],
        ])
    finally:
        member.close()
    members, state, reset, delete_offsets, delete, listed = with_member
    assert [r.exit for r in with_member] == [0] * 6
    (header, row) = _rows(members)
    assert header == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
                      "MEMBER-EPOCH", "ASSIGNMENT"]
    # Kafka's group epoch also moves when it initializes the share-partitions' state.
    assert row[:1] + row[2:5] + row[6:] == [live, "/127.0.0.1", "live-one", "2",
                                            f"{live_topic}:0,1"]
    assert row[5] == ("3" if kafka else "1")
    assert _rows(state)[1][:1] + _rows(state)[1][2:] == [live, "(1)", "Stable", "1"]
    assert reset.lines() == [f"Share group '{live}' is not empty."]
    assert [line.split() for line in delete_offsets.lines()] == [
            ["Error:", "The", "group", "is", "not", "empty."], ["TOPIC", "STATUS"],
            [live_topic, "Error:", "The", "group", "is", "not", "empty."]]
    assert delete.lines() == [
        "Error: Deletion of some share groups failed:",
        f"* Group '{live}' could not be deleted due to: org.apache.kafka.common.errors."
        f"GroupNotEmptyException: Share group '{live}' is not EMPTY."]
    assert [live, "Stable"] in _rows(listed)

    r = run_tools(jvm_classes, tmp_path / "empty", [
        ["kafka-console-share-consumer", *bs, "--topic", topic, "--group", group,
         "--max-messages", "10", "--timeout-ms", "30000"],
        [*sg, "--list"],
        [*sg, "--describe", "--group", group],
        [*sg, "--describe", "--group", group, "--members"],
        [*sg, "--describe", "--group", group, "--state", "--verbose"],
        [*sg, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest",
         "--execute"],
        [*sg, "--describe", "--group", group, "--offsets", "--verbose"],
        [*sg, "--delete-offsets", "--group", group, "--topic", topic],
        [*sg, "--delete", "--group", group],
        [*sg, "--describe", "--group", group],
    ])
    (consumed, listed, offsets, members, state, reset, offsets2, delete_offsets, delete,
     gone) = r
    assert [x.exit for x in r] == [0] * 10, r
    assert consumed.lines() == [f"v{i}" for i in range(10)] + ["Processed a total of 10 messages"]
    assert [group] in _rows(listed)
    # Every record accepted: txbroker's start offset is past them, Kafka's persisted one
    # moves on the next state write; the lag is 0 on both.
    assert _rows(offsets) == [["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"],
                              [group, topic, "0", "0" if kafka else "10", "0"]]
    assert members.lines() == [f"Share group '{group}' has no active members."]
    (_, header, row) = _rows(state)
    assert header == ["GROUP", "COORDINATOR", "(ID)", "STATE", "GROUP-EPOCH",
                      "ASSIGNMENT-EPOCH", "#MEMBERS"]
    assert row[:1] + row[2:4] + row[6:] == [group, "(1)", "Empty", "0"]
    assert row[4:6] == (["4", "4"] if kafka else ["2", "2"])
    assert _rows(reset) == [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], [group, topic, "0", "0"]]
    assert _rows(offsets2) == [
        ["GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "START-OFFSET", "LAG"],
        [group, topic, "0", "0", "0", "10"]]
    assert _rows(delete_offsets) == [["TOPIC", "STATUS"], [topic, "Successful"]]
    assert delete.lines() == [f"Deletion of requested share groups ('{group}') was successful."]
    assert gone.lines()[0] == ("Error: Executing share group command failed due to org.apache."
                               "kafka.common.errors.GroupIdNotFoundException: Group "
                               f"{group} not found.")


GO_MODULE = ROOT / "tests" / "go"


def go_build(tmp_path_factory: pytest.TempPathFactory, package: str) -> Path:
    """tests/go/<package> built with the franz-go version tests/go/go.mod pins (go.sum
    checks it; `make franz-go` fetches the modules ahead); skipped without go unless CI."""
    if shutil.which("go") is None:
        why = "no go toolchain (tests/go needs Go 1.26 for franz-go 1.22)"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    out = tmp_path_factory.mktemp("go") / package
    done = subprocess.run(["go", "build", "-mod=readonly", "-o", str(out), f"./{package}"],
                          cwd=GO_MODULE, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"go build failed:\n{done.stdout}\n{done.stderr}"
    return out


@pytest.fixture(scope="session")
def franz_go_sharegroup(tmp_path_factory) -> Path:
    return go_build(tmp_path_factory, "sharegroup")


def test_franz_go_share_consumer(share_broker, franz_go_sharegroup):
    b = share_broker
    topic = b.topic("sg-franz")
    group = new_group(b, "sg-franz")
    produce(b, topic, 10)
    done = subprocess.run([str(franz_go_sharegroup), b.bootstrap, topic, group, "10"],
                          capture_output=True, text=True, timeout=120)
    assert "DONE" in done.stdout, f"{done.stdout}\n{done.stderr[-3000:]}"
    steps = {}
    for line in done.stdout.splitlines():
        if line.startswith("STEP "):
            name, _, detail = line[5:].partition(" ")
            steps[name] = detail
    # Offset 0 RELEASEd comes back once (delivery count 2); 1 REJECTed never; no ack failed.
    assert steps == {"deliveries": "0:1,0:2," + ",".join(f"{i}:1" for i in range(1, 10)),
                     "acks": ""}, done.stdout
