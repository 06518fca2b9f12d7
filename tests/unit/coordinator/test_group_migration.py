"""The online migration's rules (coordinator/group/migration.py, consumer_classic.py)
one by one: group.consumer.migration.policy, which classic groups may be upgraded, and
the answers a classic member of a consumer group gets."""

from __future__ import annotations

import struct
import uuid

import pytest
from kio.schema.errors import ErrorCode as E
from txbroker.coordinator.group import migration
from txbroker.coordinator.group.consumer_classic import ClassicJoinRequest
from txbroker.coordinator.group.consumer_state import (
    ConsumerGroupConfig,
    ConsumerGroups,
    HeartbeatRequest,
)
from txbroker.coordinator.group.records import GroupMetadataValue, MemberMetadata
from txbroker.coordinator.group.state import GroupConfig, GroupCoordinatorState
from txbroker.protocol.consumer_protocol import (
    decode_consumer_assignment,
    decode_consumer_subscription,
    encode_consumer_assignment,
)

TID = uuid.UUID(int=7)
IMAGE = {"t": (TID, 4)}
SUB = struct.pack(">hih1si", 0, 1, 1, b"t", -1)


def _sub_v1(owned: list[int]) -> bytes:
    return SUB.replace(b"\x00\x00", b"\x00\x01", 1) + struct.pack(
        f">ih1si{len(owned)}i", 1, 1, b"t", len(owned), *owned)


def _classic(protocol_type: str = "consumer"):
    state = GroupCoordinatorState(GroupConfig(min_session_timeout_ms=1), lambda p: f"{p}-x")
    members = tuple(
        MemberMetadata(f"k{i}", None, "c", "h", 10_000, 10_000, SUB,
                       encode_consumer_assignment(0, {"t": parts}))
        for i, parts in enumerate(([0, 1], [2, 3])))
    state.load_group("g", GroupMetadataValue(protocol_type, 3, "range", "k0", 0, members), 0)
    return state


def _consumers(policy: str = "bidirectional") -> ConsumerGroups:
    return ConsumerGroups(ConsumerGroupConfig(migration_policy=policy))


def _join_consumer(cg: ConsumerGroups, member_id: str = "c0"):
    return cg.heartbeat(0, HeartbeatRequest("g", member_id, 0, rebalance_timeout_ms=1000,
                                            subscribed_topic_names=("t",), owned={}), IMAGE)


def test_consumer_protocol_codec():
    assert decode_consumer_subscription(SUB) == (0, ["t"], [])
    assert decode_consumer_subscription(_sub_v1([1, 3])) == (1, ["t"], [("t", 1), ("t", 3)])
    assert decode_consumer_subscription(b"\x00\x00\x00\x00\x00\x05") is None
    assert decode_consumer_assignment(encode_consumer_assignment(3, {"t": [2, 0]})) == [
        ("t", 0), ("t", 2)]


@pytest.mark.parametrize("policy,allowed", [("bidirectional", True), ("upgrade", True),
                                            ("downgrade", False), ("disabled", False)])
def test_upgrade_follows_the_policy(policy, allowed):
    state, cg = _classic(), _consumers(policy)
    records, effects, why = migration.upgrade(state, cg, "g", IMAGE, 0)
    assert (effects is not None) == allowed, why
    if not allowed:
        assert records == [] and state.classic_group("g") is not None and "g" not in cg.groups
        return
    g = cg.groups["g"]
    assert state.classic_group("g") is None
    assert (g.group_epoch, g.assignment_epoch) == (3, 3)
    assert {m: (x.member_epoch, x.uses_classic, x.assigned) for m, x in g.members.items()} == {
        "k0": (3, True, {TID: frozenset({0, 1})}), "k1": (3, True, {TID: frozenset({2, 3})})}
    # The joining consumer member bumps the epoch; the classic members must rejoin.
    r = _join_consumer(cg)
    assert r.error == 0 and r.member_epoch == 4 and not r.assignment
    assert cg.classic_heartbeat(0, "g", 3, "k0", None) == E.rebalance_in_progress.value


def test_only_consumer_protocol_groups_are_upgraded():
    records, effects, why = migration.upgrade(_classic("connect"), _consumers(), "g", IMAGE, 0)
    assert effects is None and "protocol type" in why


