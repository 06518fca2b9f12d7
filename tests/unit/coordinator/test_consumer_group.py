"""Unit tests of consumer-protocol groups (KIP-848): the assignors, reconciliation
(revoke before reassign), the records' round trip and the offset-commit checks."""

from __future__ import annotations

import uuid

import pytest
from txbroker.coordinator.group import consumer_records as cr
from txbroker.coordinator.group.consumer_assignors import assign
from txbroker.coordinator.group.consumer_state import (
    ConsumerGroupConfig,
    ConsumerGroups,
    HeartbeatRequest,
)
from txbroker.coordinator.group.records import decode_key

A, B = uuid.UUID(int=1), uuid.UUID(int=2)
IMAGE = {"a": (A, 4), "b": (B, 3)}
STALE, ILLEGAL_GENERATION, UNKNOWN_MEMBER = 113, 22, 25
UNSUPPORTED_VERSION, FENCED_EPOCH, UNRELEASED = 35, 110, 111


def counts(result):
    return sorted(sum(len(ps) for ps in a.values()) for a in result.values())


def test_uniform_balances_and_is_sticky():
    subs = {m: frozenset({A, B}) for m in ("m1", "m2", "m3")}
    first = assign("uniform", subs, {A: 4, B: 3}, {})
    assert counts(first) == [2, 2, 3]
    every = sorted((t, p) for a in first.values() for t, ps in a.items() for p in ps)
    assert every == sorted([(A, p) for p in range(4)] + [(B, p) for p in range(3)])
    # A fourth member takes partitions from the others; nobody else's move.
    subs["m4"] = frozenset({A, B})
    second = assign("uniform", subs, {A: 4, B: 3}, first)
    assert counts(second) == [1, 2, 2, 2]
    for m in ("m1", "m2", "m3"):
        for t, ps in second[m].items():
            assert ps <= first[m].get(t, frozenset())


def test_uniform_respects_subscriptions():
    subs = {"only-a": frozenset({A}), "both": frozenset({A, B})}
    result = assign("uniform", subs, {A: 4, B: 3}, {})
    assert B not in result["only-a"]
    assert sum(len(ps) for ps in result["only-a"].values()) >= 2


def test_range_gives_contiguous_ranges_per_topic():
    subs = {"m1": frozenset({A, B}), "m2": frozenset({A, B})}
    result = assign("range", subs, {A: 4, B: 3}, {})
    assert result["m1"] == {A: frozenset({0, 1}), B: frozenset({0, 1})}
    assert result["m2"] == {A: frozenset({2, 3}), B: frozenset({2})}


def hb(cg, member, epoch, owned=None, now=0, **kw):
    return cg.heartbeat(now, HeartbeatRequest(
        group_id="g", member_id=member, member_epoch=epoch,
        rebalance_timeout_ms=kw.pop("rebalance", 1000) if epoch == 0 else -1,
        subscribed_topic_names=kw.pop("topics", ("a",)) if epoch == 0 else None,
        owned={} if epoch == 0 else owned, **kw), IMAGE)


def test_partition_moves_only_after_its_owner_revoked_it():
    cg = ConsumerGroups(ConsumerGroupConfig())
    r1 = hb(cg, "m1", 0)
    assert r1.assignment == {A: frozenset(range(4))}
    r2 = hb(cg, "m2", 0)
    assert r2.member_epoch == 2 and r2.assignment == {}  # m1 still owns them all
    # m1 is told to keep two; it still reports owning all four: nothing moves yet.
    r1 = hb(cg, "m1", r1.member_epoch, {A: frozenset(range(4))})
    kept = r1.assignment[A]
    assert len(kept) == 2 and r1.member_epoch == 1
    assert hb(cg, "m2", 2, {}).assignment is None
    # m1 acknowledges: it moves to epoch 2 and m2 gets the other two.
    r1 = hb(cg, "m1", 1, {A: kept})
    assert r1.member_epoch == 2
    r2 = hb(cg, "m2", 2, {})
    assert r2.assignment == {A: frozenset(range(4)) - kept}
    assert cg.groups["g"].state == "Stable"


def test_epoch_checks_and_static_membership():
    cg = ConsumerGroups(ConsumerGroupConfig())
    r = hb(cg, "s1", 0, instance_id="i")
    assert r.error == 0
    assert hb(cg, "s1", r.member_epoch + 1, {}).error == FENCED_EPOCH
    assert hb(cg, "nobody", 3, {}).error == UNKNOWN_MEMBER
    assert hb(cg, "s2", 0, instance_id="i").error == UNRELEASED
    # A static leave (-2) keeps the assignment for the next member with the instance id.
    assert hb(cg, "s1", -2, instance_id="i").member_epoch == -2
    r = hb(cg, "s2", 0, instance_id="i")
    assert r.error == 0 and r.assignment == {A: frozenset(range(4))}
    assert set(cg.groups["g"].members) == {"s2"}


def test_session_timeout_removes_the_member_and_frees_its_partitions():
    cg = ConsumerGroups(ConsumerGroupConfig(session_timeout_ms=1000))
    hb(cg, "m1", 0, now=0)
    r2 = hb(cg, "m2", 0, now=500)
    assert cg.next_wake_ms() == 1000
    fired = cg.tick(1000)
    assert [g for g, _records, _why in fired] == ["g"]
    assert set(cg.groups["g"].members) == {"m2"}
    r2 = hb(cg, "m2", r2.member_epoch, {}, now=1001)
    assert r2.assignment == {A: frozenset(range(4))}


