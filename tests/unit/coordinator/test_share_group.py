"""coordinator/share/group.py: share-group membership (KIP-932) and
coordinator/share/sessions.py: share sessions, as sans-IO machines."""

from __future__ import annotations

import uuid

from kio.schema.errors import ErrorCode as E
from txbroker.coordinator.share.group import ShareGroupConfig, ShareGroups, ShareHeartbeat
from txbroker.coordinator.share.sessions import ShareSessions

T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)
TOPICS = {"a": (T1, 2), "b": (T2, 1)}


def hb(member: str, epoch: int, topics: tuple[str, ...] | None = ("a",), group: str = "g"):
    return ShareHeartbeat(group, member, epoch, subscribed_topic_names=topics)


def test_join_heartbeat_leave_and_epochs():
    gs = ShareGroups(ShareGroupConfig(heartbeat_interval_ms=123))
    r = gs.heartbeat(0, hb("m1", 0), TOPICS)
    assert (r.error, r.member_epoch, r.heartbeat_interval_ms) == (0, 1, 123)
    assert r.assignment == {T1: frozenset({0, 1})}
    # A heartbeat with nothing new: same epoch, no assignment sent.
    r = gs.heartbeat(1, hb("m1", 1, None), TOPICS)
    assert (r.error, r.member_epoch, r.assignment) == (0, 1, None)
    # A second member: the group epoch moves; both share the partitions.
    r2 = gs.heartbeat(2, hb("m2", 0), TOPICS)
    assert r2.member_epoch == 2 and r2.assignment == {T1: frozenset({1})}
    r = gs.heartbeat(3, hb("m1", 1, None), TOPICS)
    assert r.member_epoch == 2 and r.assignment == {T1: frozenset({0})}
    g = gs.groups["g"]
    assert (g.group_epoch, g.assignment_epoch, g.state) == (2, 2, "Stable")
    # Leave: -1 back; the other member gets everything at its next heartbeat.
    r = gs.heartbeat(4, hb("m2", -1, None), TOPICS)
    assert (r.error, r.member_epoch, r.removed) == (0, -1, ("m2",))
    r = gs.heartbeat(5, hb("m1", 2, None), TOPICS)
    assert r.member_epoch == 3 and r.assignment == {T1: frozenset({0, 1})}
    gs.heartbeat(6, hb("m1", 3, None), TOPICS)
    gs.heartbeat(6, hb("m1", -1, None), TOPICS)
    assert gs.groups["g"].state == "Empty"
    assert gs.delete_group("g") == 0 and "g" not in gs.groups


def test_errors_are_kafkas():
    gs = ShareGroups(ShareGroupConfig(max_size=1))
    assert gs.heartbeat(0, hb("", 0), TOPICS).error == E.invalid_request
    assert gs.heartbeat(0, hb("m", 0, None), TOPICS).error == E.invalid_request
    assert gs.heartbeat(0, hb("m", 0, ("a",), group=""), TOPICS).error == E.invalid_request
    assert gs.heartbeat(0, hb("m", -2), TOPICS).error == E.invalid_request
    assert gs.heartbeat(0, hb("m", 1), TOPICS).error == E.unknown_member_id
    assert gs.heartbeat(0, hb("m", -1), TOPICS).error == E.unknown_member_id
    assert gs.heartbeat(0, hb("m", 0), TOPICS).error == 0
    r = gs.heartbeat(0, hb("m", 7), TOPICS)
    assert r.error == E.fenced_member_epoch and "greater member epoch (7)" in r.message
    assert gs.heartbeat(0, hb("n", 0), TOPICS).error == E.group_max_size_reached
    assert gs.delete_group("g") == E.non_empty_group
    assert gs.delete_group("nosuch") == E.group_id_not_found


