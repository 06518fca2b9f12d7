"""KIP-848 consumer-protocol groups across process deaths: the broker SIGKILLed and
restarted keeps the group's epochs and assignments (members carry on without a
rebalance), also in the middle of a migration between the classic and the consumer
protocol; a member SIGKILLed is removed after group.consumer.session.timeout.ms and
its partitions move to the survivor."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer
from txbroker.protocol.messages import build, request_module
from txbroker.testing import BrokerProcess

from tests.helpers import RawClient

from .clients import unique_topic
from .consumer_util import create_topic, owned, poll_until

CONFIG = {
    "offsets.topic.num.partitions": "4",
    "group.consumer.heartbeat.interval.ms": "200",
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.consumer.session.timeout.ms": "2000",
    "group.consumer.min.session.timeout.ms": "1000",
}
CONSUMER_GROUP_DESCRIBE = 69


@pytest.fixture
def broker(tmp_path):
    with BrokerProcess(str(tmp_path / "data"), CONFIG) as proc:
        yield proc


def consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                     "group.protocol": "consumer", "auto.offset.reset": "earliest"})


def describe(broker, group: str):
    """(group epoch, assignment epoch, state, {member: (epoch, partitions, member type)})
    from ConsumerGroupDescribe v1 (None while the group is still loading, or not a
    consumer group)."""
    m = request_module(CONSUMER_GROUP_DESCRIBE, 1)
    client = RawClient(broker.host, broker.port)
    try:
        r = client.request(CONSUMER_GROUP_DESCRIBE, 1, build(
            m.ConsumerGroupDescribeRequest, group_ids=(group,),
            include_authorized_operations=False))
    finally:
        client.close()
    (g,) = r.groups
    if int(g.error_code) != 0:
        return None
    return (g.group_epoch, g.assignment_epoch, g.group_state,
            {x.member_id: (x.member_epoch, sorted(p for tp in x.assignment.topic_partitions
                                                  for p in tp.partitions), int(x.member_type))
             for x in g.members})


def test_broker_sigkill_keeps_epochs_and_assignments(broker):
    topic = unique_topic("cpk")
    create_topic(broker.bootstrap, topic, 4)
    group = unique_topic("g-cpk")
    a, b = consumer(broker.bootstrap, group), consumer(broker.bootstrap, group)
    try:
        a.subscribe([topic])
        b.subscribe([topic])
        assert poll_until([a, b], lambda: len(owned(a)) == 2 == len(owned(b)))
        assert poll_until([a, b], lambda: (describe(broker, group) or ())[2:3] == ("Stable",))
        before = describe(broker, group)
        mine, theirs = owned(a), owned(b)
        broker.kill()
        broker.start()
        assert poll_until([], lambda: describe(broker, group) is not None, timeout=30)
        assert describe(broker, group) == before
        # The members heartbeat again with their epochs: nothing moves.
        poll_until([a, b], lambda: False, timeout=1.5)
        assert describe(broker, group) == before
        assert (owned(a), owned(b)) == (mine, theirs)
    finally:
        a.close()
        b.close()


MEMBER = """
import sys
from confluent_kafka import Consumer
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
              "group.protocol": "consumer"})
c.subscribe([sys.argv[3]])
announced = False
while True:
    c.poll(0.05)
    if c.assignment() and not announced:
        print("assigned", flush=True)
        announced = True
"""


def test_killed_member_is_removed_after_its_session_timeout(broker):
    topic = unique_topic("cps")
    create_topic(broker.bootstrap, topic, 4)
    group = unique_topic("g-cps")
    survivor = consumer(broker.bootstrap, group)
    proc = subprocess.Popen([sys.executable, "-c", MEMBER, broker.bootstrap, group, topic],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "assigned"
        survivor.subscribe([topic])
        assert poll_until([survivor], lambda: len(owned(survivor)) == 2)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        killed_at = time.monotonic()
        assert poll_until([survivor], lambda: owned(survivor) == {0, 1, 2, 3}, timeout=20)
        # Not before the session timeout (2 s) ran out.
        assert time.monotonic() - killed_at >= 1.5
        state = describe(broker, group)
        assert len(state[3]) == 1
    finally:
        if proc.poll() is None:
            proc.kill()
        survivor.close()


def test_broker_sigkill_mid_migration(broker):
    """A classic member and a consumer-protocol member in one group (upgraded from a
    classic group): the broker SIGKILLed and restarted keeps it as it was, both members
    carry on. The consumer member leaves: the group is classic again (downgraded),
    and a second restart keeps that too."""
    from tests.differential.util import describe_group

    topic = unique_topic("cpm")
    create_topic(broker.bootstrap, topic, 4)
    group = unique_topic("g-cpm")
    classic = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                        "group.protocol": "classic", "session.timeout.ms": 6000,
                        "heartbeat.interval.ms": 300})
    modern = consumer(broker.bootstrap, group)
    try:
        classic.subscribe([topic])
        assert poll_until([classic], lambda: owned(classic) == {0, 1, 2, 3})
        modern.subscribe([topic])
        assert poll_until([classic, modern], lambda: len(owned(classic)) == 2 == len(
            owned(modern)) and (describe(broker, group) or ())[2:3] == ("Stable",))
        before = describe(broker, group)
        assert sorted(t for _e, _p, t in before[3].values()) == [0, 1]
        mine, theirs = owned(classic), owned(modern)
        broker.kill()
        broker.start()
        assert poll_until([], lambda: describe(broker, group) is not None, timeout=30)
        assert describe(broker, group) == before
        poll_until([classic, modern], lambda: False, timeout=1.5)
        assert describe(broker, group) == before
        assert (owned(classic), owned(modern)) == (mine, theirs)

        modern.close()
        modern = None
        assert poll_until([classic], lambda: owned(classic) == {0, 1, 2, 3}
                          and describe_group(broker, group)[1] == "Stable")
        downgraded = describe_group(broker, group)
        assert downgraded == (0, "Stable", "consumer", 1)
        broker.kill()
        broker.start()
        assert poll_until([classic], lambda: describe_group(broker, group)[0] == 0, timeout=30)
        poll_until([classic], lambda: False, timeout=1.5)
        assert describe_group(broker, group) == downgraded
        assert owned(classic) == {0, 1, 2, 3}
    finally:
        classic.close()
        if modern is not None:
            modern.close()
