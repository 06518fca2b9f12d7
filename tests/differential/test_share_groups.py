"""Share groups (KIP-932), txbroker vs Apache Kafka 4.4.0, as confluent-kafka's
ShareConsumer (librdkafka 2.16) and the admin requests see them: delivery to several
members in both acknowledgement modes, RELEASE / REJECT / lock expiry and the delivery
count, ShareGroupDescribe, ListGroups by type, the share-group offsets APIs and
DeleteGroups. The wire-level errors are in test_share_group_wire.py."""

from __future__ import annotations

import time

from kio.schema.errors import ErrorCode as E
from txbroker.protocol.messages import build, request_module

from tests.differential import share_util
from tests.differential.share_util import (
    LOCK_MS,
    accept,
    ck,
    describe_groups,
    new_group,
    poll_once,
    poll_until,
    produce,
    set_group_config,
    share_consumer,
    topic_id,
)
from tests.integration.test_share_group_offsets import alter, delete, describe, spso

share_broker = share_util.share_broker  # the fixture: txbroker, then Kafka

N = 20


def _offsets(msgs) -> list[tuple[int, int]]:
    return sorted((m.partition(), m.offset()) for m in msgs)


def _close(*consumers) -> None:
    for c in consumers:
        c.close()


def _wait_state(broker, group: str, state: str, timeout: float = 30) -> None:
    """Until ShareGroupDescribe says ``state`` (Kafka expires a closed member's
    heartbeat session a moment after its leave)."""
    client = broker.raw()
    try:
        deadline = time.monotonic() + timeout
        while (g := describe_groups(client, group)[0]).group_state != state:
            assert time.monotonic() < deadline, g
            time.sleep(0.1)
    finally:
        client.close()


def _describe_one(broker, group: str) -> tuple:
    """(error, group, members) of ShareGroupDescribe."""
    client = broker.raw()
    try:
        (g,) = describe_groups(client, group)
    finally:
        client.close()
    return g.error_code, g.group_id, g.members


def _delivered(consumers, want: int, ack, timeout: float = 40) -> list:
    got: list = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        for c in consumers:
            msgs = poll_once(c)
            got += msgs
            if ack is not None and msgs:
                ack(c, msgs)
    return got


def test_two_members_share_two_partitions_in_both_modes(share_broker):
    """N records over two partitions, two members each mode: every record is delivered
    once, with delivery count 1; a new member afterwards gets nothing."""
    b = share_broker
    for explicit in (True, False):
        topic = b.topic("sg-deliver", 2)
        group = new_group(b)
        members = [share_consumer(b, group, topic, explicit=explicit) for _ in range(2)]
        try:
            produce(b, topic, N)
            got = _delivered(members, N, accept if explicit else None)
            per_partition: dict[int, list[int]] = {}
            for p, o in _offsets(got):
                per_partition.setdefault(p, []).append(o)
            # Every record once: each partition's offsets from 0 without gap or repeat.
            assert len(got) == N and all(offs == list(range(len(offs)))
                                         for offs in per_partition.values()), _offsets(got)
            assert {m.delivery_count() for m in got} == {1}
            if not explicit:  # implicit mode accepts a poll's records at the next commit
                assert all(v is None for c in members for v in c.commit_sync(10).values())
        finally:
            _close(*members)
        # One record more per partition, after every record was accepted, is all a new
        # member gets: an accepted record that came back would be acquired before it.
        for p in (0, 1):
            produce(b, topic, 1, start=N + p, partition=p)
        late = share_consumer(b, group, topic, explicit=explicit)
        try:
            assert _offsets(poll_until(late, 2, ack=accept if explicit else None)) == [
                (p, len(per_partition.get(p, []))) for p in (0, 1)], \
                f"explicit={explicit}: accepted records came back"
        finally:
            late.close()


def _filled(b, prefix: str, records: int) -> tuple[str, str]:
    """A new one-partition topic with ``records`` records, and a new share group."""
    topic = b.topic(prefix)
    group = new_group(b)
    produce(b, topic, records)
    return topic, group


def test_release_redelivers_and_reject_never(share_broker):
    b = share_broker
    topic, group = _filled(b, "sg-release", 4)
    c = share_consumer(b, group, topic, explicit=True)
    try:
        first = sorted(poll_until(c, 4), key=lambda m: m.offset())
        assert [(m.offset(), m.delivery_count()) for m in first] == [(i, 1) for i in range(4)]
        for m, how in zip(first, ("RELEASE", "REJECT", "RELEASE", "ACCEPT"), strict=True):
            c.acknowledge(m, getattr(ck.AcknowledgeType, how))
        assert all(v is None for v in c.commit_sync(10).values())
        again = poll_until(c, 2, ack=accept)
        assert sorted((m.offset(), m.delivery_count()) for m in again) == [(0, 2), (2, 2)]
        # The REJECTed record never comes back: a record produced now is delivered alone.
        produce(b, topic, 1, start=4)
        assert [(m.offset(), m.delivery_count()) for m in poll_until(c, 1, ack=accept)] == \
            [(4, 1)]
    finally:
        c.close()


