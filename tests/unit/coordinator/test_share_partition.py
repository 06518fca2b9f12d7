"""SharePartition (``coordinator/share/partition.py``): a hypothesis stateful model and
unit tests of each acknowledgement error and rule.

The model drives one share-partition like a share group's broker does: producers
append batches (some in transactions that commit or abort, so the LSO moves), members
fetch (acquire) and acknowledge with every type, time passes and locks expire, members
leave, and the broker crashes: the partition is rebuilt from the ``__share_group_state``
records it wrote (encoded and decoded by ``records.py``). Invariants: no record is
handed to a second member while a lock on it is live; an ACCEPTed record is never
acquired again, also after a crash; each delivery of a record has a delivery count one
higher than the last (so a crash never hides a delivery) and never above the limit;
a record released or expired at the limit is archived; the SPSO never passes a record
that is AVAILABLE or ACQUIRED; the window stays within the record-lock cap; under
read_committed nothing of an aborted transaction and nothing at or after the LSO is
acquired."""

from __future__ import annotations

import uuid

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from kio.schema.errors import ErrorCode
from txbroker.coordinator.share.partition import SharePartition
from txbroker.coordinator.share.records import (
    SHARE_SNAPSHOT,
    SHARE_UPDATE,
    ShareSnapshotValue,
    ShareStateKey,
    ShareUpdateValue,
    decode_key,
    decode_value,
    encode_key,
    encode_snapshot_value,
    encode_update_value,
    replay,
)
from txbroker.coordinator.share.results import (
    AcknowledgementBatch,
    FetchedBatch,
    SharePartitionConfig,
)
from txbroker.coordinator.share.state import (
    AcknowledgeType,
    PersistedShareState,
    RecordState,
    ShareStateWrite,
    StateBatch,
    apply_write,
    combine_state_batches,
)

LIMIT = 3
CAP = 24
LOCK = 1000
MEMBERS = ("m0", "m1", "m2")
TOPIC = uuid.UUID(int=7)
UPDATES_PER_SNAPSHOT = 4
ACK_TYPES = (AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT,
             AcknowledgeType.GAP, AcknowledgeType.RENEW)


class ShareStateStore:
    """What the share coordinator does with writes: ShareUpdate records, a ShareSnapshot
    every few updates, all as the bytes Kafka would write."""

    def __init__(self, initial: PersistedShareState) -> None:
        self.records: list[tuple[bytes, bytes | None]] = []
        self.state = initial
        self.snapshot_epoch = -1
        self.updates = 0
        self._snapshot(initial)

    def _snapshot(self, state: PersistedShareState) -> None:
        self.snapshot_epoch += 1
        self.updates = 0
        value = ShareSnapshotValue(self.snapshot_epoch, state.state_epoch, state.leader_epoch,
                                   state.start_offset, 0, 0, state.state_batches,
                                   state.delivery_complete_count)
        self.records.append((encode_key(ShareStateKey(SHARE_SNAPSHOT, "g", TOPIC, 0)),
                             encode_snapshot_value(value)))
        self.state = state

    def write(self, write: ShareStateWrite | None) -> None:
        if write is None:
            return
        new = apply_write(self.state, write)
        if self.updates >= UPDATES_PER_SNAPSHOT:
            self._snapshot(new)
            return
        value = ShareUpdateValue(self.snapshot_epoch, new.leader_epoch, new.start_offset,
                                 combine_state_batches((), write.state_batches, new.start_offset),
                                 new.delivery_complete_count)
        self.records.append((encode_key(ShareStateKey(SHARE_UPDATE, "g", TOPIC, 0)),
                             encode_update_value(value)))
        self.updates += 1
        self.state = new

    def reset(self, state: PersistedShareState) -> None:
        self._snapshot(state)

    def load(self) -> PersistedShareState:
        state = None
        for k, v in self.records:
            key = decode_key(k)
            state = replay(state, decode_value(key, v))
        assert state is not None
        return state


def _config(read_committed: bool = False, **kw) -> SharePartitionConfig:
    base = dict(record_lock_duration_ms=LOCK, delivery_count_limit=LIMIT,
                partition_max_record_locks=CAP,
                isolation_level="read_committed" if read_committed else "read_uncommitted")
    base.update(kw)
    return SharePartitionConfig(**base)