def test_subscription_and_metadata_changes_bump_the_epoch():
    gs = ShareGroups(ShareGroupConfig())
    assert gs.heartbeat(0, hb("m", 0, ("a", "c")), TOPICS).member_epoch == 1
    r = gs.heartbeat(0, hb("m", 1, ("a", "b")), TOPICS)
    assert r.member_epoch == 2 and r.assignment == {T1: frozenset({0, 1}), T2: frozenset({0})}
    # Topic "c" is created: the subscribed metadata changed.
    r = gs.heartbeat(0, hb("m", 2, None), {**TOPICS, "x": (uuid.UUID(int=9), 1)})
    assert r.member_epoch == 2  # "x" is not subscribed: nothing changes
    T3 = uuid.UUID(int=3)
    gs.heartbeat(0, hb("m", 2, ("a", "b", "c")), TOPICS)
    r = gs.heartbeat(0, hb("m", 3, None), {**TOPICS, "c": (T3, 2)})
    assert r.member_epoch == 4 and r.assignment[T3] == frozenset({0, 1})


def test_session_timeout_removes_the_member():
    gs = ShareGroups(ShareGroupConfig(session_timeout_ms=100))
    gs.heartbeat(0, hb("m1", 0), TOPICS)
    gs.heartbeat(50, hb("m2", 0), TOPICS)
    assert gs.next_wake_ms() == 100
    assert gs.tick(99, TOPICS) == []
    assert gs.tick(100, TOPICS) == [("g", "m1")]
    assert list(gs.groups["g"].members) == ["m2"] and gs.next_wake_ms() == 150
    assert gs.heartbeat(120, hb("m1", 2, None), TOPICS).error == E.unknown_member_id
    # It rejoins with epoch 0 (a client does, on UNKNOWN_MEMBER_ID).
    assert gs.heartbeat(120, hb("m1", 0), TOPICS).error == 0


def test_share_session_epochs():
    s = ShareSessions(max_sessions=1)
    tp = (T1, 0)
    assert s.check("g", "m", 1, fetch=True)[0] == E.share_session_not_found
    assert s.check("g", "m", -1, fetch=True)[0] == E.share_session_not_found
    assert s.check("g", "m", 0, fetch=False)[0] == E.invalid_share_session_epoch
    assert s.check("g", "m", 0, fetch=True)[0] == 0
    assert s.update("g", "m", 0, [tp]).partitions == [tp]
    assert s.get("g", "m").epoch == 1
    assert s.check("g", "m", 2, fetch=True)[0] == E.invalid_share_session_epoch
    assert s.check("g", "other", 0, fetch=True)[0] == E.share_session_limit_reached
    assert s.check("g", "m", 1, fetch=False)[0] == 0
    session = s.update("g", "m", 1, [(T2, 0)], [tp])
    assert session.partitions == [(T2, 0)] and session.epoch == 2
    # Epoch 0 again replaces the member's session; -1 closes it.
    assert s.update("g", "m", 0, [tp]).partitions == [tp]
    assert s.update("g", "m", -1) is not None and s.get("g", "m") is None


def test_sessions_of_a_closed_connection():
    s = ShareSessions()
    conn_a, conn_b = object(), object()
    s.update("g", "m1", 0, [(T1, 0)], connection=conn_a)
    s.update("g", "m2", 0, [(T1, 0)], connection=conn_a)
    s.update("g", "m2", 1, connection=conn_b)  # its last request came on another one
    assert [x.member_id for x in s.close_connection(conn_a)] == ["m1"]
    assert s.get("g", "m1") is None and s.get("g", "m2") is not None


def test_the_previous_epoch_is_accepted_an_older_one_fenced():
    gs = ShareGroups(ShareGroupConfig())
    gs.heartbeat(0, hb("m1", 0), TOPICS)  # epoch 1
    gs.heartbeat(0, hb("m2", 0), TOPICS)  # group epoch 2
    r = gs.heartbeat(0, hb("m1", 1, None), TOPICS)
    assert r.member_epoch == 2 and r.assignment == {T1: frozenset({0})}
    # That answer was lost: m1 heartbeats with epoch 1 again and gets epoch 2 again.
    r = gs.heartbeat(0, hb("m1", 1, None), TOPICS)
    assert (r.error, r.member_epoch, r.assignment) == (0, 2, {T1: frozenset({0})})
    gs.heartbeat(0, hb("m3", 0), TOPICS)  # group epoch 3
    assert gs.heartbeat(0, hb("m1", 2, None), TOPICS).member_epoch == 3
    r = gs.heartbeat(0, hb("m1", 1, None), TOPICS)
    assert r.error == E.fenced_member_epoch and "previous member epoch (2)" in r.message
