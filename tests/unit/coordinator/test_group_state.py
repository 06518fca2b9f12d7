"""The classic group coordinator state machine, rule by rule, then as a whole (hypothesis)."""

from __future__ import annotations

import itertools
import struct
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from kio.schema.errors import ErrorCode as E
from txbroker.coordinator.group.offsets import ExpiryRule
from txbroker.coordinator.group.records import (
    GroupMetadataKey,
    decode_group_metadata_value,
    decode_key,
    encode_group_metadata_value,
)
from txbroker.coordinator.group.state import (
    Effects,
    GroupConfig,
    GroupCoordinatorState,
    JoinResult,
    PersistRequest,
    SyncResult,
)

NONE = 0
RANGE = [("range", b"range-meta")]


def consumer_subscription(*topics: str) -> bytes:
    """ConsumerProtocolSubscription v0: version, topics, user data."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        raw = t.encode()
        out += struct.pack(">h", len(raw)) + raw
    return out + struct.pack(">i", -1)


class Harness:
    """A tiny shell: collects responses and pending writes, owns the clock."""

    def __init__(self, **config: int) -> None:
        self._ids = itertools.count(1)
        self.sm = GroupCoordinatorState(GroupConfig(**config), lambda prefix: f"{prefix}-{next(self._ids)}")
        self.now = 0
        self.responses: dict[int, JoinResult | SyncResult] = {}
        self.writes: list[PersistRequest] = []
        self._tokens = itertools.count(1)
        self.last: Effects | None = None

    def absorb(self, fx: Effects) -> Effects:
        for token, result in fx.responses.items():
            assert token not in self.responses, f"token {token} answered twice"
            self.responses[token] = result
        for p in fx.persist:
            assert decode_key(p.key) == GroupMetadataKey(p.group_id)
            assert decode_group_metadata_value(p.value) == p.record
        self.writes.extend(fx.persist)
        self.last = fx
        return fx

    def join(self, member_id: str = "", group: str = "g", instance: str | None = None,
             protocols=RANGE, session: int = 10000, rebalance: int = 20000,
             ptype: str = "consumer", v4: bool = False, client: str = "c", skip: bool = False) -> int:
        token = next(self._tokens)
        self.absorb(self.sm.join(token, self.now, group, member_id, instance, client, "/127.0.0.1",
                                 session, rebalance, ptype, protocols, v4, skip))
        return token

    def sync(self, member_id: str, generation: int, assignments: dict[str, bytes] | None = None,
             group: str = "g", instance: str | None = None, ptype: str | None = None,
             pname: str | None = None) -> int:
        token = next(self._tokens)
        self.absorb(self.sm.sync(token, self.now, group, generation, member_id, instance, ptype, pname,
                                 assignments or {}))
        return token

    def heartbeat(self, member_id: str, generation: int, group: str = "g", instance: str | None = None) -> int:
        return self.sm.heartbeat(self.now, group, generation, member_id, instance)

    def leave(self, *members: tuple[str, str | None], group: str = "g"):
        res = self.sm.leave(self.now, group, list(members))
        self.absorb(res.effects)
        return res.error, res.member_errors

    def advance(self, ms: int) -> Effects:
        self.now += ms
        return self.absorb(self.sm.tick(self.now))

    def persist_all(self, error: int = NONE) -> None:
        while self.writes:
            w = self.writes.pop(0)
            self.absorb(self.sm.group_persisted(self.now, w.write_id, error))

    def answered(self, token: int) -> bool:
        return token in self.responses

    def state(self, group: str = "g") -> str | None:
        info = self.sm.inspect(group)
        return info["state"] if info else None

    def info(self, group: str = "g") -> dict:
        info = self.sm.inspect(group)
        assert info is not None
        return info

    def stable_group(self, n: int, **join_kwargs) -> list[JoinResult]:
        """n dynamic members, rebalanced and synced: returns their join results (join order)."""
        tokens = [self.join(**join_kwargs) for _ in range(n)]
        # the initial delay is extended while members keep arriving
        while not all(self.answered(t) for t in tokens):
            self.advance(self.sm.config.initial_rebalance_delay_ms)
        results = [self.responses[t] for t in tokens]
        assert all(isinstance(r, JoinResult) and r.error == NONE for r in results)
        leader = next(r for r in results if r.member_id == r.leader_id)
        assignment = {r.member_id: f"a-{r.member_id}".encode() for r in results}
        self.sync(leader.member_id, leader.generation_id, assignment)
        self.persist_all()
        for r in results:
            if r is not leader:
                self.sync(r.member_id, r.generation_id)
        assert self.state() == "Stable"
        return results


# ---------------------------------------------------------------------------------------------
# JoinGroup validation
# ---------------------------------------------------------------------------------------------


def test_empty_group_id_is_invalid_everywhere():
    h = Harness()
    t = h.join(group="")
    assert h.responses[t].error == E.invalid_group_id.value
    t = h.sync("m", 1, group="")
    assert h.responses[t].error == E.invalid_group_id.value
    assert h.heartbeat("m", 1, group="") == E.invalid_group_id.value
    assert h.leave(("m", None), group="")[0] == E.invalid_group_id.value
    assert h.sm.validate_txn_offset_commit("", -1, "", None) == E.invalid_group_id.value
    # OffsetCommit keeps accepting the empty group id (old consumers used it).
    assert h.sm.validate_offset_commit("", -1, "", None, 0) == NONE


@pytest.mark.parametrize("session", [5999, 1800001])
def test_session_timeout_outside_bounds(session):
    h = Harness()
    t = h.join(session=session, member_id="")
    assert h.responses[t] == JoinResult(E.invalid_session_timeout.value)
    assert h.sm.inspect("g") is None  # rejected before the group exists


def test_known_member_id_for_unknown_group():
    h = Harness()
    t = h.join(member_id="ghost")
    assert h.responses[t] == JoinResult(E.unknown_member_id.value, member_id="ghost")
    assert h.sm.inspect("g") is None


def test_inconsistent_protocols():
    h = Harness()
    t = h.join(protocols=[])
    assert h.responses[t].error == E.inconsistent_group_protocol.value
    t = h.join(ptype="")
    assert h.responses[t].error == E.inconsistent_group_protocol.value
    a = h.join(protocols=[("range", b"")])
    b = h.join(protocols=[("roundrobin", b"")])  # nothing in common with the member
    assert h.responses[b] == JoinResult(E.inconsistent_group_protocol.value)
    c = h.join(ptype="connect", protocols=[("range", b"")])  # other protocol type
    assert h.responses[c].error == E.inconsistent_group_protocol.value
    assert not h.answered(a)


# ---------------------------------------------------------------------------------------------
# First rebalance, initial delay, protocol selection
# ---------------------------------------------------------------------------------------------


def test_first_member_waits_for_initial_delay_then_leads():
    h = Harness()
    t = h.join(client="alice")
    assert h.state() == "PreparingRebalance"
    assert not h.answered(t)
    assert h.last.wake_at_ms == 3000
    h.advance(2999)
    assert not h.answered(t)
    h.advance(1)
    r = h.responses[t]
    assert r.error == NONE and r.generation_id == 1
    assert r.member_id.startswith("alice-") and r.leader_id == r.member_id
    assert r.protocol_type == "consumer" and r.protocol_name == "range"
    assert r.members == [(r.member_id, None, b"range-meta")]
    assert h.state() == "CompletingRebalance"


def test_initial_delay_is_extended_by_new_members_up_to_rebalance_timeout():
    h = Harness()
    a = h.join(rebalance=10000)  # remaining after first delay: 7000
    h.advance(1000)
    b = h.join(rebalance=10000)
    h.advance(2000)  # t=3000: a member arrived during the delay -> wait min(3000, 7000)
    assert not h.answered(a) and not h.answered(b)
    assert h.info()["join_deadline_ms"] == 6000
    h.advance(2999)
    assert not h.answered(a)
    h.advance(1)
    assert h.responses[a].error == NONE and h.responses[b].error == NONE
    assert h.responses[a].leader_id == h.responses[a].member_id  # first to join leads
    assert h.responses[b].members == []  # only the leader gets the member list


def test_initial_delay_does_not_complete_early_even_if_everyone_joined():
    h = Harness()
    a = h.join()
    assert h.info()["join_deadline_ms"] == 3000
    h.advance(100)
    assert not h.answered(a)


def test_initial_delay_extension_is_capped_by_rebalance_timeout():
    h = Harness()
    a = h.join(rebalance=4000)  # remaining = 1000
    h.advance(10)
    h.join(rebalance=4000)
    h.advance(2990)  # t=3000 -> extend by min(3000, 1000)
    assert h.info()["join_deadline_ms"] == 4000
    h.join(rebalance=4000)
    h.advance(1000)  # remaining is now 0: no more extension
    assert h.responses[a].error == NONE


def test_protocol_selection_by_votes_among_common_protocols():
    h = Harness()
    a = h.join(protocols=[("range", b"1"), ("sticky", b"1"), ("rr", b"1")])
    b = h.join(protocols=[("sticky", b"2"), ("range", b"2")])
    c = h.join(protocols=[("sticky", b"3"), ("range", b"3"), ("rr", b"3")])
    h.advance(20000)
    # candidates: range, sticky (rr is not supported by b); votes: range 1, sticky 2
    for t in (a, b, c):
        assert h.responses[t].protocol_name == "sticky"
    leader = h.responses[a]
    assert [m[2] for m in leader.members] == [b"1", b"2", b"3"]  # each member's sticky metadata


def test_protocol_tie_goes_to_earliest_member_vote():
    h = Harness()
    a = h.join(protocols=[("x", b""), ("y", b"")])
    h.join(protocols=[("y", b""), ("x", b"")])
    h.advance(6000)
    assert h.responses[a].protocol_name == "x"


# ---------------------------------------------------------------------------------------------
# MEMBER_ID_REQUIRED (KIP-394)
# ---------------------------------------------------------------------------------------------


def test_member_id_required_then_rejoin():
    h = Harness()
    t = h.join(v4=True, client="cli")
    r = h.responses[t]
    assert r.error == E.member_id_required.value and r.member_id.startswith("cli-")
    assert h.state() == "Empty"
    assert r.member_id in h.info()["pending_members"]
    t2 = h.join(member_id=r.member_id, v4=True)
    assert h.state() == "PreparingRebalance"
    h.advance(6000)
    assert h.responses[t2].error == NONE and h.responses[t2].member_id == r.member_id
    assert h.info()["pending_members"] == {}


def test_pending_member_expires_after_session_timeout():
    h = Harness()
    t = h.join(v4=True, session=7000)
    mid = h.responses[t].member_id
    h.advance(6999)
    assert mid in h.info()["pending_members"]
    h.advance(1)
    assert h.info()["pending_members"] == {}
    t2 = h.join(member_id=mid, v4=True)
    assert h.responses[t2].error == E.unknown_member_id.value


def test_pending_member_holds_back_rebalance_until_it_joins_or_expires():
    h = Harness()
    (a,) = h.stable_group(1)
    p = h.join(v4=True, session=6000)  # a new member, pending
    pending_id = h.responses[p].member_id
    ra = h.join(member_id=a.member_id)  # leader rejoin starts a rebalance
    assert h.state() == "PreparingRebalance"
    assert not h.answered(ra)  # all known members joined, but a pending member exists
    h.advance(6000)  # the pending member expires -> the rebalance completes
    assert h.responses[ra].error == NONE and h.responses[ra].generation_id == 2
    assert pending_id not in [m[0] for m in h.responses[ra].members]


# ---------------------------------------------------------------------------------------------
# Rebalances of a live group
# ---------------------------------------------------------------------------------------------


def test_new_member_triggers_rebalance_and_completes_when_all_rejoined():
    h = Harness()
    a, b = h.stable_group(2)
    c = h.join(client="late")
    assert h.state() == "PreparingRebalance"
    assert h.heartbeat(a.member_id, 1) == E.rebalance_in_progress.value
    ra = h.join(member_id=a.member_id)
    assert not h.answered(ra)
    rb = h.join(member_id=b.member_id)
    # every known member has rejoined: no need to wait for the rebalance timeout
    for t in (ra, rb, c):
        assert h.responses[t].error == NONE and h.responses[t].generation_id == 2
    assert h.responses[ra].leader_id == a.member_id  # the leader stays while it remains
    assert len(h.responses[ra].members) == 3


def test_members_that_do_not_rejoin_are_removed_at_rebalance_timeout():
    h = Harness()
    a, b = h.stable_group(2, rebalance=15000)
    rb = h.join(member_id=b.member_id, protocols=[("range", b"changed")], rebalance=15000)
    assert h.state() == "PreparingRebalance"
    for _ in range(2):  # a keeps its session alive but does not rejoin
        h.advance(7000)
        assert h.heartbeat(a.member_id, 1) == E.rebalance_in_progress.value
    h.advance(999)
    assert not h.answered(rb)
    h.advance(1)
    r = h.responses[rb]
    assert r.error == NONE and r.generation_id == 2
    assert r.leader_id == b.member_id  # the old leader did not rejoin: a joined member leads
    assert [m[0] for m in r.members] == [b.member_id]
    assert h.heartbeat(a.member_id, 1) == E.unknown_member_id.value


def test_stable_follower_join_with_same_metadata_gets_current_generation():
    h = Harness()
    a, b = h.stable_group(2)
    t = h.join(member_id=b.member_id)
    r = h.responses[t]
    assert r.error == NONE and r.generation_id == 1 and r.leader_id == a.member_id and r.members == []
    assert h.state() == "Stable"


def test_stable_follower_with_changed_metadata_triggers_rebalance():
    h = Harness()
    a, b = h.stable_group(2)
    t = h.join(member_id=b.member_id, protocols=[("range", b"other")])
    assert not h.answered(t) and h.state() == "PreparingRebalance"


def test_stable_leader_join_triggers_rebalance_even_with_same_metadata():
    h = Harness()
    a, b = h.stable_group(2)
    t = h.join(member_id=a.member_id)
    assert not h.answered(t) and h.state() == "PreparingRebalance"


def test_completing_rebalance_rejoin_with_same_metadata_repeats_answer():
    h = Harness()
    a = h.join()
    b = h.join()
    h.advance(6000)
    ra, rb = h.responses[a], h.responses[b]
    t = h.join(member_id=ra.member_id)
    assert h.responses[t] == ra  # the leader gets the member list again
    t = h.join(member_id=rb.member_id)
    assert h.responses[t] == rb
    assert h.state() == "CompletingRebalance"
    t = h.join(member_id=rb.member_id, protocols=[("range", b"new")])
    assert not h.answered(t) and h.state() == "PreparingRebalance"


def test_duplicate_join_while_parked_answers_the_older_request():
    h = Harness()
    a, b = h.stable_group(2)
    t1 = h.join(member_id=b.member_id, protocols=[("range", b"x")])
    t2 = h.join(member_id=b.member_id, protocols=[("range", b"x")])
    assert h.responses[t1] == JoinResult(E.coordinator_not_available.value, member_id=b.member_id)
    assert not h.answered(t2)
    ta = h.join(member_id=a.member_id)
    assert h.responses[t2].error == NONE and h.responses[ta].error == NONE


def test_group_max_size():
    h = Harness(max_size=2)
    h.join()
    h.join()
    t = h.join()
    assert h.responses[t] == JoinResult(E.group_max_size_reached.value)
    h.advance(6000)
    t = h.join()  # CompletingRebalance counts members
    assert h.responses[t].error == E.group_max_size_reached.value


def test_over_capacity_preparing_group_sheds_members_that_rejoin_last():
    h = Harness(max_size=2)
    a, b = h.stable_group(2)
    h.sm.config.max_size = 1  # the limit was lowered
    ta = h.join(member_id=a.member_id)  # 0 awaiting < 1: accepted, rebalance starts
    tb = h.join(member_id=b.member_id)  # 1 awaiting: b is shed
    assert h.responses[tb] == JoinResult(E.group_max_size_reached.value)
    assert h.responses[ta].error == NONE and h.responses[ta].members == [(a.member_id, None, b"range-meta")]


# ---------------------------------------------------------------------------------------------
# SyncGroup and the durable write before answering
# ---------------------------------------------------------------------------------------------


def test_sync_answers_only_after_assignment_is_durable():
    h = Harness()
    a = h.join()
    b = h.join()
    c = h.join()
    h.advance(6000)
    ra, rb, rc = (h.responses[t] for t in (a, b, c))
    sb = h.sync(rb.member_id, 1)
    assert not h.answered(sb)
    sa = h.sync(ra.member_id, 1, {ra.member_id: b"A", rb.member_id: b"B", "stranger": b"?"})
    assert not h.answered(sa) and not h.answered(sb)
    assert len(h.writes) == 1
    w = h.writes[0]
    assert w.record.generation_id == 1 and w.record.leader_id == ra.member_id
    # rc was left out by the leader: empty assignment; unknown ids are not stored
    assert {m.member_id: m.assignment for m in w.record.members} == {
        ra.member_id: b"A", rb.member_id: b"B", rc.member_id: b""}
    assert h.state() == "CompletingRebalance"
    h.persist_all()
    assert h.responses[sa] == SyncResult(NONE, "consumer", "range", b"A")
    assert h.responses[sb] == SyncResult(NONE, "consumer", "range", b"B")
    assert h.state() == "Stable"
    sc = h.sync(rc.member_id, 1)  # Stable: answered at once with the stored assignment
    assert h.responses[sc] == SyncResult(NONE, "consumer", "range", b"")
    assert h.info()["pending_sync"] == []


def test_sync_write_failure_propagates_error_and_rebalances():
    h = Harness()
    a = h.join()
    b = h.join()
    h.advance(6000)
    ra, rb = h.responses[a], h.responses[b]
    sb = h.sync(rb.member_id, 1)
    sa = h.sync(ra.member_id, 1, {ra.member_id: b"A", rb.member_id: b"B"})
    h.persist_all(error=E.not_coordinator.value)
    assert h.responses[sa] == SyncResult(E.not_coordinator.value)
    assert h.responses[sb] == SyncResult(E.not_coordinator.value)
    assert h.state() == "PreparingRebalance"


def test_write_completing_after_group_moved_on_is_ignored():
    h = Harness()
    a = h.join()
    h.join()
    h.advance(6000)
    ra = h.responses[a]
    sa = h.sync(ra.member_id, 1, {ra.member_id: b"A"})
    late = h.join(client="late")  # rebalance starts while the write is in flight
    assert h.responses[sa].error == E.rebalance_in_progress.value
    h.persist_all()
    assert h.state() == "PreparingRebalance" and not h.answered(late)


def test_sync_errors():
    h = Harness()
    assert h.responses[h.sync("m", 0)].error == E.unknown_member_id.value  # no group
    a, b = h.stable_group(2)
    assert h.responses[h.sync("nobody", 1)].error == E.unknown_member_id.value
    assert h.responses[h.sync(b.member_id, 7)].error == E.illegal_generation.value
    assert h.responses[h.sync(b.member_id, 1, ptype="connect")].error == E.inconsistent_group_protocol.value
    assert h.responses[h.sync(b.member_id, 1, pname="roundrobin")].error == E.inconsistent_group_protocol.value
    ok = h.sync(b.member_id, 1, ptype="consumer", pname="range")
    assert h.responses[ok] == SyncResult(NONE, "consumer", "range", f"a-{b.member_id}".encode())
    h.join(client="late")
    assert h.responses[h.sync(b.member_id, 1)].error == E.rebalance_in_progress.value


def test_followers_that_never_sync_are_removed_after_rebalance_timeout():
    h = Harness()
    a = h.join(rebalance=8000)
    b = h.join(rebalance=8000)
    h.advance(6000)
    ra, rb = h.responses[a], h.responses[b]
    sa = h.sync(ra.member_id, 1, {ra.member_id: b"A", rb.member_id: b"B"})
    h.persist_all()
    assert h.responses[sa].error == NONE
    assert h.heartbeat(rb.member_id, 1) == NONE  # heartbeats do not replace the SyncGroup
    h.advance(7999)
    assert h.state() == "Stable"
    h.advance(1)
    assert h.state() == "PreparingRebalance"
    assert h.heartbeat(rb.member_id, 1) == E.unknown_member_id.value


# ---------------------------------------------------------------------------------------------
# Heartbeats and session expiry
# ---------------------------------------------------------------------------------------------


def test_heartbeat_errors_and_states():
    h = Harness()
    assert h.heartbeat("x", 0) == E.unknown_member_id.value
    a = h.join()
    h.advance(6000)
    ra = h.responses[a]
    assert h.heartbeat(ra.member_id, 1) == NONE  # CompletingRebalance
    assert h.heartbeat(ra.member_id, 0) == E.illegal_generation.value
    assert h.heartbeat("x", 1) == E.unknown_member_id.value


def test_heartbeat_keeps_member_alive_and_silence_expires_it():
    h = Harness()
    a, b = h.stable_group(2, session=10000)
    for _ in range(5):
        h.advance(9000)
        assert h.heartbeat(a.member_id, 1) == NONE
        if h.state() == "Stable":
            assert h.heartbeat(b.member_id, 1) == NONE
    assert h.state() == "Stable"
    h.advance(9000)
    assert h.heartbeat(a.member_id, 1) == NONE
    h.advance(1000)  # b was silent for 10 s
    assert h.state() == "PreparingRebalance"
    assert h.heartbeat(b.member_id, 1) == E.unknown_member_id.value
    assert h.heartbeat(a.member_id, 1) == E.rebalance_in_progress.value


def test_parked_join_is_not_expired_by_session_timeout():
    h = Harness()
    a, b = h.stable_group(2, session=6000, rebalance=60000)
    # b parks its JoinGroup (changed metadata: a real rebalance)
    rb = h.join(member_id=b.member_id, session=6000, rebalance=60000, protocols=[("range", b"new")])
    for _ in range(5):  # the leader keeps heartbeating but does not rejoin yet
        h.advance(5000)
        assert h.heartbeat(a.member_id, 1) == E.rebalance_in_progress.value
    assert b.member_id in [m["member_id"] for m in h.info()["members"]]
    ra = h.join(member_id=a.member_id, session=6000, rebalance=60000)
    assert h.responses[ra].error == NONE and h.responses[rb].error == NONE


def test_new_member_parked_too_long_is_removed():
    h = Harness()
    (a,) = h.stable_group(1, session=10000, rebalance=600000)
    t = h.join(client="new", rebalance=600000)
    for _ in range(32):  # the leader heartbeats but never rejoins
        h.advance(9500)
        h.heartbeat(a.member_id, 1)
    assert h.responses[t] == JoinResult(E.unknown_member_id.value)
    assert h.now >= 300000


def test_last_member_expiring_empties_group_and_persists_it():
    h = Harness()
    (a,) = h.stable_group(1, session=6000)
    h.writes.clear()
    h.advance(6000)
    info = h.info()
    assert info["state"] == "Empty" and info["generation_id"] == 2 and info["members"] == []
    assert info["leader_id"] is None and info["protocol_name"] is None
    assert [w.record.generation_id for w in h.writes] == [2]
    assert h.writes[0].record.members == ()


# ---------------------------------------------------------------------------------------------
# LeaveGroup
# ---------------------------------------------------------------------------------------------


def test_leave_unknown_group_and_member():
    h = Harness()
    assert h.leave(("a", None), ("b", None)) == (NONE, [E.unknown_member_id.value] * 2)
    h.stable_group(1)
    assert h.leave(("zz", None)) == (NONE, [E.unknown_member_id.value])
    assert h.state() == "Stable"


def test_leader_leave_rebalances_and_elects_next_member():
    h = Harness()
    a, b, c = h.stable_group(3)
    assert h.leave((a.member_id, None)) == (NONE, [NONE])
    assert h.state() == "PreparingRebalance"
    assert h.info()["leader_id"] == b.member_id
    tb = h.join(member_id=b.member_id)
    tc = h.join(member_id=c.member_id)
    assert h.responses[tb].leader_id == b.member_id and h.responses[tc].generation_id == 2


def test_leave_completes_pending_rebalance_and_answers_leaver():
    h = Harness()
    a, b = h.stable_group(2)
    ta = h.join(member_id=a.member_id)
    tb_sync = h.sync(b.member_id, 1)  # b is still answered in Stable, then leaves
    assert h.responses[tb_sync].error == E.rebalance_in_progress.value
    h.leave((b.member_id, None))
    # the leave made "all members joined" true: a's join is answered in that call
    assert ta in h.last.responses and h.responses[ta].generation_id == 2


def test_leaving_member_parked_join_gets_unknown_member_id():
    h = Harness()
    a, b = h.stable_group(2)
    tb = h.join(member_id=b.member_id, protocols=[("range", b"z")])
    h.leave((b.member_id, None))
    assert h.responses[tb] == JoinResult(E.unknown_member_id.value)


def test_last_member_leaving_stable_group_makes_it_empty():
    h = Harness()
    (a,) = h.stable_group(1)
    h.writes.clear()
    h.leave((a.member_id, None))
    assert h.state() == "Empty" and h.info()["generation_id"] == 2
    assert len(h.writes) == 1


def test_pending_member_can_leave():
    h = Harness()
    t = h.join(v4=True)
    mid = h.responses[t].member_id
    assert h.leave((mid, None)) == (NONE, [NONE])
    assert h.info()["pending_members"] == {}


# ---------------------------------------------------------------------------------------------
# Static membership (KIP-345)
# ---------------------------------------------------------------------------------------------


def _static_group(h: Harness, *instances: str, **kw) -> list[JoinResult]:
    tokens = [h.join(instance=i, client=i, v4=True, **kw) for i in instances]
    h.advance(6000)
    results = [h.responses[t] for t in tokens]
    leader = results[0]
    h.sync(leader.member_id, 1, {r.member_id: r.member_id.encode() for r in results}, instance=instances[0])
    h.persist_all()
    for r, i in zip(results[1:], instances[1:], strict=True):
        h.sync(r.member_id, 1, instance=i)
    assert h.state() == "Stable"
    return results


def test_static_member_joins_without_member_id_required():
    h = Harness()
    t = h.join(instance="i1", v4=True)
    assert not h.answered(t) and h.state() == "PreparingRebalance"
    assert h.info()["static_members"] == {"i1": h.info()["members"][0]["member_id"]}


def test_static_rejoin_in_stable_replaces_id_without_rebalance_after_persist():
    h = Harness()
    a, b = _static_group(h, "i1", "i2")
    t = h.join(instance="i2", v4=True)  # i2 restarted and lost its member id
    assert not h.answered(t)
    assert h.state() == "Stable"
    (w,) = h.writes
    new_id = h.info()["static_members"]["i2"]
    assert new_id != b.member_id
    assert {m.member_id for m in w.record.members} == {a.member_id, new_id}
    assert {m.member_id: m.assignment for m in w.record.members}[new_id] == b.member_id.encode()
    h.persist_all()
    r = h.responses[t]
    assert r == JoinResult(NONE, 1, "consumer", "range", a.member_id, new_id, [], False)
    assert h.state() == "Stable"
    # the new id syncs and gets the old id's assignment
    s = h.sync(new_id, 1, instance="i2")
    assert h.responses[s].assignment == b.member_id.encode()
    # the old id is fenced
    assert h.heartbeat(b.member_id, 1, instance="i2") == E.fenced_instance_id.value
    assert h.heartbeat(b.member_id, 1) == E.unknown_member_id.value
    assert h.responses[h.sync(b.member_id, 1, instance="i2")].error == E.fenced_instance_id.value
    assert h.responses[h.join(member_id=b.member_id, instance="i2")].error == E.fenced_instance_id.value
    assert h.sm.validate_offset_commit("g", 1, b.member_id, "i2", h.now) == E.fenced_instance_id.value
    assert h.leave((b.member_id, "i2")) == (NONE, [E.fenced_instance_id.value])


def test_static_leader_rejoin_reports_old_leader_unless_skip_assignment():
    h = Harness()
    a, b = _static_group(h, "i1", "i2")
    t = h.join(instance="i1", v4=True)
    h.persist_all()
    r = h.responses[t]
    assert r.error == NONE and r.leader_id == a.member_id != r.member_id and r.members == []
    # JoinGroup v9+: told it is the leader, with the members, but to skip the assignment
    t = h.join(instance="i1", v4=True, skip=True)
    h.persist_all()
    r2 = h.responses[t]
    assert r2.skip_assignment and r2.leader_id == r2.member_id and len(r2.members) == 2


def test_static_rejoin_persist_failure_reverts_to_old_id():
    h = Harness()
    a, b = _static_group(h, "i1", "i2")
    t = h.join(instance="i2", v4=True, protocols=[("range", b"new")])
    h.persist_all(error=E.coordinator_not_available.value)
    r = h.responses[t]
    assert r.error == E.coordinator_not_available.value and r.member_id == ""
    assert h.info()["static_members"]["i2"] == b.member_id
    assert h.heartbeat(b.member_id, 1, instance="i2") == NONE
    member = next(m for m in h.info()["members"] if m["member_id"] == b.member_id)
    assert member["protocols"] == RANGE


def test_static_rejoin_changing_selected_protocol_rebalances():
    h = Harness()
    _static_group(h, "i1", protocols=[("range", b""), ("rr", b"")])
    t = h.join(instance="i1", v4=True, protocols=[("rr", b"")])
    # no write: a rebalance instead, complete at once since the only member has joined
    assert h.writes == [] and h.state() == "CompletingRebalance"
    assert h.responses[t].protocol_name == "rr" and h.responses[t].generation_id == 2


def test_static_rejoin_in_completing_rebalance_fences_parked_sync_and_rebalances():
    h = Harness()
    a = h.join(instance="i1")
    b = h.join(instance="i2")
    h.advance(6000)
    rb = h.responses[b]
    sb = h.sync(rb.member_id, 1, instance="i2")
    t = h.join(instance="i2")  # duplicate instance with a fresh start
    assert h.responses[sb].error == E.fenced_instance_id.value
    assert h.state() == "PreparingRebalance"
    ra = h.join(member_id=h.responses[a].member_id, instance="i1")
    assert h.responses[t].error == NONE and h.responses[ra].generation_id == 2


def test_static_rejoin_in_preparing_fences_old_parked_join():
    h = Harness()
    a, b = _static_group(h, "i1", "i2")
    t1 = h.join(member_id=b.member_id, instance="i2", protocols=[("range", b"z")])
    t2 = h.join(instance="i2", protocols=[("range", b"z")])
    assert h.responses[t1] == JoinResult(E.fenced_instance_id.value, member_id=b.member_id)
    ta = h.join(member_id=a.member_id, instance="i1")
    assert h.responses[t2].error == NONE and h.responses[ta].generation_id == 2


def test_static_member_that_does_not_rejoin_stays_until_session_expires():
    h = Harness()
    a, b = _static_group(h, "i1", "i2", session=20000, rebalance=5000)
    ta = h.join(member_id=a.member_id, instance="i1", session=20000, rebalance=5000)
    h.advance(5000)  # rebalance timeout: i2 has not rejoined but is static: kept
    r = h.responses[ta]
    assert r.error == NONE and {m[0] for m in r.members} == {a.member_id, b.member_id}
    h.heartbeat(a.member_id, 2, instance="i1")
    h.advance(15000)
    h.heartbeat(a.member_id, 2, instance="i1")
    h.advance(5000)  # rebalance timeout for the sync: i2 (and i1, who did not sync) are out
    assert b.member_id not in [m["member_id"] for m in h.info()["members"]]


def test_leave_static_member_by_instance_id():
    h = Harness()
    a, b = _static_group(h, "i1", "i2")
    assert h.leave(("", "i2"), ("", "nope")) == (NONE, [NONE, E.unknown_member_id.value])
    assert h.state() == "PreparingRebalance"
    assert "i2" not in h.info()["static_members"]


# ---------------------------------------------------------------------------------------------
# Offset commit validation
# ---------------------------------------------------------------------------------------------


def test_simple_commit_creates_empty_group():
    h = Harness()
    assert h.sm.validate_offset_commit("simple", -1, "", None, 5) == NONE
    assert h.sm.describe("simple").state == "Empty"
    assert h.sm.validate_offset_commit("other", 3, "m", None, 5) == E.illegal_generation.value
    assert h.sm.validate_offset_commit("other", 3, "m", None, 5, api_version=9) == E.group_id_not_found.value
    assert h.sm.inspect("other") is None
    # Without a generation, an Empty group takes the commit whatever member id comes
    # with it (Kafka's ClassicGroup.validateOffsetCommit); with one, the member is checked.
    assert h.sm.validate_offset_commit("simple", -1, "m", None, 5) == NONE
    assert h.sm.validate_txn_offset_commit("simple", -1, "m", None, 5) == NONE
    assert h.sm.validate_offset_commit("simple", 0, "m", None, 5) == E.unknown_member_id.value


def test_commit_validation_for_a_live_group():
    h = Harness()
    a = h.join()
    h.join()
    h.advance(6000)
    ra = h.responses[a]
    assert h.sm.validate_offset_commit("g", 1, ra.member_id, None, h.now) == E.rebalance_in_progress.value
    assert h.sm.validate_offset_commit("g", -1, "", None, h.now) == E.unknown_member_id.value
    assert h.sm.validate_txn_offset_commit("g", -1, "", None) == NONE  # old TxnOffsetCommit
    assert h.sm.validate_txn_offset_commit("g", 1, ra.member_id, None) == NONE  # allowed mid-rebalance
    h.sync(ra.member_id, 1, {})
    h.persist_all()
    assert h.sm.validate_offset_commit("g", 1, ra.member_id, None, h.now) == NONE
    assert h.sm.validate_offset_commit("g", 0, ra.member_id, None, h.now) == E.illegal_generation.value
    assert h.sm.validate_offset_commit("g", 1, "x", None, h.now) == E.unknown_member_id.value
    assert h.sm.validate_txn_offset_commit("g", 0, ra.member_id, None) == E.illegal_generation.value


def test_txn_offset_commit_member_and_generation_checks_follow_kafka_4():
    """Kafka 4's OffsetMetadataManager.validateTransactionalOffsetCommit: an unknown group
    with a generation is ILLEGAL_GENERATION (no member check, nothing created);
    ClassicGroup.validateOffsetCommit: once a member id or generation is given the
    member is checked first, then the generation, even when it is -1."""
    h = Harness()
    assert h.sm.validate_txn_offset_commit("nogroup", 3, "m", None) == E.illegal_generation.value
    assert h.sm.inspect("nogroup") is None
    a, _b = h.stable_group(2)
    assert h.sm.validate_txn_offset_commit("g", 7, "nobody", None) == E.unknown_member_id.value
    assert h.sm.validate_txn_offset_commit("g", -1, a.member_id, None) == E.illegal_generation.value
    assert h.sm.validate_txn_offset_commit("g", 0, a.member_id, None) == E.illegal_generation.value
    assert h.sm.validate_txn_offset_commit("g", 1, a.member_id, None) == NONE


def test_commit_counts_as_heartbeat():
    h = Harness()
    a, b = h.stable_group(2, session=10000)
    for _ in range(3):
        h.advance(8000)
        assert h.sm.validate_offset_commit("g", 1, a.member_id, None, h.now) == NONE
        assert h.heartbeat(b.member_id, 1) == NONE
    assert h.state() == "Stable"


# ---------------------------------------------------------------------------------------------
# Describe, list, delete, offset delete, expiry rule
# ---------------------------------------------------------------------------------------------


def test_describe_and_list():
    h = Harness()
    assert h.sm.describe("nope").state == "Dead" and not h.sm.describe("nope").exists
    a, b = h.stable_group(2)
    d = h.sm.describe("g")
    assert (d.state, d.protocol_type, d.protocol_data) == ("Stable", "consumer", "range")
    assert [(m.member_id, m.metadata, m.assignment) for m in d.members] == [
        (a.member_id, b"range-meta", f"a-{a.member_id}".encode()),
        (b.member_id, b"range-meta", f"a-{b.member_id}".encode()),
    ]
    assert d.members[0].client_id == "c" and d.members[0].client_host == "/127.0.0.1"
    h.join(client="late")
    d = h.sm.describe("g")
    assert d.state == "PreparingRebalance" and d.protocol_data == ""
    assert all(m.metadata == b"" and m.assignment == b"" for m in d.members)
    h.sm.validate_offset_commit("simple", -1, "", None, 0)
    assert {(x.group_id, x.state, x.protocol_type) for x in h.sm.list_groups()} == {
        ("g", "PreparingRebalance", "consumer"), ("simple", "Empty", "")}
    assert [x.group_id for x in h.sm.list_groups(["empty"])] == ["simple"]
    assert [x.group_id for x in h.sm.list_groups(["Stable", "PreparingRebalance"])] == ["g"]


def test_delete_group():
    h = Harness()
    assert h.sm.delete_group("g") == E.group_id_not_found.value
    (a,) = h.stable_group(1)
    assert h.sm.delete_group("g") == E.non_empty_group.value
    h.leave((a.member_id, None))
    assert h.sm.delete_group("g") == NONE
    assert h.sm.inspect("g") is None and h.sm.describe("g").state == "Dead"


def test_offset_delete_validation_uses_consumer_subscriptions():
    h = Harness()
    assert h.sm.validate_offset_delete("nope", ["t"]) == (E.group_id_not_found.value, {})
    sub = [("range", consumer_subscription("orders", "payments"))]
    h.stable_group(1, protocols=sub)
    assert h.sm.validate_offset_delete("g", ["orders", "old"]) == (
        NONE, {"orders": E.group_subscribed_to_topic.value, "old": NONE})
    h.join(ptype="connect", group="c", protocols=[("p", b"")])
    h.advance(6000)
    assert h.sm.validate_offset_delete("c", ["t"]) == (E.non_empty_group.value, {})
    h.sm.validate_offset_commit("simple", -1, "", None, 0)
    assert h.sm.validate_offset_delete("simple", ["t"]) == (NONE, {"t": NONE})


def test_unparseable_subscription_counts_as_subscribed():
    h = Harness()
    h.stable_group(1, protocols=[("range", b"\x00")])
    assert h.sm.validate_offset_delete("g", ["x"]) == (NONE, {"x": E.group_subscribed_to_topic.value})


def test_offset_expiry_rules():
    h = Harness()
    assert h.sm.offset_expiry_rule("unknown") == ExpiryRule()
    h.sm.validate_offset_commit("simple", -1, "", None, 5)
    assert h.sm.offset_expiry_rule("simple") == ExpiryRule()  # no protocol type: from commit
    (a,) = h.stable_group(1, protocols=[("range", consumer_subscription("t1"))])
    assert h.sm.offset_expiry_rule("g") == ExpiryRule(keep_topics=frozenset({"t1"}))
    h.join(client="late")
    assert h.sm.offset_expiry_rule("g") is None  # rebalancing: nothing expires
    h.now = 123456
    h.leave((a.member_id, None))  # the late member alone: its rebalance completes at once
    assert h.state() == "CompletingRebalance"
    h.advance(20000)  # it neither syncs nor heartbeats: its 10 s session expires
    assert h.state() == "Empty"
    assert h.sm.offset_expiry_rule("g") == ExpiryRule(base_ms=123456 + 10000)


def test_cleanup_removes_empty_groups_without_offsets():
    h = Harness()
    h.sm.validate_offset_commit("a", -1, "", None, 0)
    h.sm.validate_offset_commit("b", -1, "", None, 0)
    h.stable_group(1)
    assert h.sm.cleanup_groups(lambda g: g == "b") == ["a"]
    assert sorted(h.sm.group_ids()) == ["b", "g"]


# ---------------------------------------------------------------------------------------------
# Persisted records and loading
# ---------------------------------------------------------------------------------------------


def test_load_from_record_restores_stable_group():
    h = Harness()
    a, b = h.stable_group(2)
    record = h.sm.group_metadata_record("g")
    assert record is not None and record.generation_id == 1
    h2 = Harness()
    h2.now = 1000
    h2.absorb(h2.sm.load_group("g", decode_group_metadata_value(encode_group_metadata_value(record)), h2.now))
    info = h2.info()
    assert info["state"] == "Stable" and info["generation_id"] == 1 and info["leader_id"] == a.member_id
    s = h2.sync(b.member_id, 1)
    assert h2.responses[s] == SyncResult(NONE, "consumer", "range", f"a-{b.member_id}".encode())
    h2.advance(9000)
    assert h2.heartbeat(a.member_id, 1) == NONE
    h2.advance(1000)  # b was silent since its SyncGroup
    assert h2.state() == "PreparingRebalance"
    # a tombstone removes the group
    h2.absorb(h2.sm.load_group("g", None, h2.now))
    assert h2.sm.inspect("g") is None


def test_replay_of_emitted_records_rebuilds_the_group():
    log = []
    # collect every record the state machine asked to write, in order
    h2 = Harness()
    tokens = [h2.join() for _ in range(2)]
    h2.advance(6000)
    r = [h2.responses[t] for t in tokens]
    h2.sync(r[0].member_id, 1, {r[0].member_id: b"x"})
    log.extend(h2.writes)
    h2.persist_all()
    h3 = Harness()
    for w in log:
        assert h3.sm.replay(w.key, w.value, 0) is not None
    assert h3.sm.group_metadata_record("g") == h2.sm.group_metadata_record("g")


def test_load_over_capacity_group_rebalances():
    h = Harness()
    h.stable_group(3)
    record = h.sm.group_metadata_record("g")
    h2 = Harness(max_size=2)
    h2.absorb(h2.sm.load_group("g", record, 0))
    assert h2.state() == "PreparingRebalance"


def test_repeated_leader_sync_waits_for_the_first_write():
    h = Harness()
    a = h.join()
    h.advance(3000)
    ra = h.responses[a]
    s1 = h.sync(ra.member_id, 1, {ra.member_id: b"first"})
    s2 = h.sync(ra.member_id, 1, {ra.member_id: b"second"})
    # one record per generation: memory and log cannot disagree
    assert len(h.writes) == 1
    assert h.responses[s1].error == E.rebalance_in_progress.value
    h.persist_all()
    assert h.responses[s2].assignment == b"first"


def test_write_of_a_deleted_group_does_not_touch_its_successor():
    h = Harness()
    a = h.join()
    h.advance(3000)
    ra = h.responses[a]
    h.sync(ra.member_id, 1, {ra.member_id: b"x"})
    stale = h.writes.pop()
    h.leave((ra.member_id, None))
    assert h.sm.delete_group("g") == NONE
    b = h.join()
    h.advance(3000)
    rb = h.responses[b]
    sb = h.sync(rb.member_id, 1, {rb.member_id: b"y"})
    h.absorb(h.sm.group_persisted(h.now, stale.write_id))
    assert not h.answered(sb) and h.state() == "CompletingRebalance"
    h.persist_all()
    assert h.responses[sb].assignment == b"y"


def test_loading_over_a_live_group_answers_its_parked_requests():
    h = Harness()
    a, b = h.stable_group(2)
    record = h.sm.group_metadata_record("g")
    tj = h.join(member_id=b.member_id, protocols=[("range", b"new")])
    h.absorb(h.sm.load_group("g", record, h.now))
    assert h.responses[tj].error == E.coordinator_load_in_progress.value
    assert h.state() == "Stable"


def test_late_tick_fires_timers_at_their_deadlines():
    def run(step: int) -> dict:
        h = Harness()
        h.join(rebalance=10000)
        h.now = 1000
        h.join(rebalance=10000)
        while h.now < 40000:
            h.advance(step)
        return h.info()

    assert run(1) == run(40000 - 1000)


def test_static_identity_checks():
    h = Harness()
    a, b = _static_group(h, "i1", "i2")
    assert h.heartbeat(a.member_id, 1, instance="unknown") == E.unknown_member_id.value
    t = h.join(v4=True)
    pending = h.responses[t].member_id
    t = h.join(member_id=pending, instance="i9")  # a pending id is never static
    assert h.responses[t].error == E.unknown_member_id.value


# ---------------------------------------------------------------------------------------------
# Whole-machine property test
# ---------------------------------------------------------------------------------------------

GROUP = "g"
MAX_SIZE = 4
N_CLIENTS = 5  # two static, three dynamic: one more than the group may hold
SESSION_CHOICES = [6000, 10000]
REBALANCE_CHOICES = [5000, 20000]
PROTOCOL_CHOICES = [
    [("range", b"r1")],
    [("range", b"r2"), ("rr", b"x")],
    [("rr", b"y"), ("range", b"r3")],
]
JOIN_ERRORS = {
    E.unknown_member_id.value, E.member_id_required.value, E.fenced_instance_id.value,
    E.inconsistent_group_protocol.value, E.group_max_size_reached.value,
    E.coordinator_not_available.value, E.coordinator_load_in_progress.value,
}
SYNC_ERRORS = {
    E.unknown_member_id.value, E.illegal_generation.value, E.rebalance_in_progress.value,
    E.fenced_instance_id.value, E.inconsistent_group_protocol.value, E.coordinator_not_available.value,
}


@dataclass
class Client:
    instance_id: str | None
    member_id: str = ""
    generation: int = -1
    leader: bool = False
    members: list = field(default_factory=list)
    protocol_name: str | None = None
    join_token: int | None = None
    sync_token: int | None = None
    synced: bool = False  # got its assignment for ``generation``
    needs_rejoin: bool = True
    proto: int = 0


class GroupMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.ids = itertools.count(1)
        self.sm = self._new_sm()
        self.now = 0
        self.tokens = itertools.count(1)
        self.outstanding: dict[int, tuple[str, int, str]] = {}  # token -> (kind, client, member id)
        self.writes: list[PersistRequest] = []
        # (generation, member) -> (write id, assignment) of the latest durable record, in
        # log order (= write id order: the shell appends in the order it is asked to)
        self.durable: dict[tuple[int, str], tuple[int, bytes]] = {}
        self.last_durable = None
        self.last_durable_id = 0
        self.max_generation = 0
        self.clients = [Client("i0"), Client("i1"), Client(None), Client(None), Client(None)]

    def _new_sm(self) -> GroupCoordinatorState:
        config = GroupConfig(max_size=MAX_SIZE, initial_rebalance_delay_ms=500)
        return GroupCoordinatorState(config, lambda p: f"{p}-{next(self.ids)}")

    # -- plumbing -------------------------------------------------------------------------------

    def _group(self) -> dict | None:
        return self.sm.inspect(GROUP)

    def _absorb(self, fx: Effects) -> None:
        info = self._group()
        for p in fx.persist:
            assert decode_key(p.key) == GroupMetadataKey(p.group_id)
            assert decode_group_metadata_value(p.value) == p.record
            self.writes.append(p)
        for token, result in fx.responses.items():
            assert token in self.outstanding, f"token {token} answered twice or never asked"
            kind, idx, member_id = self.outstanding.pop(token)
            c = self.clients[idx]
            if kind == "join":
                assert isinstance(result, JoinResult)
                self._on_join(c, token, result, info)
            else:
                assert isinstance(result, SyncResult)
                self._on_sync(c, token, result, info, member_id)
        assert fx.wake_at_ms == self.sm.next_wake_ms()

    def _on_join(self, c: Client, token: int, r: JoinResult, info: dict | None) -> None:
        if r.error == NONE:
            assert info is not None
            assert r.generation_id == info["generation_id"], "answer from another generation"
            ids = [m["member_id"] for m in info["members"]]
            assert r.member_id in ids
            assert r.protocol_name == info["protocol_name"]
            if r.members:
                assert r.leader_id == r.member_id
                assert [m[0] for m in r.members] == ids
        else:
            assert r.error in JOIN_ERRORS, r
            assert r.generation_id == -1 or r.error == E.coordinator_not_available.value
        if token != c.join_token:
            return  # an older request of this client
        c.join_token = None
        if r.error == NONE:
            c.member_id, c.generation = r.member_id, r.generation_id
            c.leader = r.leader_id == r.member_id and bool(r.members) and not r.skip_assignment
            c.members = [m[0] for m in r.members]
            c.protocol_name = r.protocol_name
            c.synced, c.needs_rejoin = False, False
            return
        c.needs_rejoin = True
        if r.error == E.member_id_required.value:
            c.member_id = r.member_id
        elif r.error in (E.unknown_member_id.value, E.fenced_instance_id.value):
            c.member_id, c.generation = "", -1

    def _on_sync(self, c: Client, token: int, r: SyncResult, info: dict | None, member_id: str) -> None:
        if r.error == NONE:
            assert info is not None
            # The assignment handed out was durable first.
            key = (info["generation_id"], member_id)
            assert self.durable.get(key, (0, None))[1] == r.assignment, (key, r)
        else:
            assert r.error in SYNC_ERRORS, r
        if token == c.sync_token:
            c.sync_token = None
            c.synced = r.error == NONE
            c.needs_rejoin = r.error != NONE
            if r.error in (E.unknown_member_id.value, E.fenced_instance_id.value):
                c.member_id, c.generation = "", -1
            elif r.error == E.illegal_generation.value:
                c.generation = -1

    def _ask(self, kind: str, idx: int) -> int:
        token = next(self.tokens)
        self.outstanding[token] = (kind, idx, self.clients[idx].member_id)
        return token

    # -- client actions ---------------------------------------------------------------------------

    def join(self, idx, v4, proto, session, rebalance, skip):
        c = self.clients[idx]
        c.proto = proto
        token = self._ask("join", idx)
        c.join_token = token
        self._absorb(self.sm.join(token, self.now, GROUP, c.member_id, c.instance_id, f"client{idx}", "h",
                                  session, rebalance, "consumer", PROTOCOL_CHOICES[proto], v4, skip))

    def restart_client(self, idx):
        """The process restarts: it forgets its member id (a static one keeps its instance id)."""
        c = self.clients[idx]
        c.member_id, c.generation, c.leader = "", -1, False
        self.join(idx, True, 0, SESSION_CHOICES[0], REBALANCE_CHOICES[1], False)

    def sync(self, idx, drop_one, v5):
        c = self.clients[idx]
        if c.generation < 0:
            return
        assignments = {}
        if c.leader:
            members = c.members[:-1] if drop_one else c.members
            assignments = {m: f"{m}@{c.generation}".encode() for m in members}
        token = self._ask("sync", idx)
        c.sync_token = token
        self._absorb(self.sm.sync(token, self.now, GROUP, c.generation, c.member_id, c.instance_id,
                                  "consumer" if v5 else None, c.protocol_name if v5 else None, assignments))

    def heartbeat(self, idx):
        c = self.clients[idx]
        if not c.member_id:
            return
        error = self.sm.heartbeat(self.now, GROUP, c.generation, c.member_id, c.instance_id)
        assert error in {NONE, E.rebalance_in_progress.value, E.illegal_generation.value,
                         E.unknown_member_id.value, E.fenced_instance_id.value}
        if error in (E.unknown_member_id.value, E.fenced_instance_id.value):
            c.member_id, c.generation = "", -1
        if error != NONE:
            c.needs_rejoin = True

    @rule(idx=st.integers(0, N_CLIENTS - 1))
    def client_step(self, idx):
        """What a well-behaved client does next: (re)join, sync, or heartbeat."""
        c = self.clients[idx]
        if c.join_token is not None or c.sync_token is not None:
            if c.member_id:
                self.heartbeat(idx)
        elif c.needs_rejoin or not c.member_id or c.generation < 0:
            self.join(idx, True, c.proto, SESSION_CHOICES[1], REBALANCE_CHOICES[1], False)
        elif not c.synced:
            self.sync(idx, False, True)
        else:
            self.heartbeat(idx)

    def leave(self, idx, by_instance):
        c = self.clients[idx]
        member = ("", c.instance_id) if by_instance and c.instance_id else (c.member_id, c.instance_id)
        res = self.sm.leave(self.now, GROUP, [member])
        assert res.error == NONE and len(res.member_errors) == 1
        self._absorb(res.effects)
        if res.member_errors[0] == NONE:
            c.member_id, c.generation = "", -1

    def commit(self, idx):
        c = self.clients[idx]
        error = self.sm.validate_offset_commit(GROUP, c.generation, c.member_id, c.instance_id, self.now)
        info = self._group()
        if error == NONE and info is not None and c.generation < 0:
            assert info["state"] == "Empty"  # no generation: only an Empty group takes it
        elif error == NONE and info is not None and c.member_id:
            assert info["state"] in ("Stable", "PreparingRebalance")
            assert info["generation_id"] == c.generation

    # -- the environment --------------------------------------------------------------------------

    @rule(ms=st.sampled_from([100, 500, 1000, 2000, 4000, 11000, 310000]), flush=st.booleans())
    def advance(self, ms, flush=False):
        """Time passes; silent clients (crashed ones) miss their heartbeats.
        With ``flush`` the shell first finishes its writes (the usual case)."""
        while flush and self.writes:
            self.finish_write(0, False)
        target = self.now + ms
        # Tick at every wake time, like the shell, so that answers can be checked
        # against the group as it is right after each timer.
        while (wake := self.sm.next_wake_ms()) is not None and wake <= target:
            self.now = max(self.now, wake)
            self._absorb(self.sm.tick(self.now))
        self.now = target

    @precondition(lambda self: self.writes)
    @rule(which=st.integers(0, 10), fail=st.booleans())
    def finish_write(self, which, fail):
        w = self.writes.pop(which % len(self.writes))
        if not fail:
            for m in w.record.members:
                key = (w.record.generation_id, m.member_id)
                if self.durable.get(key, (0, b""))[0] < w.write_id:
                    self.durable[key] = (w.write_id, m.assignment)
            if w.write_id > self.last_durable_id:
                self.last_durable, self.last_durable_id = w.record, w.write_id
        error = E.coordinator_not_available.value if fail else NONE
        self._absorb(self.sm.group_persisted(self.now, w.write_id, error))

    def coordinator_restart(self):
        """The broker restarts: parked requests die with their connections; the group
        comes back from its last durable record."""
        self.outstanding.clear()
        for c in self.clients:
            c.join_token = c.sync_token = None
        self.writes.clear()
        self.sm = self._new_sm()
        # Like Kafka, a generation that was never made durable is forgotten.
        self.max_generation = 0
        if self.last_durable is not None:
            self._absorb(self.sm.load_group(GROUP, self.last_durable, self.now))
            self.max_generation = self.last_durable.generation_id

    # -- rules: well-behaved clients most of the time, anything else some of the time ----------------

    @rule(idx=st.integers(0, N_CLIENTS - 1))
    def another_client_step(self, idx):
        self.client_step(idx)

    @rule(action=st.sampled_from(["join", "join", "restart_client", "sync", "heartbeat", "leave",
                                  "commit", "coordinator_restart"]),
          idx=st.integers(0, N_CLIENTS - 1), v4=st.booleans(), proto=st.integers(0, 2),
          session=st.sampled_from(SESSION_CHOICES), rebalance=st.sampled_from(REBALANCE_CHOICES),
          flag=st.booleans(), flag2=st.booleans())
    def chaos(self, action, idx, v4, proto, session, rebalance, flag, flag2):
        if action == "join":
            self.join(idx, v4, proto, session, rebalance, flag)
        elif action == "restart_client":
            self.restart_client(idx)
        elif action == "sync":
            self.sync(idx, flag, flag2)
        elif action == "heartbeat":
            self.heartbeat(idx)
        elif action == "leave":
            self.leave(idx, flag)
        elif action == "commit":
            self.commit(idx)
        else:
            self.coordinator_restart()

    def _is_stable(self) -> bool:
        info = self._group()
        return info is not None and info["state"] == "Stable"

    @precondition(lambda self: self._is_stable())
    @rule(action=st.sampled_from(["static_restart", "static_restart", "coordinator_restart", "rejoin"]),
          idx=st.integers(0, N_CLIENTS - 1), skip=st.booleans(), proto=st.integers(0, 2))
    def disturb_stable_group(self, action, idx, skip, proto):
        """Events that matter most once a group is Stable."""
        if action == "static_restart":
            c = self.clients[idx % 2]
            c.member_id, c.generation, c.leader = "", -1, False
            self.join(idx % 2, True, proto, SESSION_CHOICES[1], REBALANCE_CHOICES[1], skip)
        elif action == "coordinator_restart":
            self.coordinator_restart()
        else:
            c = self.clients[idx]
            self.join(idx, True, c.proto if skip else proto, SESSION_CHOICES[1], REBALANCE_CHOICES[1], False)

    # -- invariants ---------------------------------------------------------------------------------

    @invariant()
    def group_is_consistent(self):
        info = self._group()
        if info is None:
            return
        state = info["state"]
        members = info["members"]
        ids = [m["member_id"] for m in members]
        assert state in ("Empty", "PreparingRebalance", "CompletingRebalance", "Stable")
        assert info["generation_id"] >= self.max_generation
        self.max_generation = info["generation_id"]
        if members:
            assert info["leader_id"] in ids
        else:
            assert info["leader_id"] is None
        if state == "Empty":
            assert not members
        if state in ("CompletingRebalance", "Stable"):
            assert info["protocol_name"] is not None
        if state == "PreparingRebalance":
            assert info["join_deadline_ms"] is not None  # the rebalance will end
        if state == "Stable":
            writes_in_flight = {m.member_id for w in self.writes for m in w.record.members}
            for m in members:
                assert not m["awaiting_sync"]
                if m["awaiting_join"]:
                    # only a static member whose new id is being persisted
                    assert m["group_instance_id"] is not None and m["member_id"] in writes_in_flight
                elif m["group_instance_id"] is not None and m["member_id"] in writes_in_flight:
                    # A static member put back to an id whose own write is still in flight:
                    # restarted twice, the second replacement's write failed, so it went
                    # back to the first new id (Kafka's replaceStaticMember on a failed
                    # append does the same); it is durable once that first write is.
                    pass
                else:
                    durable = self.durable.get((info["generation_id"], m["member_id"]), (0, None))[1]
                    assert durable == m["assignment"]
        assert set(info["static_members"].values()) <= set(ids)
        # group.max.size bounds the members that (re)join; members that have not rejoined
        # yet can push the total over it until the rebalance sheds them (Kafka's rule).
        if state == "PreparingRebalance":
            assert sum(m["awaiting_join"] for m in members) <= MAX_SIZE

    @invariant()
    def every_parked_request_is_held(self):
        # Nothing lost, nothing answered twice: unanswered tokens are exactly the held ones.
        assert set(self.outstanding) == self.sm.held_tokens()

    def teardown(self):
        # With all clients silent, everything settles: every request answered, group empty.
        for _ in range(12):
            while self.writes:
                self.finish_write(0, False)
            self.advance(310000)
        assert not self.outstanding
        info = self._group()
        if info is not None:
            assert info["state"] == "Empty" and not info["members"] and not info["pending_members"]
        assert self.sm.next_wake_ms() is None


GroupMachine.TestCase.settings = settings(
    max_examples=300,
    stateful_step_count=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestGroupMachine = GroupMachine.TestCase


@pytest.mark.parametrize("first_write_fails", [False, True])
def test_static_member_restarted_twice_second_write_fails(first_write_fails):
    """make model-check found it (seed 3883477072, scale 10): a static member restarted
    twice in a Stable group, the second replacement's write fails (back to the first new
    id, whose own write is still in flight), then the first write finishes. Whatever it
    does, the group ends on an id a durable record has (the first write failing used to
    leave the group on an id no record had)."""
    s = GroupMachine()

    def step(rule, **kw):
        getattr(s, rule)(**kw)
        s.every_parked_request_is_held()
        s.group_is_consistent()

    step("another_client_step", idx=0)
    step("advance", flush=False, ms=500)
    step("another_client_step", idx=0)
    step("advance", flush=True, ms=100)
    step("disturb_stable_group", action="static_restart", idx=0, proto=0, skip=False)
    step("disturb_stable_group", action="static_restart", idx=0, proto=0, skip=False)
    step("finish_write", fail=True, which=1)
    step("finish_write", fail=first_write_fails, which=0)
    for _ in range(2):
        step("another_client_step", idx=0)
        step("advance", flush=True, ms=1000)
    s.teardown()