class SharePartitionMachine(RuleBasedStateMachine):
    @initialize(read_committed=st.booleans(), start=st.integers(0, 3),
                produced=st.lists(st.integers(1, 4), max_size=4))
    def init(self, read_committed: bool, start: int, produced: list[int]) -> None:
        self.cfg = _config(read_committed)
        self.read_committed = read_committed
        self.log: list[tuple[int, int]] = [(0, start - 1)] if start else []
        self.markers: list[int] = []  # offsets of transaction markers (control batches)
        self.hw = start
        self.txn: list[tuple[int, int]] | None = None
        self.aborted: list[tuple[int, int]] = []
        self.aborted_offsets: set[int] = set()
        self.now = 0
        self.p, snap = SharePartition.initialize(self.cfg, start)
        self.store = ShareStateStore(snap)
        self.initial_start = start
        self.checked_upto = start
        # The model's own view.
        self.holders: dict[int, tuple[str, int]] = {}  # offset -> (member, lock deadline)
        self.delivered: dict[int, int] = {}  # offset -> delivery count of its last delivery
        self.accepted: set[int] = set()
        self.terminal: set[int] = set()
        for n in produced:
            self._append(n)

    # -- the log ------------------------------------------------------------------------------

    @property
    def lso(self) -> int:
        return self.txn[0][0] if self.txn else self.hw

    def _append(self, n: int) -> tuple[int, int]:
        batch = (self.hw, self.hw + n - 1)
        self.log.append(batch)
        self.hw += n
        return batch

    @rule(n=st.integers(1, 4))
    def produce(self, n: int) -> None:
        self._append(n)

    @rule(n=st.integers(1, 3))
    def produce_transactional(self, n: int) -> None:
        batch = self._append(n)
        if self.txn is None:
            self.txn = []
        self.txn.append(batch)

    @precondition(lambda self: self.txn is not None)
    @rule(commit=st.booleans())
    def end_transaction(self, commit: bool) -> None:
        if not commit:
            self.aborted.extend(self.txn)
            for a, b in self.txn:
                self.aborted_offsets.update(range(a, b + 1))
        self.txn = None
        # The marker: an offset with no record to deliver (done from the start).
        self.markers.append(self.hw)
        self.terminal.add(self.hw)
        self.hw += 1

    # -- the share group ------------------------------------------------------------------------

    def _persist(self, write: ShareStateWrite | None) -> None:
        self.store.write(write)

    def _give_back(self, offset: int) -> None:
        """A held record goes back (release, expiry, leave, crash): archived at the limit."""
        self.holders.pop(offset, None)
        if self.delivered[offset] >= LIMIT:
            self.terminal.add(offset)

    @rule(member=st.sampled_from(MEMBERS), max_records=st.integers(1, 10),
          n_batches=st.integers(1, 4), stop_at_lso=st.booleans(), record_limit=st.booleans())
    def fetch(self, member: str, max_records: int, n_batches: int, stop_at_lso: bool,
              record_limit: bool) -> None:
        self._fetch(member, max_records, n_batches, stop_at_lso, record_limit)

    @rule(member=st.sampled_from(MEMBERS), n=st.integers(1, 4))
    def produce_and_fetch(self, member: str, n: int) -> None:
        self._append(n)
        self._fetch(member, 10, 4, True)

    def _fetch(self, member: str, max_records: int, n_batches: int, stop_at_lso: bool,
               record_limit: bool = False) -> None:
        fetch_offset = self.p.next_fetch_offset()
        end = self.lso if (self.read_committed and stop_at_lso) else self.hw
        # The read: n_batches log batches, markers among them, as the coordinator reads.
        entries = sorted([(a, b, False) for a, b in self.log]
                         + [(m, m, True) for m in self.markers])
        read = [e for e in entries if e[1] >= fetch_offset and e[0] < end][:n_batches]
        batches = [FetchedBatch(a, b) for a, b, control in read if not control]
        lso = self.lso
        r = self.p.acquire(member, batches, fetch_offset=fetch_offset, now_ms=self.now,
                           max_records=max_records, last_stable_offset=lso,
                           aborted_ranges=self.aborted, record_limit=record_limit,
                           read_end=read[-1][1] + 1 if read else None)
        if record_limit:  # ShareAcquireMode record_limit: never more than asked
            assert sum(a.last_offset - a.first_offset + 1 for a in r.acquired) <= max_records
        for a in r.acquired:
            for o in range(a.first_offset, a.last_offset + 1):
                assert o not in self.holders, f"{o} acquired while {self.holders[o]} holds it"
                assert o not in self.accepted, f"accepted {o} acquired again"
                assert o not in self.terminal, f"terminal {o} acquired again"
                assert self.initial_start <= o < self.hw
                if self.read_committed:
                    assert o < lso, f"{o} acquired at/after the LSO {lso}"
                    assert o not in self.aborted_offsets, f"aborted {o} acquired"
                assert a.delivery_count <= LIMIT
                assert a.delivery_count == self.delivered.get(o, 0) + 1, (o, a, self.delivered.get(o))
                self.holders[o] = (member, self.now + LOCK)
                self.delivered[o] = a.delivery_count
        for x, y in r.archived:
            for o in range(x, y + 1):
                assert o not in self.holders
                assert o in self.markers or (self.read_committed and o in self.aborted_offsets), \
                    f"{o} archived on fetch"
                self.terminal.add(o)
        self._persist(r.write)

    def _held(self, member: str) -> list[int]:
        return sorted(o for o, (m, _) in self.holders.items() if m == member)

    @precondition(lambda self: self.holders)
    @rule(data=st.data())
    def acknowledge(self, data) -> None:
        self._acknowledge(data)

    @precondition(lambda self: self.holders)
    @rule(data=st.data())
    def acknowledge_more(self, data) -> None:
        self._acknowledge(data)  # a second rule: acknowledging is what members do most

    def _acknowledge(self, data) -> None:
        member = data.draw(st.sampled_from(sorted({m for m, _ in self.holders.values()})))
        held = self._held(member)
        i = data.draw(st.integers(0, len(held) - 1))
        j = i
        n = data.draw(st.integers(1, 6))
        while j + 1 < len(held) and held[j + 1] == held[j] + 1 and j - i + 1 < n:
            j += 1
        first, last = held[i], held[j]
        if data.draw(st.booleans()):
            types = (data.draw(st.sampled_from(ACK_TYPES)),)
        else:
            types = tuple(data.draw(st.lists(st.sampled_from(ACK_TYPES), min_size=last - first + 1,
                                             max_size=last - first + 1)))
        r = self.p.acknowledge(member, [AcknowledgementBatch(first, last, types)], now_ms=self.now)
        assert r.error_code == ErrorCode.none, r
        for k, o in enumerate(range(first, last + 1)):
            t = types[0] if len(types) == 1 else types[k]
            if t == AcknowledgeType.RENEW:
                self.holders[o] = (member, self.now + LOCK)
            elif t == AcknowledgeType.ACCEPT:
                self.holders.pop(o)
                self.accepted.add(o)
                self.terminal.add(o)
            elif t == AcknowledgeType.RELEASE:
                self._give_back(o)
            else:
                self.holders.pop(o)
                self.terminal.add(o)
        self._persist(r.write)

    @rule(member=st.sampled_from(MEMBERS), data=st.data())
    def acknowledge_what_is_not_ours(self, member: str, data) -> None:
        """An offset of the window this member does not hold: INVALID_RECORD_STATE, and
        nothing changes (a valid batch before it in the same request is not applied)."""
        held = set(self._held(member))
        candidates = [o for o in range(self.p.start_offset, self.p.end_offset) if o not in held]
        if not candidates:
            return
        o = data.draw(st.sampled_from(candidates))
        t = data.draw(st.sampled_from(ACK_TYPES))
        batches = []
        mine = [h for h in sorted(held) if h < o]
        if mine:
            batches.append(AcknowledgementBatch(mine[-1], mine[-1], (AcknowledgeType.ACCEPT,)))
        batches.append(AcknowledgementBatch(o, o, (t,)))
        before = self.p.in_flight, self.p.start_offset, self.p.end_offset
        r = self.p.acknowledge(member, batches, now_ms=self.now)
        assert r.error_code == ErrorCode.invalid_record_state, r
        assert r.write is None
        assert (self.p.in_flight, self.p.start_offset, self.p.end_offset) == before

    @rule(ms=st.integers(1, 700))
    def time_passes(self, ms: int) -> None:
        self.now += ms
        r = self.p.tick(self.now)
        expired = {o for o, (_, d) in self.holders.items() if d <= self.now}
        got = {o for a, b, _ in r.released for o in range(a, b + 1)}
        assert got == expired, (got, expired)
        for a, b, m in r.released:
            for o in range(a, b + 1):
                assert self.holders[o][0] == m
        for o in expired:
            self._give_back(o)
        self._persist(r.write)

    @rule(member=st.sampled_from(MEMBERS))
    def member_leaves(self, member: str) -> None:
        r = self.p.release_acquired_records(member)
        got = {o for a, b, _ in r.released for o in range(a, b + 1)}
        assert got == set(self._held(member))
        for o in got:
            self._give_back(o)
        self._persist(r.write)

    @rule()
    def crash(self) -> None:
        """The broker restarts: the partition comes back from its records alone."""
        state = self.store.load()
        assert state == self.store.state
        self.p = SharePartition.from_persisted(self.cfg, state)
        for o in list(self.holders):
            self._give_back(o)

    # -- invariants ------------------------------------------------------------------------------

    @invariant()
    def window_is_bounded(self) -> None:
        assert self.p.start_offset <= self.p.end_offset
        # A batch begun below the cap is taken whole: the window passes it by less than
        # one batch (the model's batches hold at most 4 records).
        assert self.p.in_flight_record_count <= CAP + 3

    @invariant()
    def start_offset_passes_only_finished_records(self) -> None:
        for o in range(self.checked_upto, self.p.start_offset):
            assert o in self.terminal, f"SPSO {self.p.start_offset} passed unfinished {o}"
            assert o not in self.holders
        self.checked_upto = max(self.checked_upto, self.p.start_offset)

    @invariant()
    def server_matches_the_model(self) -> None:
        acquired = {}
        for b in self.p.in_flight:
            assert b.delivery_count <= LIMIT
            if b.state is RecordState.AVAILABLE:
                assert b.delivery_count < LIMIT, f"available at the limit: {b}"
            for o in range(b.first_offset, b.last_offset + 1):
                if b.state is RecordState.ACQUIRED:
                    acquired[o] = (b.member_id, b.lock_deadline_ms)
                if o in self.delivered:
                    assert b.delivery_count == self.delivered[o], (o, b)
                if o in self.accepted:
                    assert b.state is RecordState.ACKNOWLEDGED
                elif o in self.terminal:
                    assert b.state is RecordState.ARCHIVED
                else:
                    assert not b.state.terminal, (o, b)
        assert acquired == self.holders