def test_lock_expiry_redelivers_to_another_member(share_broker):
    b = share_broker
    topic, group = _filled(b, "sg-lock", 3)
    # The group's own lock (the broker's is longer, for the other tests' slow polls).
    set_group_config(b, group, "share.record.lock.duration.ms", str(LOCK_MS // 3))
    holder = share_consumer(b, group, topic, explicit=True)
    other = share_consumer(b, group, topic, explicit=True)
    try:
        held = poll_until(holder, 3)  # acquired, never acknowledged
        assert sorted(m.offset() for m in held) == [0, 1, 2]
        again = poll_until(other, 3, timeout=LOCK_MS / 3000 + 30, ack=accept)
        assert sorted((m.offset(), m.delivery_count()) for m in again) == [(0, 2), (1, 2), (2, 2)]
    finally:
        _close(other, holder)


def test_describe_and_list_a_share_group(share_broker):
    b = share_broker
    topic = b.topic("sg-describe", 2)
    tid = topic_id(b, topic)
    group = new_group(b)
    produce(b, topic, 2)
    c = share_consumer(b, group, topic, **{"client.id": "share-diff"})
    client = b.raw()
    try:
        assert len(poll_until(c, 2)) == 2  # joined, assigned and fetching
        # (Kafka answers in the order of its coordinator shards, not the request's)
        by_id = {x.group_id: x for x in describe_groups(client, group, "no-such-share-group")}
        g, missing = by_id[group], by_id["no-such-share-group"]
        assert (g.error_code, g.error_message, g.group_id, g.group_state, g.assignor_name) == \
            (0, None, group, "Stable", "simple")
        assert g.group_epoch == g.assignment_epoch > 0
        (m,) = g.members
        assert (m.client_id, m.client_host, m.rack_id, m.member_epoch,
                m.subscribed_topic_names) == ("share-diff", "/127.0.0.1", None, g.group_epoch,
                                              (topic,))
        assert [(t.topic_id, t.topic_name, sorted(t.partitions))
                for t in m.assignment.topic_partitions] == [(tid, topic, [0, 1])]
        assert (missing.error_code, missing.error_message, missing.group_state,
                missing.group_epoch, missing.assignment_epoch, missing.members) == (
            E.group_id_not_found, "Group no-such-share-group not found.", "", 0, 0, ())
        lm = request_module(16, 5)
        for types, states, listed in ((("share",), (), True), (("consumer",), (), False),
                                      (("share",), ("Stable",), True),
                                      (("share",), ("Empty",), False)):
            r = client.request(16, 5, build(lm.ListGroupsRequest, states_filter=states,
                                            types_filter=types))
            assert r.error_code == 0
            mine = [(x.group_id, x.protocol_type, x.group_state, x.group_type)
                    for x in r.groups if x.group_id == group]
            assert mine == ([(group, "share", "Stable", "share")] if listed else []), (types,
                                                                                       states)
    finally:
        client.close()
        c.close()
    _wait_state(b, group, "Empty")
    assert _describe_one(b, group) == (0, group, ())


def test_share_group_offsets_and_delete_groups(share_broker):
    b = share_broker
    topic, group = _filled(b, "sg-offsets", 10)
    c = share_consumer(b, group, topic, explicit=True)
    try:
        assert len(poll_until(c, 10, ack=accept)) == 10
        # A group with a member: Alter and Delete refuse, with the top-level error alone.
        r = alter(b, group, {(topic, 0): 0})
        assert (r.error_code, r.responses) == (E.non_empty_group, ())
        r = delete(b, group, [topic])
        assert (r.error_code, r.responses) == (E.non_empty_group, ())
        admin = b.admin
        with_members = admin.delete_consumer_groups([group])[group]
        try:
            with_members.result(10)
            raise AssertionError("DeleteGroups deleted a share group with a member")
        except ck.KafkaException as e:
            assert e.args[0].code() == ck.KafkaError.NON_EMPTY_GROUP
    finally:
        c.close()
    _wait_state(b, group, "Empty")
    g = describe(b, group)
    (p,) = g.topics[0].partitions
    assert (g.error_code, p.leader_epoch, p.lag, p.error_code) == (0, 0, 0, 0)
    # Every record accepted: txbroker's start offset is past them; Kafka's persisted one
    # moves on the share-partition's next state write (docs/compatibility.md).
    assert spso(g) == {(topic, 0): 0 if b.is_kafka else 10}
    # Reset to 4: the next member gets 4..9 again, with delivery count 1.
    r = alter(b, group, {(topic, 0): 4, (topic, 3): 0, ("sg-no-such-topic", 0): 0})
    assert r.error_code == 0
    # Kafka 4.4 answers the unknown topics first.
    assert [(t.topic_name, [(p.partition_index, p.error_code) for p in t.partitions])
            for t in r.responses] == [
        ("sg-no-such-topic", [(0, E.unknown_topic_or_partition)]),
        (topic, [(0, 0), (3, E.unknown_topic_or_partition)])]
    assert spso(describe(b, group)) == {(topic, 0): 4}
    c = share_consumer(b, group, topic, explicit=True)
    try:
        again = poll_until(c, 6, ack=accept)
        assert sorted((m.offset(), m.delivery_count()) for m in again) == \
            [(o, 1) for o in range(4, 10)]
    finally:
        c.close()
    _wait_state(b, group, "Empty")
    r = delete(b, group, [topic, "sg-no-such-topic"])
    assert r.error_code == 0
    assert [(t.topic_name, t.error_code) for t in r.responses] == [
        (topic, 0), ("sg-no-such-topic", E.unknown_topic_or_partition)]
    assert describe(b, group).topics == ()
    assert delete(b, "sg-no-such-group", [topic]).error_code == E.group_id_not_found
    b.admin.delete_consumer_groups([group])[group].result(10)
    assert _describe_one(b, group)[0] == E.group_id_not_found
