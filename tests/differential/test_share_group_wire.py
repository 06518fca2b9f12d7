"""Share groups (KIP-932) on the wire, txbroker vs Apache Kafka 4.4.0: the error codes of
ShareGroupHeartbeat, ShareFetch and ShareAcknowledge for bad input (unknown member,
fenced epoch, share session epochs, unknown partitions, offsets never acquired or already
acknowledged, an unknown acknowledge type), and which partitions an answer lists.

Error messages: where Kafka's answer carries one, txbroker's is the same or says the same
thing; where Kafka's is null, txbroker's may say why (docs/compatibility.md), so only
the codes are compared there."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator

from kio.schema.errors import ErrorCode as E
from txbroker.protocol.records import read_header

from tests.differential import share_util
from tests.differential.share_util import (
    ACCEPT,
    RELEASE,
    acquired,
    describe_groups,
    heartbeat,
    join,
    new_group,
    produce,
    share_ack,
    share_fetch,
    topic_id,
)

share_broker = share_util.share_broker  # the fixture: txbroker, then Kafka


@contextlib.contextmanager
def _member(b, prefix: str, partitions: int = 1) -> Iterator[tuple]:
    """A new topic, a new share group and one member subscribed to the topic (joined by
    heartbeats) on a raw connection: (client, group, topic, topic id, member id)."""
    topic = b.topic(prefix, partitions)
    group = new_group(b)
    client = b.raw()
    try:
        member, _, _ = join(client, group, (topic,))
        yield client, group, topic, topic_id(b, topic), member
    finally:
        client.close()


def _errors(r) -> list[tuple[int, int]]:
    """(partition, error code) of a ShareAcknowledge answer (or a ShareFetch answer's
    AcknowledgeErrorCode)."""
    return [(p.partition_index, int(getattr(p, "acknowledge_error_code", p.error_code)))
            for t in r.responses for p in t.partitions]


def test_heartbeat_errors(share_broker):
    b = share_broker
    topic = b.topic("sgw-hb")
    group = new_group(b)
    client = b.raw()
    try:
        r = heartbeat(client, group, "", 0, (topic,))
        assert (r.error_code, r.member_id, r.member_epoch) == (E.invalid_request, None, 0)
        for bad_group, epoch, topics, message in (
                ("", 0, (topic,), "GroupId can't be empty."),
                (group, 0, None, "SubscribedTopicNames must be set in first request."),
                (group, -2, (topic,), "MemberEpoch is invalid.")):
            r = heartbeat(client, bad_group, str(uuid.uuid4()), epoch, topics)
            assert (r.error_code, r.error_message) == (E.invalid_request, message)
        member, epoch, r = join(client, group, (topic,))
        assert (r.member_id, r.heartbeat_interval.total_seconds()) == (member, 1)
        r = heartbeat(client, group, member, epoch + 5)
        assert (r.error_code, r.error_message) == (E.fenced_member_epoch, (
            f"The share group member has a greater member epoch ({epoch + 5}) than the one "
            f"known by the group coordinator ({epoch}). The member must abandon all its "
            "partitions and rejoin."))
        stranger = str(uuid.uuid4())
        r = heartbeat(client, group, stranger, 3)
        assert (r.error_code, r.error_message) == (
            E.unknown_member_id, f"Member {stranger} is not a member of group {group}.")
        # The member's own epoch still works; leaving answers epoch -1.
        assert heartbeat(client, group, member, epoch).error_code == 0
        r = heartbeat(client, group, member, -1)
        assert (r.error_code, r.member_id, r.member_epoch) == (0, member, -1)
        assert heartbeat(client, group, member, epoch).error_code == E.unknown_member_id
    finally:
        client.close()


def test_share_session_epochs(share_broker):
    b = share_broker
    with _member(b, "sgw-session") as (client, group, topic, tid, member):
        produce(b, topic, 3)
        assert share_fetch(client, None, member, 0, tid).error_code == E.invalid_request
        assert share_fetch(client, group, "", 0, tid).error_code == E.invalid_request
        assert share_ack(client, None, member, 1, tid, []).error_code == E.invalid_request
        assert share_ack(client, group, "", 1, tid, []).error_code == E.invalid_request
        # An empty group id: Kafka opens a session for the group "" (docs/compatibility.md).
        assert share_fetch(client, "", str(uuid.uuid4()), 0, tid).error_code == (
            0 if b.is_kafka else E.invalid_group_id)
        assert share_fetch(client, group, member, 1, tid).error_code == E.share_session_not_found
        assert share_ack(client, group, member, 1, tid, [(0, 0, ACCEPT)]).error_code == \
            E.share_session_not_found
        assert share_fetch(client, group, member, 0, tid, acks=[(0, 0, ACCEPT)]).error_code == \
            E.invalid_request  # a new session has nothing to acknowledge
        r = share_fetch(client, group, member, 0, tid, max_wait_ms=5000)
        assert (r.error_code, acquired(r)) == (0, [(0, 0, 2, 1)])
        assert share_fetch(client, group, member, 5, tid).error_code == \
            E.invalid_share_session_epoch
        assert share_ack(client, group, member, 0, tid, [(0, 0, ACCEPT)]).error_code == \
            E.invalid_share_session_epoch  # ShareAcknowledge cannot open a session
        assert share_ack(client, group, member, 1, tid, [(0, 0, ACCEPT)]).error_code == 0
        # Closing (-1) releases what the member holds; the session is gone after.
        r = share_fetch(client, group, member, -1, tid)
        assert (r.error_code, r.responses) == (0, ())
        assert share_ack(client, group, member, 3, tid, [(1, 1, ACCEPT)]).error_code == \
            E.share_session_not_found
        other = str(uuid.uuid4())  # (ShareFetch does not check group membership)
        r = share_fetch(client, group, other, 0, tid, max_wait_ms=5000)
        assert acquired(r) == [(0, 1, 2, 2)]


def test_acknowledge_errors(share_broker):
    b = share_broker
    never_tid = topic_id(b, b.topic("sgw-never"))
    with _member(b, "sgw-ack") as (client, group, topic, tid, member):
        produce(b, topic, 4)
        r = share_fetch(client, group, member, 0, tid, max_wait_ms=5000)
        assert acquired(r) == [(0, 0, 3, 1)]
        epoch = iter(range(1, 100))

        def ack(acks, on=tid, partition: int = 0):
            return share_ack(client, group, member, next(epoch), on, acks, partition)

        assert _errors(ack([(10, 11, ACCEPT)])) == [(0, E.invalid_request)]  # past acquired
        assert _errors(ack([(0, 0, 9)])) == [(0, E.invalid_request)]  # no such type
        assert _errors(ack([(2, 1, ACCEPT)])) == [(0, E.invalid_request)]  # first > last
        # Overlapping batches: the request is refused whole (offset 1 stays acquired).
        assert _errors(ack([(0, 1, ACCEPT), (1, 2, ACCEPT)])) == [(0, E.invalid_record_state)]
        assert _errors(ack([(0, 1, ACCEPT), (2, 2, RELEASE)])) == [(0, 0)]
        # Accepted again: no error; released (no longer this member's): INVALID_RECORD_STATE.
        assert _errors(ack([(1, 1, ACCEPT)])) == [(0, 0)]
        assert _errors(ack([(2, 2, ACCEPT)])) == [(0, E.invalid_record_state)]
        assert _errors(ack([(0, 0, ACCEPT)], partition=7)) == [(7, E.unknown_topic_or_partition)]
        assert _errors(ack([(0, 0, ACCEPT)], on=uuid.uuid4())) == [(0, E.unknown_topic_id)]
        r = ack([(0, 0, ACCEPT)], on=never_tid)  # no share state for this group
        assert [(p.error_code, p.error_message) for t in r.responses for p in t.partitions] \
            == [(E.unknown_topic_or_partition, "This server does not host this topic-partition.")]
        # Offset 3 is still this member's: its acknowledgement rides on a ShareFetch.
        r = share_fetch(client, group, member, next(epoch), tid, acks=[(3, 3, ACCEPT)],
                        max_wait_ms=5000)
        assert _errors(r) == [(0, 0)] and acquired(r) == [(0, 2, 2, 2)]


def test_fetch_lists_the_partitions_with_records(share_broker):
    """A new session's answer lists the partitions with records; of the others Kafka
    lists those it happened to read (txbroker none); an unknown topic id is answered
    for this request only."""
    b = share_broker
    with _member(b, "sgw-list", 3) as (client, group, topic, tid, member):
        produce(b, topic, 2, partition=1)
        r = share_fetch(client, group, member, 0, tid, (0, 1, 2), max_wait_ms=5000)
        assert acquired(r) == [(1, 0, 1, 1)]
        listed = {p.partition_index: (p.error_code, p.records or b"")
                  for t in r.responses for p in t.partitions}
        assert 1 in listed and all(v == (0, b"") for k, v in listed.items() if k != 1), listed
        if not b.is_kafka:
            assert list(listed) == [1]
        unknown = uuid.uuid4()
        r = share_fetch(client, group, member, 1, unknown, max_wait_ms=0)
        assert [(t.topic_id, p.partition_index, p.error_code) for t in r.responses
                for p in t.partitions] == [(unknown, 0, E.unknown_topic_id)]


def _batches(records: bytes | None) -> list[tuple[int, int]]:
    """(base offset, last offset) of each record batch in a ShareFetch answer."""
    data, pos, out = bytes(records or b""), 0, []
    while pos < len(data):
        h = read_header(data, pos)
        out.append((h.base_offset, h.last_offset))
        pos += h.size
    return out


def test_an_answer_carries_only_the_batches_of_its_acquired_records(share_broker):
    """Whole batches are acquired (max_records is soft) and the answer's records are
    those batches, not the rest of the log that was read."""
    b = share_broker
    with _member(b, "sgw-slice") as (client, group, topic, tid, member):
        for first in (0, 4, 8):
            produce(b, topic, 4, start=first)  # a batch each (flushed)
        r = share_fetch(client, group, member, 0, tid, max_records=2, max_wait_ms=5000)
        assert acquired(r) == [(0, 0, 3, 1)]
        [part] = [p for t in r.responses for p in t.partitions]
        assert _batches(part.records) == [(0, 3)]
        r = share_fetch(client, group, member, 1, tid, max_records=5, max_wait_ms=5000)
        assert acquired(r) == [(0, 4, 11, 1)]  # a second batch begun below max_records
        [part] = [p for t in r.responses for p in t.partitions]
        assert _batches(part.records) == [(4, 7), (8, 11)]


def test_fetch_of_a_topic_the_group_never_subscribed_to(share_broker):
    """Kafka initializes a share-partition's state when a member subscribes to its topic;
    a ShareFetch of another topic finds none and answers UNKNOWN_SERVER_ERROR for it.
    txbroker starts the state on the first fetch and serves it (docs/compatibility.md)."""
    b = share_broker
    other = b.topic("sgw-other")
    other_id = topic_id(b, other)
    with _member(b, "sgw-sub") as (client, group, _, _, member):
        produce(b, other, 2)
        r = share_fetch(client, group, member, 0, other_id, max_wait_ms=1000)
        assert r.error_code == 0
        if b.is_kafka:
            assert [(p.error_code, p.records or b"") for t in r.responses
                    for p in t.partitions] == [(E.unknown_server_error, b"")]
        else:
            assert acquired(r) == [(0, 0, 1, 1)]
        # The session-level errors carry no message on Kafka; txbroker's says why.
        r = share_fetch(client, group, str(uuid.uuid4()), 3, other_id)
        assert r.error_code == E.share_session_not_found
        assert (r.error_message is None) == b.is_kafka, r.error_message


def test_a_classic_group_id_is_not_a_share_group(share_broker):
    b = share_broker
    topic = b.topic("sgw-classic")
    group = new_group(b, "classic")
    c = share_util.ck.Consumer({"bootstrap.servers": b.bootstrap, "group.id": group,
                                "auto.offset.reset": "earliest"})
    client = b.raw()
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 30
        while not c.assignment():  # joined the classic group
            assert time.monotonic() < deadline
            c.poll(0.2)
        message = f"Group {group} is not a share group."
        (g,) = describe_groups(client, group)
        assert (g.error_code, g.error_message, g.group_state, g.group_epoch) == (
            E.group_id_not_found, message, "", 0)
        r = heartbeat(client, group, str(uuid.uuid4()), 0, (topic,))
        assert (r.error_code, r.error_message) == (E.group_id_not_found, message)
    finally:
        client.close()
        c.close()



def test_record_limit_mode_acquires_at_most_max_records(share_broker):
    """ShareFetch v2's ShareAcquireMode record_limit (1): at most MaxRecords, a batch
    taken in part and its rest acquired first next time (its own range); an unknown
    mode fails the request with UNKNOWN_SERVER_ERROR after the session moved on."""
    b = share_broker
    with _member(b, "sgw-rl") as (client, group, topic, tid, member):
        for first in (0, 4, 8):
            produce(b, topic, 4, start=first)  # a batch each (flushed)
        got = []
        for epoch, n in enumerate((2, 5, 3, 10)):
            r = share_fetch(client, group, member, epoch, tid, max_records=n,
                            batch_size=1, max_wait_ms=3000, acquire_mode=1)
            parts = [p for t in r.responses for p in t.partitions]
            got.append((acquired(r), [_batches(p.records) for p in parts]))
        assert got == [([(0, 0, 1, 1)], [[(0, 3)]]),
                       ([(0, 2, 3, 1), (0, 4, 6, 1)], [[(0, 3), (4, 7)]]),
                       ([(0, 7, 7, 1), (0, 8, 9, 1)], [[(4, 7), (8, 11)]]),
                       ([(0, 10, 11, 1)], [[(8, 11)]])]
        r = share_fetch(client, group, member, 4, tid, max_records=3, acquire_mode=7)
        assert (r.error_code, list(r.responses)) == (E.unknown_server_error, [])
        assert share_fetch(client, group, member, 5, tid, acquire_mode=0).error_code == 0