SharePartitionMachine.TestCase.settings = settings(
    max_examples=300, stateful_step_count=50, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestSharePartitionMachine = SharePartitionMachine.TestCase


# -- unit tests -------------------------------------------------------------------------------


def _acquired(limit: int = 5, **kw) -> SharePartition:
    """Offsets 0-9 in two batches, acquired by m1."""
    p, _ = SharePartition.initialize(_config(delivery_count_limit=limit, **kw), 0)
    r = p.acquire("m1", [FetchedBatch(0, 4), FetchedBatch(5, 9)], fetch_offset=0, now_ms=0,
                  max_records=100)
    assert r.count == 10
    return p


def _ack(p: SharePartition, member: str, *batches: tuple[int, int, tuple[int, ...]], now: int = 0):
    return p.acknowledge(member, [AcknowledgementBatch(a, b, t) for a, b, t in batches], now_ms=now)


def test_malformed_acknowledgement_batches_are_invalid_request() -> None:
    p = _acquired()
    for batches in ([(4, 3, (1,))],                 # first after last
                    [(5, 6, (1,)), (2, 3, (1,))],   # out of order
                    [(0, 3, ())],                    # no types
                    [(0, 3, (1, 1))],                # types do not match the offsets
                    [(0, 0, (5,))],                  # unknown type
                    [(0, 0, (-1,))],
                    [(8, 12, (1,))]):                # past the acquired records
        r = _ack(p, "m1", *batches)
        assert r.error_code == ErrorCode.invalid_request, batches
        assert r.write is None
    assert all(b.state is RecordState.ACQUIRED for b in p.in_flight)


def test_acknowledging_records_of_another_member_is_invalid_record_state() -> None:
    p = _acquired()
    r = _ack(p, "m2", (0, 4, (AcknowledgeType.ACCEPT,)))
    assert r.error_code == ErrorCode.invalid_record_state


def test_acknowledging_twice_is_invalid_record_state() -> None:
    p = _acquired()
    assert _ack(p, "m1", (2, 3, (1,))).error_code == ErrorCode.none
    assert _ack(p, "m1", (3, 3, (1,))).error_code == ErrorCode.invalid_record_state
    # A batch starting at the previous batch's last offset (KafkaApis lets it through).
    assert _ack(p, "m1", (4, 5, (1,)), (5, 6, (1,))).error_code == ErrorCode.invalid_record_state
    assert p.record_state(4).state is RecordState.ACQUIRED  # all or nothing


def test_acknowledging_after_the_lock_expired_is_invalid_record_state() -> None:
    p = _acquired()
    released = p.tick(LOCK)
    assert [(a, b) for a, b, _ in released.released] == [(0, 4), (5, 9)]
    assert _ack(p, "m1", (0, 4, (1,)), now=LOCK).error_code == ErrorCode.invalid_record_state
    assert p.next_fetch_offset() == 0


def test_renew_extends_the_lock_and_is_refused_when_disabled() -> None:
    p = _acquired()
    assert _ack(p, "m1", (0, 4, (AcknowledgeType.RENEW,)), now=900).write is None
    r = p.tick(LOCK)
    assert [(a, b) for a, b, _ in r.released] == [(5, 9)]
    assert p.next_lock_deadline_ms() == 900 + LOCK
    q = _acquired(renew_acknowledge_enable=False)
    assert _ack(q, "m1", (0, 0, (AcknowledgeType.RENEW,))).error_code == ErrorCode.invalid_record_state


def test_acknowledgements_below_the_start_offset_are_skipped() -> None:
    p = _acquired()
    assert _ack(p, "m1", (0, 4, (1,))).error_code == ErrorCode.none
    assert p.start_offset == 5
    r = _ack(p, "m1", (0, 4, (1,)), (5, 5, (1,)))
    assert r.error_code == ErrorCode.none and p.start_offset == 6


def test_each_acknowledge_type_and_the_start_offset() -> None:
    p = _acquired()
    r = _ack(p, "m1", (0, 4, (AcknowledgeType.ACCEPT, AcknowledgeType.GAP, AcknowledgeType.REJECT,
                              AcknowledgeType.RELEASE, AcknowledgeType.ACCEPT)))
    assert r.error_code == ErrorCode.none
    assert p.start_offset == 3  # 0-2 done, 3 released
    assert p.record_state(3).state is RecordState.AVAILABLE
    assert p.next_fetch_offset() == 3
    assert r.write.start_offset == 3
    assert r.write.state_batches == (StateBatch(3, 3, 0, 1), StateBatch(4, 4, 2, 1))
    assert r.write.delivery_complete_count == 1


def test_records_at_the_delivery_count_limit_are_archived() -> None:
    p = _acquired(limit=2)
    p.tick(LOCK)  # 0-9 available, delivered once
    r = p.acquire("m2", [FetchedBatch(0, 4)], fetch_offset=0, now_ms=LOCK, max_records=5)
    assert [a.delivery_count for a in r.acquired] == [2]
    assert _ack(p, "m2", (0, 4, (AcknowledgeType.RELEASE,)), now=LOCK).error_code == ErrorCode.none
    assert p.start_offset == 5  # archived at the limit, so the SPSO passes them
    r = p.acquire("m2", [FetchedBatch(5, 9)], fetch_offset=5, now_ms=LOCK, max_records=5)
    p.release_acquired_records("m2")
    assert p.start_offset == 10 and p.in_flight == ()


def test_max_record_locks_bounds_the_window() -> None:
    # As Kafka 4.4: a batch begun below the cap is taken whole (Kafka's first ShareFetch
    # of a 9,082-record producer batch acquires all of it, cap 2,000); no batch is begun
    # at or past the cap.
    p, _ = SharePartition.initialize(_config(partition_max_record_locks=6), 0)
    r = p.acquire("m1", [FetchedBatch(0, 4), FetchedBatch(5, 9), FetchedBatch(10, 12)],
                  fetch_offset=0, now_ms=0, max_records=100)
    # (consecutive new batches are one AcquiredRecords range, as Kafka answers)
    assert [(a.first_offset, a.last_offset) for a in r.acquired] == [(0, 9)]
    assert p.in_flight_record_count == 10 and not p.can_acquire_records()
    assert p.acquire("m2", [FetchedBatch(10, 12)], fetch_offset=10, now_ms=0,
                     max_records=9).count == 0
    _ack(p, "m1", (0, 5, (1,)))  # 6 accepted: the window is 6-9, 4 records
    r = p.acquire("m2", [FetchedBatch(10, 12)], fetch_offset=10, now_ms=0, max_records=9)
    assert [(a.first_offset, a.last_offset) for a in r.acquired] == [(10, 12)]
    assert p.in_flight_record_count == 7


def test_read_committed_archives_aborted_records_and_stops_at_the_lso() -> None:
    p, _ = SharePartition.initialize(_config(read_committed=True), 0)
    r = p.acquire("m1", [FetchedBatch(0, 2), FetchedBatch(3, 5), FetchedBatch(6, 8), FetchedBatch(9, 9)],
                  fetch_offset=0, now_ms=0, max_records=100, last_stable_offset=9,
                  aborted_ranges=[(3, 5)])
    assert [(a.first_offset, a.last_offset) for a in r.acquired] == [(0, 2), (6, 8)]
    assert r.archived == ((3, 5),)
    assert p.end_offset == 9
    assert _ack(p, "m1", (0, 2, (1,))).error_code == ErrorCode.none
    assert p.start_offset == 6  # over the aborted records
    # read_uncommitted delivers them
    q, _ = SharePartition.initialize(_config(), 0)
    r = q.acquire("m1", [FetchedBatch(0, 5)], fetch_offset=0, now_ms=0, max_records=100,
                  last_stable_offset=3, aborted_ranges=[(3, 5)])
    assert r.count == 6


def test_records_the_log_no_longer_has_are_archived() -> None:
    p = _acquired()
    p.tick(LOCK)
    # Compaction removed 0-4 and 7: the read from 0 starts at 5 and skips 7.
    r = p.acquire("m2", [FetchedBatch(5, 6), FetchedBatch(8, 9)], fetch_offset=0, now_ms=LOCK,
                  max_records=100)
    assert [(a.first_offset, a.last_offset) for a in r.acquired] == [(5, 6), (8, 9)]
    assert set(r.archived) == {(0, 4), (7, 7)}
    assert p.start_offset == 5


def test_rebuild_redelivers_acquired_records_with_a_higher_count() -> None:
    p = _acquired(limit=2)
    first = p.snapshot()
    assert first.state_batches == (StateBatch(0, 9, 0, 1),)
    assert _ack(p, "m1", (0, 1, (1,)), (2, 3, (2,))).error_code == ErrorCode.none
    q = SharePartition.from_persisted(p.config, p.snapshot())
    assert q.start_offset == 2 and q.next_fetch_offset() == 2
    r = q.acquire("m2", [FetchedBatch(0, 4), FetchedBatch(5, 9)], fetch_offset=2, now_ms=0,
                  max_records=100)
    assert [(a.first_offset, a.last_offset, a.delivery_count) for a in r.acquired] == \
        [(2, 4, 2), (5, 9, 2)]  # the snapshot coalesced 2-3 and 4
    # A crash now: every record is at the limit, so none comes back.
    z = SharePartition.from_persisted(p.config, q.snapshot())
    assert z.start_offset == 10 and z.in_flight == ()


def test_rebuild_with_gaps_acquires_them() -> None:
    state = PersistedShareState(3, 1, 10, 2, (StateBatch(15, 16, 2, 1), StateBatch(17, 19, 0, 1)))
    p = SharePartition.from_persisted(_config(), state)
    assert (p.start_offset, p.end_offset, p.next_fetch_offset()) == (10, 20, 10)
    r = p.acquire("m1", [FetchedBatch(8, 14), FetchedBatch(15, 19), FetchedBatch(20, 21)],
                  fetch_offset=10, now_ms=0, max_records=100)
    assert [(a.first_offset, a.last_offset, a.delivery_count) for a in r.acquired] == \
        [(10, 14, 1), (17, 19, 2), (20, 21, 1)]
    assert p.snapshot().state_epoch == 3


def test_log_start_offset_and_reset() -> None:
    p = _acquired()
    w = p.update_log_start_offset(6)
    assert w.start_offset == 6 and p.start_offset == 6
    assert _ack(p, "m1", (0, 6, (1,))).error_code == ErrorCode.none
    assert p.start_offset == 7
    snap = p.reset_start_offset(100)
    assert snap == PersistedShareState(1, 0, 100, 0, ())
    assert (p.start_offset, p.end_offset, p.in_flight) == (100, 100, ())


def test_a_leaving_member_releases_only_its_records() -> None:
    p = _acquired()
    p.tick(LOCK)
    p.acquire("m2", [FetchedBatch(0, 4)], fetch_offset=0, now_ms=LOCK, max_records=5)
    p.acquire("m3", [FetchedBatch(5, 9)], fetch_offset=5, now_ms=LOCK, max_records=5)
    r = p.release_acquired_records("m2")
    assert r.released == ((0, 4, "m2"),)
    assert r.write.state_batches == (StateBatch(0, 4, 0, 2),)
    assert p.record_state(5).member_id == "m3"


def test_a_trailing_transaction_marker_is_archived_and_passed() -> None:
    """Records 0-2 of a committed transaction and its marker at 3: the read ends with the
    marker, which has no record; once 0-2 are accepted the start offset is 4 (lag 0),
    and a read of the marker alone moves an empty window past it."""
    p, _ = SharePartition.initialize(_config(read_committed=True), 0)
    r = p.acquire("m1", [FetchedBatch(0, 2)], fetch_offset=0, now_ms=0, max_records=10,
                  last_stable_offset=4, read_end=4)
    assert [(a.first_offset, a.last_offset) for a in r.acquired] == [(0, 2)]
    assert r.archived == ((3, 3),)
    _ack(p, "m1", (0, 2, (1,)))
    assert (p.start_offset, p.end_offset) == (4, 4)
    # The next transaction's marker arrives alone (its records were read before).
    q, _ = SharePartition.initialize(_config(), 5)
    r = q.acquire("m1", [], fetch_offset=5, now_ms=0, max_records=10, read_end=6)
    assert (q.start_offset, q.end_offset) == (6, 6) and r.write is not None
    # Without read_end (a read cut short) nothing past the last batch is archived.
    s, _ = SharePartition.initialize(_config(), 0)
    s.acquire("m1", [FetchedBatch(0, 2)], fetch_offset=0, now_ms=0, max_records=10)
    assert s.end_offset == 3


def test_a_trailing_marker_is_not_archived_past_the_record_lock_cap() -> None:
    """Found by the model: a read's trailing marker, archived past a window already at
    the cap, passed it by more than a batch. It waits until the window shrinks."""
    p, _ = SharePartition.initialize(_config(partition_max_record_locks=6), 0)
    p.acquire("m1", [FetchedBatch(0, 3), FetchedBatch(4, 6)], fetch_offset=0, now_ms=0,
              max_records=100, read_end=8)
    assert p.end_offset == 7  # the batch begun below the cap, not the marker at 7
    _ack(p, "m1", (0, 6, (1,)))
    r = p.acquire("m1", [], fetch_offset=7, now_ms=0, max_records=100, read_end=8)
    assert (p.start_offset, p.end_offset) == (8, 8) and r.write is not None