def test_records_replay_to_the_same_group():
    cg = ConsumerGroups(ConsumerGroupConfig())
    records = []
    for member in ("m1", "m2"):
        records += hb(cg, member, 0, topics=("a", "b")).records
    fresh = ConsumerGroups(ConsumerGroupConfig())
    for key, value in records:
        fresh.replay(decode_key(key), value)
    g, f = cg.groups["g"], fresh.groups["g"]
    assert (f.group_epoch, f.assignment_epoch, f.target, f.owners, f.partition_metadata) == (
        g.group_epoch, g.assignment_epoch, g.target, g.owners, g.partition_metadata)
    assert {m: (x.member_epoch, x.assigned, x.assignment_epochs) for m, x in f.members.items()} \
        == {m: (x.member_epoch, x.assigned, x.assignment_epochs) for m, x in g.members.items()}


def test_unreadable_record_is_a_value_error():
    with pytest.raises(ValueError):
        cr.decode_value(cr.CURRENT_MEMBER_ASSIGNMENT, cr.encode_value(cr.GROUP_METADATA, 3))


def test_offset_commit_checks_member_epoch_and_kip_1251():
    cg = ConsumerGroups(ConsumerGroupConfig())
    r1 = hb(cg, "m1", 0)
    r1 = hb(cg, "m1", r1.member_epoch, {A: frozenset(range(4))})
    r2 = hb(cg, "m2", 0)
    r1 = hb(cg, "m1", r1.member_epoch, {A: frozenset(range(4))})  # told to revoke half
    kept = sorted(r1.assignment[A])
    r1 = hb(cg, "m1", r1.member_epoch, {A: frozenset(kept)})  # acknowledged: epoch 2
    assert r1.member_epoch == 2
    check = cg.validate_offset_commit
    assert check("g", "m1", None, 2, False, 9, [(A, kept[0])]) == 0
    assert check("g", "m1", None, 3, False, 9, [(A, kept[0])]) == STALE
    assert check("g", "m1", None, 2, False, 8, [(A, kept[0])]) == UNSUPPORTED_VERSION
    assert check("g", "ghost", None, 2, False, 9, [(A, kept[0])]) == UNKNOWN_MEMBER
    # KIP-1251: epoch 1 still commits a partition m1 has held since epoch 1...
    assert check("g", "m1", None, 1, False, 9, [(A, kept[0])]) == 0
    # ...but not one it no longer holds; TxnOffsetCommit says ILLEGAL_GENERATION.
    given_away = next(p for p in range(4) if p not in kept)
    assert check("g", "m1", None, 1, False, 9, [(A, given_away)]) == STALE
    assert check("g", "m1", None, 1, True, 5, [(A, given_away)]) == ILLEGAL_GENERATION
    # m2 got its partitions at epoch 2: an epoch-1 commit of them is refused.
    r2 = hb(cg, "m2", r2.member_epoch, {})
    p2 = min(r2.assignment[A])
    assert check("g", "m2", None, 2, False, 9, [(A, p2)]) == 0
    assert check("g", "m2", None, 1, False, 9, [(A, p2)]) == STALE
    # Admin commits (-1, no member) only to an empty group; a producer without group
    # metadata always.
    assert check("g", "", None, -1, False, 9, [(A, 0)]) == UNKNOWN_MEMBER
    assert check("g", "", None, -1, True, 5, [(A, 0)]) == 0


def test_group_size_is_bounded():
    """group.consumer.max.size: a member beyond it is GROUP_MAX_SIZE_REACHED and leaves
    no trace; members already in keep heartbeating."""
    cg = ConsumerGroups(ConsumerGroupConfig(max_size=1))
    r1 = hb(cg, "m1", 0)
    r2 = hb(cg, "m2", 0)
    assert (r2.error, r2.records) == (81, [])
    assert set(cg.groups["g"].members) == {"m1"}
    assert hb(cg, "m1", r1.member_epoch, {}).error == 0


def test_member_that_does_not_revoke_in_time_is_removed():
    """A member told to revoke partitions that keeps reporting them past its rebalance
    timeout is fenced out; its partitions then go to the member waiting for them."""
    cg = ConsumerGroups(ConsumerGroupConfig(session_timeout_ms=60_000))
    r1 = hb(cg, "m1", 0, now=0, rebalance=500)
    r1 = hb(cg, "m1", r1.member_epoch, {A: frozenset(range(4))}, now=10)
    r2 = hb(cg, "m2", 0, now=20)
    all_of_a = {A: frozenset(range(4))}
    hb(cg, "m1", r1.member_epoch, all_of_a, now=30)  # told to revoke two: deadline 530
    assert cg.groups["g"].members["m1"].state.name == "UNREVOKED_PARTITIONS"
    hb(cg, "m1", r1.member_epoch, all_of_a, now=400)  # still owns them: no new deadline
    assert cg.next_wake_ms() == 530
    assert [why for _g, _r, why in cg.tick(530)] == [
        "member m1 of group g failed to revoke its partitions within its rebalance timeout"]
    r2 = hb(cg, "m2", r2.member_epoch, {}, now=531)
    assert r2.assignment == all_of_a