def test_classic_member_rejoins_and_gets_its_target():
    state, cg = _classic(), _consumers()
    migration.upgrade(state, cg, "g", IMAGE, 0)
    _join_consumer(cg)
    g = cg.groups["g"]
    # The member that must give a partition to the new one (uniform: 2-1-1).
    losing = next(m for m in ("k0", "k1")
                  if not g.members[m].assigned[TID] <= g.target[m].get(TID, frozenset()))
    other = "k1" if losing == "k0" else "k0"

    def join(member_id: str, sub: bytes = SUB, name: str = "range"):
        return cg.classic_join(0, ClassicJoinRequest(
            "g", member_id, None, "c", "h", 10_000, 10_000, "consumer", ((name, sub),),
            True), IMAGE)[0]

    assert join(other, b"\x00").error == E.inconsistent_group_protocol.value
    assert join(other, SUB, "other").error == E.inconsistent_group_protocol.value
    first = join("")
    assert first.error == E.member_id_required.value and first.member_id
    # A cooperative member that still reports its partitions keeps them until it
    # acknowledges the revocation: told to rejoin again.
    held = sorted(g.members[losing].assigned[TID])
    r = join(losing, _sub_v1(held))
    assert r.error == 0 and g.members[losing].state.name == "UNREVOKED_PARTITIONS"
    assert cg.classic_heartbeat(0, "g", r.generation_id, losing, None) == \
        E.rebalance_in_progress.value
    # An eager member rejoins owning nothing: it moves to the group's epoch.
    r = join(other)
    assert (r.error, r.generation_id, r.protocol_name, r.leader_id) == (0, 4, "range", "")
    assert cg.classic_sync(0, "g", 3, other, None, "consumer", "range").error == \
        E.illegal_generation.value
    assert cg.classic_sync(0, "g", 4, other, None, "consumer", "roundrobin").error == \
        E.inconsistent_group_protocol.value
    s = cg.classic_sync(0, "g", 4, other, None, "consumer", "range")
    assert s.error == 0
    assert {p for _t, p in decode_consumer_assignment(s.assignment)} == set(
        g.members[other].assigned[TID])
    assert cg.classic_heartbeat(0, "g", 4, other, None) == 0
    assert cg.classic_heartbeat(0, "g", 4, "nobody", None) == E.unknown_member_id.value
    # Commits of a classic member carry its generation.
    assert cg.validate_offset_commit("g", other, None, 4, False, 2, []) == 0
    assert cg.validate_offset_commit("g", other, None, 3, False, 2, []) == \
        E.illegal_generation.value


@pytest.mark.parametrize("policy,allowed", [("bidirectional", True), ("downgrade", True),
                                            ("upgrade", False), ("disabled", False)])
def test_downgrade_when_the_last_consumer_member_leaves(policy, allowed):
    state, cg = _classic(), _consumers("bidirectional")
    migration.upgrade(state, cg, "g", IMAGE, 0)
    _join_consumer(cg)
    cg.config.migration_policy = policy
    r = cg.heartbeat(0, HeartbeatRequest("g", "c0", -1), IMAGE)
    assert r.error == 0
    records, value = migration.downgrade(cg, 100, "g", 0)
    assert (value is not None) == allowed
    if not allowed:
        assert records == [] and "g" in cg.groups
        return
    assert "g" not in cg.groups
    assert (value.generation_id, value.protocol_name, [m.member_id for m in value.members]) == (
        5, "range", ["k0", "k1"])
    effects = state.adopt_group("g", value, 0)
    assert state.classic_group("g").state.value == "PreparingRebalance"
    assert effects.events[0].kind == "preparing_rebalance"
    # Downgraded, a member heartbeating with its old epoch rejoins.
    assert state.heartbeat(0, "g", 3, "k0", None) in (E.illegal_generation.value,
                                                      E.rebalance_in_progress.value)


def test_no_downgrade_while_a_consumer_member_remains():
    state, cg = _classic(), _consumers()
    migration.upgrade(state, cg, "g", IMAGE, 0)
    _join_consumer(cg, "c0")
    _join_consumer(cg, "c1")
    cg.heartbeat(0, HeartbeatRequest("g", "c0", -1), IMAGE)
    assert migration.downgrade(cg, 100, "g", 0) == ([], None)
    assert migration.downgrade(cg, 1, "g", 0) == ([], None)


def test_upgrade_is_refused_above_the_consumer_group_max_size():
    """As Kafka's validateOnlineUpgrade: more classic members than group.consumer.max.size
    is refused; exactly that many is upgraded (the joining member is then refused)."""
    cg = ConsumerGroups(ConsumerGroupConfig(max_size=1))
    _records, effects, why = migration.upgrade(_classic(), cg, "g", IMAGE, 0)
    assert effects is None and "max.size" in why
    cg = ConsumerGroups(ConsumerGroupConfig(max_size=2))
    assert migration.upgrade(_classic(), cg, "g", IMAGE, 0)[1] is not None
    assert _join_consumer(cg).error == E.group_max_size_reached.value


def test_a_classic_member_that_joins_must_sync_within_its_rebalance_timeout():
    state, cg = _classic(), _consumers()
    migration.upgrade(state, cg, "g", IMAGE, 0)
    _join_consumer(cg)

    def join(member_id: str, now: int):
        return cg.classic_join(now, ClassicJoinRequest(
            "g", member_id, None, "c", "h", 60_000, 10_000, "consumer", (("range", SUB),),
            True), IMAGE)[0]

    r = join("k0", 0)
    assert r.error == 0
    assert cg.classic_sync(5_000, "g", r.generation_id, "k0", None, "consumer", "range").error == 0
    assert join("k1", 0).error == 0  # and no SyncGroup
    assert cg.tick(9_999) == []
    removed = [why for _g, _r, why in cg.tick(10_001)]
    assert len(removed) == 1 and "k1" in removed[0], removed
    assert set(cg.groups["g"].members) == {"k0", "c0"}
