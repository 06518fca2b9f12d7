"""A hypothesis stateful model of share-group membership and assignment
(coordinator/share/group.py with the simple assignor): members join, heartbeat with the
epoch they were last given (or a stale or future one), change their subscriptions,
leave or time out, while topics gain partitions and a subscribed topic appears.

After every step: each member's target holds only partitions of existing topics it
subscribes to; every partition of a subscribed topic has a member; with the same
subscriptions the members' shares differ by at most one partition, and when members
outnumber the partitions every member still gets one (a share group's partitions are
shared); epochs never go back and a member is never ahead of the group's assignment;
a heartbeat that succeeds gives the member the group's assignment epoch, and the next
wake-up is the earliest session deadline. ``make model-check`` runs it deeper."""

from __future__ import annotations

import uuid

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from kio.schema.errors import ErrorCode
from txbroker.coordinator.share.group import (
    LEAVE_EPOCH,
    ShareGroupConfig,
    ShareGroups,
    ShareHeartbeat,
)

GROUP = "g"
MEMBERS = [f"m{i}" for i in range(5)]
TOPIC_IDS = {name: uuid.UUID(int=i + 1) for i, name in enumerate(("a", "b", "late"))}
SESSION_MS = 1_000
subscriptions = st.lists(st.sampled_from(sorted(TOPIC_IDS)), min_size=1, max_size=3,
                         unique=True).map(tuple)


