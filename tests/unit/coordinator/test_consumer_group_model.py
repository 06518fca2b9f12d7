"""A hypothesis stateful model of consumer-protocol groups (KIP-848,
``coordinator/group/consumer_state.py``) driven like real clients: members join,
heartbeat (acknowledging their assignment now or later), leave, leave and rejoin as a
static member, miss their session; topics gain partitions or disappear; the
coordinator restarts from its records at any point.

Invariants: no partition is owned by two live members at once (neither on the server
nor in what the clients consume); group, assignment and member epochs only grow; when
the members keep heartbeating the group converges and every subscribed partition is
owned by exactly one member; replaying the records gives the same state."""

from __future__ import annotations

import uuid

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from txbroker.coordinator.group.consumer_state import (
    ConsumerGroupConfig,
    ConsumerGroups,
    HeartbeatRequest,
)
from txbroker.coordinator.group.records import decode_key

GROUP = "g"
SESSION = 60_000
TOPICS = ("a", "b")
REGEX = "[ac]"  # client 1 subscribes by regular expression
CLIENTS = 4
STATIC = 3  # client 3 has a group.instance.id
FENCED = {22, 25, 110}  # ILLEGAL_GENERATION unused; UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH


class Client:
    def __init__(self, index: int) -> None:
        self.index = index
        self.member_id: str | None = None
        self.epoch = 0
        self.owned: dict = {}
        self.pending: dict | None = None  # an assignment received, not yet applied
        self.topics = TOPICS if index % 2 == 0 else TOPICS[:1]
        self.regex = REGEX if index == 1 else None
        self.full_next = False  # after a lost answer the client sends a full request
        self.incarnation = 0

    def reset(self) -> None:
        self.member_id, self.epoch, self.owned, self.pending = None, 0, {}, None
        self.full_next = False


def snapshot(cg: ConsumerGroups):
    g = cg.groups.get(GROUP)
    if g is None:
        return None
    return (g.group_epoch, g.assignment_epoch, g.partition_metadata, g.target, g.owners,
            g.resolved, g.regex_refreshed_ms,
            {m.member_id: (m.subscription, m.member_epoch, m.previous_member_epoch, m.state,
                           m.assigned, m.pending_revocation, m.assignment_epochs)
             for m in g.members.values()})


class ConsumerGroupMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.cg = ConsumerGroups(ConsumerGroupConfig(heartbeat_interval_ms=100,
                                                     session_timeout_ms=SESSION))
        self.now = 0
        self.log: list = []
        self.image = {"a": (uuid.UUID(int=1), 3), "b": (uuid.UUID(int=2), 2)}
        self.clients = [Client(i) for i in range(CLIENTS)]
        self.epochs: dict = {}
        self.group_epochs = (0, 0)

    def _send(self, c: Client, epoch: int, owned):
        full = epoch == 0 or c.full_next
        if full and owned is None:
            owned = dict(c.owned)
        req = HeartbeatRequest(
            group_id=GROUP, member_id=c.member_id or "", member_epoch=epoch,
            instance_id=f"static-{c.index}" if c.index == STATIC else None,
            rebalance_timeout_ms=SESSION if full else -1,
            subscribed_topic_names=(() if c.regex else c.topics) if full else None,
            subscribed_topic_regex=c.regex if full else None,
            owned=owned, client_id=f"c{c.index}")
        r = self.cg.heartbeat(self.now, req, self.image)
        self.log.extend(r.records)
        return r

    def _alive(self, c: Client) -> bool:
        g = self.cg.groups.get(GROUP)
        return c.member_id is not None and g is not None and c.member_id in g.members

    # -- rules -------------------------------------------------------------------------

    @rule(i=st.integers(0, CLIENTS - 1))
    def join(self, i):
        c = self.clients[i]
        if c.member_id is not None and c.epoch != 0:
            return
        if c.member_id is None:
            c.incarnation += 1
            c.member_id = f"m{i}-{c.incarnation}"
        r = self._send(c, 0, {})
        if r.error:
            assert r.error == 111, r  # UNRELEASED_INSTANCE_ID: the static id is still held
            c.reset()
            return
        c.epoch = r.member_epoch
        c.pending = r.assignment

    @rule(i=st.integers(0, CLIENTS - 1), ack=st.booleans(), report=st.booleans(),
          lost=st.booleans())
    def heartbeat(self, i, ack, report=True, lost=False):
        """``report``: the owned partitions are sent (librdkafka leaves them out when
        unchanged); ``lost``: the answer never reaches the client."""
        c = self.clients[i]
        if c.member_id is None:
            return
        if c.epoch == 0:
            self.join(i)  # fenced before: it rejoins under its member id
            return
        if ack and c.pending is not None:
            c.owned, c.pending = c.pending, None
        r = self._send(c, c.epoch, dict(c.owned) if report or c.pending is None else None)
        if lost:
            # As the Java client and librdkafka: after a failed heartbeat the next one is
            # full (all fields), so the answer carries the whole assignment again. The
            # client waits for that answer instead of applying an assignment it got
            # before the lost heartbeat: that heartbeat told the coordinator what it
            # owned, and the coordinator (as Kafka's CurrentAssignmentBuilder does) may
            # have given a partition it had not yet taken to another member meanwhile.
            c.full_next = True
            c.pending = None
            return
        c.full_next = False
        if r.error:
            assert r.error in FENCED, r
            # The client drops its partitions and rejoins with epoch 0 under the same
            # member id (a static one leaves with -2 first: its instance id would be
            # UNRELEASED_INSTANCE_ID until its session ended).
            if c.index == STATIC and self._alive(c):
                assert self._send(c, -2, None).error == 0
            c.epoch, c.owned, c.pending, c.full_next = 0, {}, None, False
            return
        assert r.member_epoch >= c.epoch
        c.epoch = r.member_epoch
        if r.assignment is not None:
            c.pending = r.assignment

    @rule(i=st.integers(0, CLIENTS - 1), static=st.booleans())
    def leave(self, i, static):
        c = self.clients[i]
        if c.member_id is None or not self._alive(c):
            c.reset()
            return
        static = static and i == STATIC
        r = self._send(c, -2 if static else -1, None)
        assert r.error == 0, r
        c.reset()

    @rule()
    def sessions_expire(self):
        self.now += SESSION + 1
        for _group, records, _why in self.cg.tick(self.now):
            self.log.extend(records)
        for c in self.clients:
            if c.member_id is not None and not self._alive(c):
                c.owned, c.pending = {}, None  # fenced: it stops consuming

    @rule(topic=st.sampled_from(TOPICS))
    def add_partition(self, topic):
        if topic in self.image:
            tid, n = self.image[topic]
            self.image[topic] = (tid, min(n + 1, 6))

    @rule()
    def delete_topic_b(self):
        self.image.pop("b", None)

    @rule()
    def create_topic_c(self):
        self.image.setdefault("c", (uuid.UUID(int=3), 2))

    @rule()
    def regex_refresh_is_due(self):
        self.now += 10_001  # regexes are resolved again at most every 10 s

    @rule()
    def restart(self):
        before = snapshot(self.cg)
        fresh = ConsumerGroups(self.cg.config)
        for key, value in self.log:
            fresh.replay(decode_key(key), value)
        fresh.loaded(self.now)
        assert snapshot(fresh) == before
        self.cg = fresh

    @rule()
    def converge(self):
        """Every client keeps heartbeating and acknowledging: the group must settle with
        every subscribed partition owned by exactly one member."""
        live = [c for c in self.clients if c.member_id is not None]
        self.now += 10_001  # a regex refresh is due: new topics must be picked up
        for _round in range(12):
            for c in live:
                self.heartbeat(c.index, True)
            live = [c for c in live if c.member_id is not None]
        if not live:
            return
        for c in live:
            self.heartbeat(c.index, True)
        g = self.cg.groups[GROUP]
        # A static member away (epoch -2) keeps its partitions until its session ends:
        # the others may wait for them (UNRELEASED_PARTITIONS); without one, all settle.
        away = any(m.member_epoch < 0 for m in g.members.values())
        for c in live:
            m = g.members[c.member_id]
            target = {t: ps for t, ps in g.target.get(c.member_id, {}).items() if ps}
            assert m.member_epoch == g.assignment_epoch, m
            if away:
                assert all(ps <= target.get(t, frozenset()) for t, ps in c.owned.items())
            else:
                assert m.state.name == "STABLE", m
                assert c.owned == target
        if not away:
            assert g.state == "Stable", (g.state, snapshot(self.cg))
        subscribed = {t for m in g.members.values() for t in m.subscription.subscribed_topic_names}
        if any(m.subscription.subscribed_topic_regex for m in g.members.values()):
            subscribed |= {t for t in self.image if t in ("a", "c")}  # REGEX's topics
        expected = {(tid, p) for name, (tid, n) in self.image.items() if name in subscribed
                    for p in range(n)}
        targets = [(t, p) for a in g.target.values() for t, ps in a.items() for p in ps]
        assert sorted(targets) == sorted(expected)

    # -- invariants --------------------------------------------------------------------

    @invariant()
    def no_partition_owned_twice(self):
        g = self.cg.groups.get(GROUP)
        if g is not None:
            seen = {}
            for m in g.members.values():
                for part in (m.assigned, m.pending_revocation):
                    for t, ps in part.items():
                        for p in ps:
                            assert (t, p) not in seen, (t, p, seen.get((t, p)), m.member_id)
                            seen[(t, p)] = m.member_id
            assert seen == g.owners
        consumed = {}
        for c in self.clients:
            if self._alive(c):
                for t, ps in c.owned.items():
                    for p in ps:
                        assert (t, p) not in consumed, (t, p)
                        consumed[(t, p)] = c.index

    @invariant()
    def epochs_only_grow(self):
        g = self.cg.groups.get(GROUP)
        if g is None:
            return
        assert (g.group_epoch, g.assignment_epoch) >= self.group_epochs
        assert g.assignment_epoch <= g.group_epoch
        self.group_epochs = (g.group_epoch, g.assignment_epoch)
        for m in g.members.values():
            # KIP-1251: every held partition has the epoch it was assigned at, no later
            # than the member's epoch.
            assert set(m.assignment_epochs) == m.held()
            assert all(e <= max(m.member_epoch, 0) for e in m.assignment_epochs.values())
            if m.member_epoch >= 0:
                assert m.member_epoch >= self.epochs.get(m.member_id, 0)
                assert m.member_epoch <= g.assignment_epoch
                self.epochs[m.member_id] = m.member_epoch


ConsumerGroupMachine.TestCase.settings = settings(
    max_examples=400, stateful_step_count=50, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestConsumerGroupMachine = ConsumerGroupMachine.TestCase


def test_an_assignment_from_before_a_lost_heartbeat_is_not_applied():
    """`make model-check` (seed 3332621771, scale 3): client 1 got partitions at its join,
    reported owning none (it had not taken them yet) in a heartbeat whose answer was
    lost, and the coordinator gave one of them to client 0 meanwhile. Had the client
    then taken the old assignment it would have consumed a partition client 0 owned;
    the answer to its next, full, heartbeat tells it the current one."""
    state = ConsumerGroupMachine()
    state.join(i=1)
    state.join(i=2)
    state.join(i=0)
    state.heartbeat(ack=False, i=1, lost=True, report=True)
    state.no_partition_owned_twice()
    state.heartbeat(ack=False, i=0, lost=False, report=False)
    state.heartbeat(ack=True, i=0, lost=False, report=False)
    state.no_partition_owned_twice()
    state.heartbeat(ack=True, i=1, lost=True, report=False)
    state.no_partition_owned_twice()
    state.converge()
    state.no_partition_owned_twice()
