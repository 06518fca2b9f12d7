"""A hypothesis stateful model of the online migration between a classic group and a
consumer group (KIP-848, ``coordinator/group/migration.py`` and ``consumer_classic.py``),
driven like real clients: the group starts as a Stable classic group of two eager
classic consumers; consumer-protocol clients join (upgrading it), heartbeat and leave
(the last one leaving downgrades it); classic clients heartbeat, rejoin and sync inside
the consumer group, or are told to rebalance in the classic one; sessions and join
timeouts expire; the coordinator restarts from its records at any point.

Invariants: no partition is owned by two live clients at once, and none by two members
on the server (consumer group owners, classic group assignments), across conversions;
the group's epoch (the consumer group epoch, or the classic generation) and every
member's epoch only grow; replaying the records gives the same groups."""

from __future__ import annotations

import itertools
import struct
import uuid

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from kio.schema.errors import ErrorCode as E
from txbroker.coordinator.group import migration
from txbroker.coordinator.group.consumer_classic import ClassicJoinRequest
from txbroker.coordinator.group.consumer_records import ConsumerRecordKey
from txbroker.coordinator.group.consumer_state import (
    ConsumerGroupConfig,
    ConsumerGroups,
    HeartbeatRequest,
)
from txbroker.coordinator.group.records import (
    GroupMetadataValue,
    MemberMetadata,
    decode_key,
    encode_group_metadata_key,
    encode_group_metadata_value,
)
from txbroker.coordinator.group.state import GroupConfig, GroupCoordinatorState
from txbroker.protocol.consumer_protocol import (
    decode_consumer_assignment,
    encode_consumer_assignment,
)

from .test_consumer_group_model import snapshot

GROUP = "g"
SESSION = 60_000
TOPIC = "a"
TID = uuid.UUID(int=1)
PARTITIONS = 4
CONSUMERS = (0, 1)  # consumer-protocol clients
CLASSICS = (2, 3)  # eager classic clients
SUBSCRIPTION = struct.pack(">hih1si", 0, 1, 1, TOPIC.encode(), -1)  # v0, ["a"], no user data


class Client:
    def __init__(self, index: int) -> None:
        self.index = index
        self.member_id: str | None = None
        self.epoch = 0  # member epoch, or generation for a classic client
        self.owned: set[int] = set()
        self.pending: set[int] | None = None
        self.incarnation = 0

    def reset(self) -> None:
        self.member_id, self.epoch, self.owned, self.pending = None, 0, set(), None


def _parts(a) -> set[int]:
    return set((a or {}).get(TID, frozenset()))


class MigrationMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.ids = itertools.count()
        self.now = 0
        self.log: list = []
        self.image = {TOPIC: (TID, PARTITIONS)}
        self.clients = [Client(i) for i in range(4)]
        self.state, self.cg = self._fresh()
        # The start: a Stable classic group (generation 1) of the two classic clients.
        members = []
        for c, parts in zip((self.clients[2], self.clients[3]), ({0, 1}, {2, 3}), strict=True):
            c.member_id, c.epoch, c.owned = f"k{c.index}-0", 1, parts
            members.append(MemberMetadata(c.member_id, None, f"k{c.index}", "h", SESSION,
                                          SESSION, SUBSCRIPTION,
                                          encode_consumer_assignment(0, {TOPIC: sorted(parts)})))
        value = GroupMetadataValue("consumer", 1, "range", members[0].member_id, 0,
                                   tuple(members))
        self.log.append((encode_group_metadata_key(GROUP), encode_group_metadata_value(value)))
        self._effects(self.state.load_group(GROUP, value, self.now))
        self.group_epoch = 1
        self.member_epochs: dict[str, int] = {}

    def _fresh(self):
        state = GroupCoordinatorState(GroupConfig(min_session_timeout_ms=1,
                                                  initial_rebalance_delay_ms=0),
                                      lambda prefix: f"{prefix}-{next(self.ids)}")
        cg = ConsumerGroups(ConsumerGroupConfig(heartbeat_interval_ms=100,
                                                session_timeout_ms=SESSION))
        return state, cg

    def _effects(self, effects) -> None:
        """The shell's part for the classic coordinator: writes are durable at once."""
        for p in effects.persist:
            self.log.append((p.key, p.value))
            self._effects(self.state.group_persisted(self.now, p.write_id))

    def _consumer(self) -> bool:
        return GROUP in self.cg.groups

    def _alive(self, c: Client) -> bool:
        if c.member_id is None:
            return False
        if self._consumer():
            return c.member_id in self.cg.groups[GROUP].members
        classic = self.state.classic_group(GROUP)
        return classic is not None and c.member_id in classic.members

    def _downgrade(self) -> None:
        records, value = migration.downgrade(self.cg, 100, GROUP, self.now)
        self.log.extend(records)
        if value is not None:
            self._effects(self.state.adopt_group(GROUP, value, self.now))

    # -- consumer-protocol clients -------------------------------------------------------

    def _send(self, c: Client, epoch: int, owned: set[int] | None):
        req = HeartbeatRequest(
            group_id=GROUP, member_id=c.member_id or "", member_epoch=epoch,
            rebalance_timeout_ms=SESSION if epoch == 0 else -1,
            subscribed_topic_names=(TOPIC,) if epoch == 0 else None,
            owned=None if owned is None else ({TID: frozenset(owned)} if owned else {}),
            client_id=f"c{c.index}")
        r = self.cg.heartbeat(self.now, req, self.image)
        self.log.extend(r.records)
        return r

    @rule(i=st.sampled_from(CONSUMERS))
    def consumer_join(self, i):
        c = self.clients[i]
        if c.member_id is not None:
            return
        classic = self.state.classic_group(GROUP)
        if classic is not None:
            if classic.members:
                records, effects, why = migration.upgrade(self.state, self.cg, GROUP,
                                                          self.image, self.now)
                assert effects is not None, why
                self._effects(effects)
                self.log.extend(records)
            else:
                # An Empty classic group is replaced: the new group's epochs start over.
                assert self.state.delete_group(GROUP) == 0
                self.log.append((encode_group_metadata_key(GROUP), None))
                self.group_epoch = 0
                self.member_epochs.clear()
        c.incarnation += 1
        c.member_id = f"c{i}-{c.incarnation}"
        r = self._send(c, 0, set())
        assert r.error == 0, r
        c.epoch, c.pending = r.member_epoch, _parts(r.assignment)

    @rule(i=st.sampled_from(CONSUMERS), ack=st.booleans())
    def consumer_heartbeat(self, i, ack):
        c = self.clients[i]
        if c.member_id is None:
            return
        if not self._alive(c):
            c.reset()
            return
        if ack and c.pending is not None:
            c.owned, c.pending = c.pending, None
        r = self._send(c, c.epoch, set(c.owned))
        if r.error:
            assert r.error in (E.unknown_member_id.value, E.fenced_member_epoch.value), r
            c.reset()
            return
        assert r.member_epoch >= c.epoch
        c.epoch = r.member_epoch
        if r.assignment is not None:
            c.pending = _parts(r.assignment)

    @rule(i=st.sampled_from(CONSUMERS))
    def consumer_leave(self, i):
        c = self.clients[i]
        if self._alive(c):
            assert self._send(c, -1, None).error == 0
            self._downgrade()
        c.reset()

    # -- classic clients ---------------------------------------------------------------------

    @rule(k=st.sampled_from(CLASSICS))
    def classic_join_and_sync(self, k):
        """An eager client (re)joins: it gives up what it owns first."""
        c = self.clients[k]
        if not self._consumer() or not self.cg.groups[GROUP].members:
            return
        c.owned, c.pending = set(), None

        def join(member_id: str):
            return self.cg.classic_join(self.now, ClassicJoinRequest(
                GROUP, member_id, None, f"k{k}", "h", SESSION, SESSION, "consumer",
                (("range", SUBSCRIPTION),), True), self.image)

        result, records = join(c.member_id or "")
        self.log.extend(records)
        if result.error == E.member_id_required.value:
            result, records = join(result.member_id)
            self.log.extend(records)
        if result.error:
            assert result.error == E.unknown_member_id.value, result
            c.reset()
            return
        c.member_id, c.epoch = result.member_id, result.generation_id
        sync = self.cg.classic_sync(self.now, GROUP, c.epoch, c.member_id, None, "consumer",
                                    "range")
        if sync.error == 0:
            c.owned = {p for t, p in decode_consumer_assignment(sync.assignment) if t == TOPIC}
        else:
            assert sync.error == E.rebalance_in_progress.value, sync

    @rule(k=st.sampled_from(CLASSICS))
    def classic_heartbeat(self, k):
        c = self.clients[k]
        if c.member_id is None:
            return
        if self._consumer():
            error = self.cg.classic_heartbeat(self.now, GROUP, c.epoch, c.member_id, None)
        else:
            error = self.state.heartbeat(self.now, GROUP, c.epoch, c.member_id, None)
        if error == E.unknown_member_id.value:
            c.reset()
        elif error:
            # REBALANCE_IN_PROGRESS / ILLEGAL_GENERATION: an eager client revokes all.
            assert error in (E.rebalance_in_progress.value, E.illegal_generation.value), error
            c.owned = set()

    @rule(k=st.sampled_from(CLASSICS))
    def classic_leave(self, k):
        c = self.clients[k]
        if self._alive(c):
            if self._consumer():
                errors, records = self.cg.classic_leave(GROUP, [(c.member_id, None)])
                self.log.extend(records)
                assert errors == [0]
            else:
                result = self.state.leave(self.now, GROUP, [(c.member_id, None)])
                self._effects(result.effects)
        c.reset()

    # -- time, restarts ------------------------------------------------------------------------

    @rule(ms=st.sampled_from([1_000, SESSION + 1]))
    def time_passes(self, ms):
        self.now += ms
        for _group, records, _why in self.cg.tick(self.now):
            self.log.extend(records)
            self._downgrade()
        self._effects(self.state.tick(self.now))
        for c in self.clients:
            if c.member_id is not None and not self._alive(c):
                c.owned, c.pending = set(), None  # fenced: it stops consuming

    @rule()
    def restart(self):
        before = self._groups()
        self.state, self.cg = self._fresh()
        for key, value in self.log:
            k = decode_key(key)
            if isinstance(k, ConsumerRecordKey):
                self.cg.replay(k, value)
            else:
                self._effects(self.state.replay(key, value, self.now))
        self.cg.loaded(self.now)
        assert self._groups() == before

    def _groups(self):
        """What a restart must keep: the consumer group as is, or the classic group's
        generation (its members change only with a completed rebalance's record)."""
        classic = self.state.classic_group(GROUP)
        return (snapshot(self.cg), None if classic is None else
                (classic.generation_id, classic.protocol_type))

    # -- invariants ------------------------------------------------------------------------

    @invariant()
    def no_partition_owned_twice(self):
        seen: dict[int, int] = {}
        for c in self.clients:
            if self._alive(c):
                for p in c.owned:
                    assert p not in seen, (p, seen[p], c.index)
                    seen[p] = c.index
        g = self.cg.groups.get(GROUP)
        if g is not None:
            held = {}
            for m in g.members.values():
                for tp in m.held():
                    assert tp not in held, (tp, held[tp], m.member_id)
                    held[tp] = m.member_id
            assert held == g.owners
        classic = self.state.classic_group(GROUP)
        if classic is not None:
            assigned = [tp for m in classic.members.values()
                        for tp in decode_consumer_assignment(m.assignment)]
            assert len(assigned) == len(set(assigned)), assigned

    @invariant()
    def epochs_only_grow(self):
        g = self.cg.groups.get(GROUP)
        classic = self.state.classic_group(GROUP)
        epoch = g.group_epoch if g is not None else classic.generation_id if classic else 0
        assert epoch >= self.group_epoch, (epoch, self.group_epoch)
        self.group_epoch = epoch
        members = g.members.values() if g is not None else ()
        for m in members:
            if m.member_epoch >= 0:
                assert m.member_epoch >= self.member_epochs.get(m.member_id, 0), m
                self.member_epochs[m.member_id] = m.member_epoch
        if classic is not None:
            for mid in classic.members:
                assert classic.generation_id >= self.member_epochs.get(mid, 0)
                self.member_epochs[mid] = classic.generation_id


MigrationMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestMigrationMachine = MigrationMachine.TestCase