class ShareGroupMachine(RuleBasedStateMachine):
    @initialize(a=st.integers(1, 4), b=st.integers(1, 3))
    def start(self, a: int, b: int) -> None:
        self.groups = ShareGroups(ShareGroupConfig(session_timeout_ms=SESSION_MS,
                                                   heartbeat_interval_ms=100, max_size=10))
        self.partitions = {"a": a, "b": b}  # "late" is created by a rule
        self.now = 0
        self.epochs: dict[str, int] = {}  # what each live member was last told
        self.last_beat: dict[str, int] = {}  # when each live member last heartbeated
        self.last_group_epoch = 0

    def topics(self) -> dict[str, tuple[uuid.UUID, int]]:
        return {name: (TOPIC_IDS[name], n) for name, n in self.partitions.items()}

    def beat(self, member: str, epoch: int, subscribed: tuple[str, ...] | None):
        result = self.groups.heartbeat(self.now, ShareHeartbeat(
            GROUP, member, epoch, subscribed_topic_names=subscribed), self.topics())
        group = self.groups.groups.get(GROUP)
        if result.error == ErrorCode.none.value and epoch != LEAVE_EPOCH:
            assert result.member_epoch == group.assignment_epoch
            self.epochs[member] = result.member_epoch
            self.last_beat[member] = self.now
            # A heartbeat sees the topics as they are now.
            assert {name: count for name, _tid, count in group.metadata} == {
                t: n for t, n in self.partitions.items() if t in group.subscribed_topic_names()}
        return result

    @rule(member=st.sampled_from(MEMBERS), subscribed=subscriptions)
    def join(self, member: str, subscribed: tuple[str, ...]) -> None:
        assert self.beat(member, 0, subscribed).error == ErrorCode.none.value

    @precondition(lambda self: self.epochs)
    @rule(data=st.data(), resubscribe=st.none() | subscriptions)
    def heartbeat(self, data, resubscribe: tuple[str, ...] | None) -> None:
        member = data.draw(st.sampled_from(sorted(self.epochs)))
        assert self.beat(member, self.epochs[member], resubscribe).error == ErrorCode.none.value

    @precondition(lambda self: self.epochs)
    @rule(data=st.data())
    def heartbeat_from_the_future(self, data) -> None:
        member = data.draw(st.sampled_from(sorted(self.epochs)))
        told = self.epochs[member]
        assert self.beat(member, told + 1, None).error == ErrorCode.fenced_member_epoch.value
        self.epochs[member] = told  # a refused heartbeat changes nothing

    @rule(member=st.sampled_from(MEMBERS), epoch=st.integers(1, 40))
    def heartbeat_of_a_stranger(self, member: str, epoch: int) -> None:
        if member in self.epochs:
            return
        assert self.beat(member, epoch, None).error == ErrorCode.unknown_member_id.value

    @precondition(lambda self: self.epochs)
    @rule(data=st.data())
    def leave(self, data) -> None:
        member = data.draw(st.sampled_from(sorted(self.epochs)))
        result = self.beat(member, LEAVE_EPOCH, None)
        assert (result.error, result.removed) == (ErrorCode.none.value, (member,))
        del self.epochs[member]
        del self.last_beat[member]

    @rule(ms=st.integers(1, 700))
    def time_passes(self, ms: int) -> None:
        self.now += ms
        expired = self.groups.tick(self.now, self.topics())
        # Exactly the members silent for a whole session timeout are removed.
        assert {m for _g, m in expired} == {
            m for m, at in self.last_beat.items() if at + SESSION_MS <= self.now}
        for _group, member in expired:
            del self.epochs[member]
            del self.last_beat[member]

    @rule(topic=st.sampled_from(["a", "b"]), more=st.integers(1, 3))
    def add_partitions(self, topic: str, more: int) -> None:
        self.partitions[topic] += more

    @precondition(lambda self: "late" not in self.partitions)
    @rule(n=st.integers(1, 3))
    def create_the_late_topic(self, n: int) -> None:
        self.partitions["late"] = n

    # -- invariants ------------------------------------------------------------------------

    @invariant()
    def members_are_who_the_clients_think(self) -> None:
        group = self.groups.groups.get(GROUP)
        assert set(group.members if group else ()) == set(self.epochs)

    @invariant()
    def epochs_move_forward(self) -> None:
        group = self.groups.groups.get(GROUP)
        if group is None:
            return
        assert group.group_epoch >= self.last_group_epoch
        self.last_group_epoch = group.group_epoch
        assert group.assignment_epoch <= group.group_epoch
        for m in group.members.values():
            assert m.member_epoch <= group.assignment_epoch

    @invariant()
    def the_target_covers_every_subscribed_partition_and_no_other(self) -> None:
        group = self.groups.groups.get(GROUP)
        if group is None or group.group_epoch != group.assignment_epoch:
            return
        by_id = {tid: name for name, (tid, _n) in self.topics().items()}
        # As of the last heartbeat (a new topic or partition counts from the next one).
        known = {name: count for name, _tid, count in group.metadata}
        owners: set[tuple[str, int]] = set()
        for member_id, target in group.target.items():
            member = group.members[member_id]
            for tid, parts in target.items():
                name = by_id[tid]
                assert name in member.subscribed_topic_names
                for p in parts:
                    assert 0 <= p < known[name]
                    owners.add((name, p))
        for name, count in known.items():
            if any(name in m.subscribed_topic_names for m in group.members.values()):
                assert all((name, p) in owners for p in range(count)), (name, owners)

    @invariant()
    def shares_are_balanced(self) -> None:
        group = self.groups.groups.get(GROUP)
        if group is None or not group.members or group.group_epoch != group.assignment_epoch:
            return
        subs = {m.subscribed_topic_names for m in group.members.values()}
        if len(subs) != 1:
            return  # heterogeneous subscriptions balance each topic on its own
        counts = [sum(len(p) for p in group.target.get(m, {}).values()) for m in group.members]
        total = sum(c for _t, _i, c in group.metadata)
        if total:
            assert max(counts) - min(counts) <= 1, counts
            assert min(counts) >= 1, counts  # every member gets work, partitions shared

    @invariant()
    def the_next_wake_is_the_earliest_session_deadline(self) -> None:
        deadlines = [m.deadline_ms for g in self.groups.groups.values()
                     for m in g.members.values()]
        assert self.groups.next_wake_ms() == (min(deadlines) if deadlines else None)
        assert all(d > self.now for d in deadlines)


ShareGroupMachine.TestCase.settings = settings(
    max_examples=200, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestShareGroupMachine = ShareGroupMachine.TestCase
