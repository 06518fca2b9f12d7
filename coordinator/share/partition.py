"""One share-partition of one share group (KIP-932) as a sans-IO state machine.

Owns the in-flight records of the partition for the group: the share-partition start
offset (SPSO), the end of the in-flight window, and for every offset in the window its
state (AVAILABLE → ACQUIRED → ACKNOWLEDGED / ARCHIVED, or ARCHIVING → ARCHIVED when the
group has a dead-letter topic: KIP-1191), delivery count, acquiring member and
acquisition-lock deadline. The ShareFetch / ShareAcknowledge handlers and
the share-group shell call its methods; nothing else touches its fields. Time comes in
as ``now_ms``; every mutation returns plain results, with the ``ShareStateWrite`` the
shell must make durable before it answers (None when nothing durable changed).

Representation: a sorted list of ``InFlightBatch`` runs, each a range of offsets in one
state (Kafka keeps log batches and explodes a batch into per-offset state once it is
acknowledged piecemeal; here a run is simply split at the acknowledged boundaries, so
a whole-batch acknowledgement stays one run). Offsets of the window covered by no run
are "gaps": never seen since a rebuild, acquirable like AVAILABLE records with a
delivery count of 0 (Kafka's persister read gap window).

``end_offset`` is exclusive: the window is ``[start_offset, end_offset)``. Kafka's
``endOffset`` field is the last in-flight offset (inclusive).

Durability. Kafka writes share state on acknowledgement, release and lock expiry, never
on acquisition (KIP-932: "the Acquired state is not recorded because it's transient";
SharePartition.acquire makes no persister call), so a leader crash forgets deliveries in
flight and their delivery count. Here ``acquire`` also returns a write: the acquired
records as AVAILABLE with the count just incremented (the persisted states are 0/2/4,
and 3 for ARCHIVING, Kafka's). Recovery (``from_persisted``) therefore redelivers an unacknowledged record
with a higher count, and archives it when the count reached the limit, so a record that
crashes the broker cannot loop forever; an ACCEPTed record is never redelivered. The
shell makes each write durable before it answers the request that caused it; if a write
fails, it rebuilds the partition from what is durable.

Dead-letter topics (KIP-1191, share.version 2). With ``dead_letter=True`` (the group has a
dead-letter topic) a REJECTed record, and one released or expired at the delivery count
limit, becomes ARCHIVING instead of ARCHIVED: persisted as such (state 3) with the
acknowledgement, not acquirable, and holding the SPSO back. The shell then writes its
dead-letter record and calls ``finish_archiving`` (ARCHIVED, persisted), as Kafka's
SharePartition does; ARCHIVING runs read back after a restart are written again (Kafka
resumes them on initialization: at least once).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from itertools import chain

from kio.schema.errors import ErrorCode
from txbroker.coordinator.share.inflight import InFlightRuns
from txbroker.coordinator.share.results import (
    EMPTY_MEMBER_ID,
    AcknowledgementBatch,
    AcknowledgeResult,
    AcquiredRecords,
    AcquireResult,
    FetchedBatch,
    InFlightBatch,
    ReleaseResult,
    SharePartitionConfig,
    split_by,
    typed_ranges,
    union_ranges,
    validate_batches,
)
from txbroker.coordinator.share.state import (
    AcknowledgeType,
    PersistedShareState,
    RecordState,
    ShareStateWrite,
    StateBatch,
)
from txbroker.coordinator.share.stats import ShareStats

__all__ = ["SharePartition"]

_AVAILABLE, _ACQUIRED = RecordState.AVAILABLE, RecordState.ACQUIRED
_ACKNOWLEDGED, _ARCHIVED = RecordState.ACKNOWLEDGED, RecordState.ARCHIVED
_ARCHIVING = RecordState.ARCHIVING

class SharePartition(InFlightRuns):
    """See the module docstring. Build with ``initialize`` (a new share-partition, at the
    offset ``share.auto.offset.reset`` gave) or ``from_persisted`` (recovery)."""

    def __init__(self, config: SharePartitionConfig, *, start_offset: int, state_epoch: int = 0,
                 leader_epoch: int = 0, stats: ShareStats | None = None) -> None:
        self.config = config
        # The broker's counters (the coordinator passes its own); a private one otherwise.
        self.stats = stats if stats is not None else ShareStats()
        self._start = start_offset
        self._end = start_offset
        self.state_epoch = state_epoch
        self.leader_epoch = leader_epoch
        super().__init__()

    # -- construction and durable state ------------------------------------------------

    @classmethod
    def initialize(cls, config: SharePartitionConfig, start_offset: int, *, state_epoch: int = 0,
                   leader_epoch: int = 0, stats: ShareStats | None = None
                   ) -> tuple[SharePartition, PersistedShareState]:
        """A new share-partition at ``start_offset`` (the caller resolved earliest /
        latest / by_duration to an offset) and the ShareSnapshot to write for it
        (InitializeShareGroupState)."""
        p = cls(config, start_offset=start_offset, state_epoch=state_epoch, leader_epoch=leader_epoch,
                stats=stats)
        return p, p.snapshot()

    @classmethod
    def from_persisted(cls, config: SharePartitionConfig, state: PersistedShareState, *,
                       leader_epoch: int | None = None, stats: ShareStats | None = None,
                       dead_letter: bool = False) -> SharePartition:
        """Recovery. Persisted AVAILABLE batches come back AVAILABLE with their count; a
        record that was ACQUIRED when the state was written was persisted as AVAILABLE
        with the count it got on acquisition, so it comes back redeliverable with a
        higher count; one already at the delivery count limit is archived (the crash
        counts as its lock expiring: ARCHIVING with ``dead_letter``). ACKNOWLEDGED /
        ARCHIVED / ARCHIVING stay (an ARCHIVING run's dead-letter record is written
        again: ``dead_letter_runs``).
        Offsets of the window no batch covers are gaps (acquirable)."""
        p = cls(config, start_offset=state.start_offset, state_epoch=state.state_epoch,
                leader_epoch=state.leader_epoch if leader_epoch is None else leader_epoch,
                stats=stats)
        limit = config.delivery_count_limit
        for b in sorted(state.state_batches):
            if b.last_offset < p._start or b.last_offset < b.first_offset:
                continue
            first = max(b.first_offset, p._start)
            if p._batches and first <= p._batches[-1].last_offset:
                raise ValueError(f"overlapping state batches at offset {first}")
            if b.delivery_state in (RecordState.ACKNOWLEDGED,):
                st = _ACKNOWLEDGED
            elif b.delivery_state == RecordState.ARCHIVED:
                st = _ARCHIVED
            elif b.delivery_state == RecordState.ARCHIVING:
                st = _ARCHIVING
            else:
                st = _AVAILABLE if b.delivery_count < limit else \
                    _ARCHIVING if dead_letter else _ARCHIVED
            p._batches.append(InFlightBatch(first, b.last_offset, st, b.delivery_count))
        if p._batches:
            p._end = p._batches[-1].last_offset + 1
        p._advance_start()
        return p

    def snapshot(self) -> PersistedShareState:
        """The whole durable state (ShareSnapshot contents): ACQUIRED records as AVAILABLE
        with their current delivery count."""
        return PersistedShareState(self.state_epoch, self.leader_epoch, self._start,
                                   self.delivery_complete_count, self._state_batches(self._start, self._end))

    def _state_batches(self, first: int, last_excl: int) -> tuple[StateBatch, ...]:
        out: list[StateBatch] = []
        for b in self._overlapping(first, last_excl - 1):
            st = _AVAILABLE if b.state is _ACQUIRED else b.state
            lo, hi = max(b.first_offset, first), min(b.last_offset, last_excl - 1)
            if out and out[-1].last_offset + 1 == lo and out[-1].delivery_state == st \
                    and out[-1].delivery_count == b.delivery_count:
                out[-1] = replace(out[-1], last_offset=hi)
            else:
                out.append(StateBatch(lo, hi, int(st), b.delivery_count))
        return tuple(out)

    def _write(self, changed: list[tuple[int, int]], start_before: int) -> ShareStateWrite | None:
        if not changed and self._start == start_before:
            return None
        batches: list[StateBatch] = []
        for lo, hi in union_ranges(changed):
            lo = max(lo, self._start)
            if lo <= hi:
                batches.extend(self._state_batches(lo, hi + 1))
        return ShareStateWrite(self.state_epoch, self.leader_epoch, self._start,
                               self.delivery_complete_count, tuple(batches))

    # -- views ---------------------------------------------------------------------------

    @property
    def start_offset(self) -> int:
        return self._start

    @property
    def end_offset(self) -> int:
        return self._end

    @property
    def in_flight(self) -> tuple[InFlightBatch, ...]:
        """Copies of the runs, for describing and testing."""
        return tuple(replace(b) for b in self._batches)

    @property
    def in_flight_record_count(self) -> int:
        """Offsets in the window (Kafka's numInFlightRecords: what the record-lock cap
        bounds)."""
        return self._end - self._start

    @property
    def delivery_complete_count(self) -> int:
        """ACKNOWLEDGED / ARCHIVED records at or after the SPSO (KIP-1226)."""
        return sum(b.last_offset - max(b.first_offset, self._start) + 1
                   for b in self._batches if b.state.terminal and b.last_offset >= self._start)

    def record_state(self, offset: int) -> InFlightBatch | None:
        """The run holding ``offset`` (a copy), or None for a gap or outside the window."""
        b = self._find(offset)
        return None if b is None else replace(b)

    def next_fetch_offset(self) -> int:
        """Where the next log read for this share-partition starts: the first acquirable
        offset of the window (AVAILABLE record or gap), else the end of the window."""
        pos = self._start
        for b in self._batches:
            if b.last_offset < pos:
                continue
            if b.first_offset > pos:
                return pos  # a gap
            if b.state is _AVAILABLE:
                return max(pos, b.first_offset)
            pos = b.last_offset + 1
        return min(pos, self._end)  # a trailing gap, or the end of the window

    def dead_letter_runs(self) -> tuple[InFlightBatch, ...]:
        """Copies of the ARCHIVING runs: records whose dead-letter record the shell is
        to write, then ``finish_archiving``."""
        return tuple(replace(b) for b in self._batches if b.state is _ARCHIVING)

    def finish_archiving(self, first_offset: int, last_offset: int) -> ShareStateWrite | None:
        """The dead-letter records of ``[first_offset, last_offset]`` were written (or
        could not be: Kafka archives them regardless): its ARCHIVING records become
        ARCHIVED and the SPSO may move."""
        start_before = self._start
        changed: list[tuple[int, int]] = []
        lo = max(first_offset, self._start)
        if lo <= last_offset:
            for x, y, b in list(self._segments(lo, last_offset)):
                if b is not None and b.state is _ARCHIVING:
                    self._set(b, _ARCHIVED)
                    b.rejected = False
                    changed.append((x, y))
        self._advance_start()
        return self._write(changed, start_before)

    def can_acquire_records(self) -> bool:
        return self.next_fetch_offset() < self._end or \
            self.in_flight_record_count < self.config.partition_max_record_locks

    def next_lock_deadline_ms(self) -> int | None:
        """The earliest acquisition-lock deadline, for the shell's timer."""
        deadlines = [b.lock_deadline_ms for b in self._batches if b.lock_deadline_ms is not None]
        return min(deadlines) if deadlines else None

    def _set(self, b: InFlightBatch, state: RecordState, member_id: str = EMPTY_MEMBER_ID,
             deadline: int | None = None) -> None:
        b.state, b.member_id, b.lock_deadline_ms = state, member_id, deadline

    def _released_state(self, b: InFlightBatch, dead_letter: bool) -> RecordState:
        # Kafka's InFlightState.tryUpdateState: a record going back to AVAILABLE that has
        # reached the delivery count limit is archived instead (via its dead-letter topic).
        if b.delivery_count < self.config.delivery_count_limit:
            return _AVAILABLE
        return _ARCHIVING if dead_letter else _ARCHIVED

    def _advance_start(self) -> None:
        """Move the SPSO over the contiguous prefix of ACKNOWLEDGED / ARCHIVED records and
        forget those runs; an empty window starts at its end."""
        drop = 0
        for b in self._batches:
            if b.first_offset > self._start or not b.state.terminal:
                break
            self._start = b.last_offset + 1
            drop += 1
        if drop:
            del self._batches[:drop]
        if self._start > self._end:
            self._end = self._start

    # -- acquisition (ShareFetch) ------------------------------------------------------------

    def acquire(self, member_id: str, fetched: Iterable[FetchedBatch], *, fetch_offset: int,
                now_ms: int, max_records: int, last_stable_offset: int | None = None,
                aborted_ranges: Sequence[tuple[int, int]] = (),
                record_limit: bool = False, read_end: int | None = None) -> AcquireResult:
        """Acquire for ``member_id`` the acquirable records among the batches a log read
        from ``fetch_offset`` returned (in offset order). Under read_committed nothing at
        or after ``last_stable_offset`` is acquired and the offsets of
        ``aborted_ranges`` (batches of aborted transactions, inclusive ranges) are
        archived, never delivered. ``max_records`` is soft (whole pieces, like Kafka's
        batch_optimized mode) unless ``record_limit`` (Kafka's record_limit mode: at
        most ``max_records``, a batch taken in part); no new batch is begun once the window holds
        ``partition_max_record_locks`` records, and one begun below it is taken whole,
        as Kafka 4.4 does. Offsets the read skipped (compaction, retention, control
        batches) are archived, also those after its last batch up to ``read_end`` (the
        offset after the read: trailing transaction markers) once every batch was
        taken in. The write carries the acquisitions: this broker persists the
        delivery count at acquisition (Kafka does not; see the module docstring)."""
        cfg = self.config
        start_before = self._start
        changed: list[tuple[int, int]] = []
        archived: list[tuple[int, int]] = []
        acquired: list[AcquiredRecords] = []
        batches = iter(fetched)  # taken one at a time: the caller may read them lazily
        if max_records <= 0:
            return AcquireResult((), (), None)
        first = next(batches, None)
        if first is None:  # only control batches (markers): their offsets are done
            if read_end is not None:
                bound = last_stable_offset if cfg.read_committed and last_stable_offset is not None \
                    else read_end
                self._archive_trailing(max(fetch_offset, self._start), min(read_end, bound) - 1,
                                       changed, archived)
                self._advance_start()
            return AcquireResult((), tuple(archived), self._write(changed, start_before))
        bound = last_stable_offset if cfg.read_committed and last_stable_offset is not None else None
        aborted = sorted(aborted_ranges) if cfg.read_committed else []
        deadline = now_ms + cfg.record_lock_duration_ms
        count = 0
        limit = cfg.delivery_count_limit

        new_run_last = False  # the last range acquired is of records read past the window

        def take(lo: int, hi: int, b: InFlightBatch | None, past_end: bool = False) -> None:
            nonlocal count, new_run_last
            for x, y, is_aborted in split_by(lo, hi, aborted):
                if b is None:
                    run = InFlightBatch(x, y, _AVAILABLE, 0)
                    self._insert(run)
                else:
                    self._split_at(x)
                    self._split_at(y + 1)
                    run = self._find(x)
                    assert run is not None and run.last_offset == y
                changed.append((x, y))
                if is_aborted or run.delivery_count >= limit:
                    # Aborted, or already delivered up to the limit (the limit was lowered).
                    self._set(run, _ARCHIVED)
                    archived.append((x, y))
                    continue
                run.delivery_count += 1
                self._set(run, _ACQUIRED, member_id, deadline)
                last = acquired[-1] if acquired else None
                if past_end and new_run_last and last is not None and last.last_offset + 1 == x \
                        and last.delivery_count == run.delivery_count:
                    # New records of consecutive batches are one range, as Kafka answers.
                    acquired[-1] = AcquiredRecords(last.first_offset, y, last.delivery_count)
                else:
                    acquired.append(AcquiredRecords(x, y, run.delivery_count))
                new_run_last = past_end
                count += y - x + 1
                self.stats.acquired_records += y - x + 1
                if run.delivery_count > 1:
                    self.stats.redelivered_records += y - x + 1

        # Offsets between fetch_offset and the first returned batch no longer exist.
        first_fetched = first.first_offset
        if first_fetched > fetch_offset:
            self._archive_missing(max(fetch_offset, self._start), first_fetched - 1, changed, archived)
        prev_last: int | None = None
        stop = False
        for fb in chain((first,), batches):
            lo, hi = max(fb.first_offset, self._start), fb.last_offset
            if bound is not None:
                hi = min(hi, bound - 1)
            if prev_last is not None and fb.first_offset > prev_last + 1:
                self._archive_missing(max(prev_last + 1, self._start), fb.first_offset - 1, changed, archived)
            prev_last = fb.last_offset
            if lo > hi:
                if bound is not None and fb.first_offset >= bound:
                    break
                continue
            # Inside the window: AVAILABLE runs and gaps are acquirable.
            if lo < self._end:
                for x, y, b in list(self._segments(lo, min(hi, self._end - 1))):
                    if count >= max_records:
                        stop = True
                        break
                    if b is None or b.state is _AVAILABLE:
                        take(x, min(y, x + max_records - count - 1) if record_limit else y, b)
            if stop or count >= max_records:
                break
            # Past the window: new records, within the record-lock cap.
            if hi >= self._end:
                nlo = max(lo, self._end)
                if nlo > self._end:
                    if self._start == self._end:
                        self._start = self._end = nlo  # empty window: skip the hole
                    elif nlo - self._start > cfg.partition_max_record_locks:
                        break
                    else:
                        self._insert(InFlightBatch(self._end, nlo - 1, _ARCHIVED, 0))
                        changed.append((self._end, nlo - 1))
                        archived.append((self._end, nlo - 1))
                        self._end = nlo
                if self._end - self._start >= cfg.partition_max_record_locks:
                    break
                # Kafka's batch-optimized acquisition: a batch begun below the cap is
                # taken whole (one round trip per producer batch, not per cap's worth),
                # so the window may pass the cap by less than one batch.
                # In record_limit mode the rest of the batch stays in the window, to be
                # acquired first next time (Kafka keeps the batch in flight, in part
                # AVAILABLE).
                self._end = hi + 1
                take(nlo, min(hi, nlo + max_records - count - 1) if record_limit else hi, None,
                     past_end=True)
        else:  # every batch of the read was taken in: what follows the last is markers
            if read_end is not None and prev_last is not None:
                self._archive_trailing(max(prev_last + 1, self._start),
                                       min(read_end, bound if bound is not None else read_end) - 1,
                                       changed, archived)
        self._advance_start()
        return AcquireResult(tuple(acquired), tuple(archived), self._write(changed, start_before))

    def _archive_trailing(self, lo: int, hi: int, changed: list[tuple[int, int]],
                          archived: list[tuple[int, int]]) -> None:
        """Archive ``[lo, hi]``, offsets a read had no record for after its last batch
        (transaction markers): in the window as ``_archive_missing``, past it as a new
        ARCHIVED run (or, the window empty, by moving it on)."""
        if lo > hi:
            return
        self._archive_missing(lo, hi, changed, archived)
        if hi < self._end or lo > self._end:  # (never past a hole the read did not cover)
            return
        nlo = self._end
        if self._start == self._end:
            self._start = self._end = hi + 1  # empty window: nothing in flight to keep
            return
        if self._end - self._start >= self.config.partition_max_record_locks:
            return  # begun at the cap, as no batch is: archived once the window shrinks
        self._insert(InFlightBatch(nlo, hi, _ARCHIVED, 0))
        changed.append((nlo, hi))
        archived.append((nlo, hi))
        self._end = hi + 1

    def _archive_missing(self, lo: int, hi: int, changed: list[tuple[int, int]],
                         archived: list[tuple[int, int]]) -> None:
        """Archive the acquirable offsets of the window in ``[lo, hi]``: the log has no
        record there any more (Kafka's maybeArchiveStaleBatches)."""
        hi = min(hi, self._end - 1)
        if lo > hi:
            return
        for x, y, b in list(self._segments(lo, hi)):
            if b is None:
                self._insert(InFlightBatch(x, y, _ARCHIVED, 0))
            elif b.state is _AVAILABLE:
                self._set(b, _ARCHIVED)
            else:
                continue
            changed.append((x, y))
            archived.append((x, y))

    # -- acknowledgement (ShareAcknowledge / piggybacked on ShareFetch) ---------------------------

    def acknowledge(self, member_id: str, batches: Sequence[AcknowledgementBatch], *,
                    now_ms: int, dead_letter: bool = False) -> AcknowledgeResult:
        """Apply a member's acknowledgements, all or nothing. INVALID_REQUEST for a
        malformed batch list (KafkaApis.validateAcknowledgementBatches) or offsets past
        the in-flight records; INVALID_RECORD_STATE for an offset this member has not
        acquired (never acquired, released, expired, acquired by another member,
        already acknowledged) or RENEW when share.renew.acknowledge.enable is off.
        Offsets below the SPSO are skipped, like Kafka. ACCEPT → ACKNOWLEDGED, REJECT and
        GAP → ARCHIVED, RELEASE → AVAILABLE (ARCHIVED at the delivery count limit),
        RENEW → the lock runs ``record_lock_duration_ms`` from ``now_ms`` (not persisted).
        With ``dead_letter`` REJECT (not GAP) and RELEASE at the limit → ARCHIVING."""
        err = validate_batches(batches)
        if err is not None:
            return AcknowledgeResult(ErrorCode.invalid_request, err, None)
        plan: list[tuple[int, int, int]] = []  # (first, last, ack type) to apply
        prev_last = -1
        for ab in batches:
            if ab.first_offset <= prev_last:
                # Kafka lets a batch start at the previous batch's last offset; that offset
                # is then mid-transition and the request fails as a whole.
                return AcknowledgeResult(ErrorCode.invalid_record_state,
                                         "offset acknowledged twice in one request", None)
            prev_last = ab.last_offset
            if ab.last_offset < self._start:
                continue
            if ab.last_offset >= self._end:
                return AcknowledgeResult(ErrorCode.invalid_request,
                                         "offsets past the acquired records", None)
            for lo, hi, t in typed_ranges(ab):
                lo = max(lo, self._start)
                if lo > hi:
                    continue
                if t == AcknowledgeType.RENEW and not self.config.renew_acknowledge_enable:
                    return AcknowledgeResult(ErrorCode.invalid_record_state,
                                             "renewing acquisition locks is not enabled", None)
                pos = lo
                for b in self._overlapping(lo, hi):
                    if b.first_offset > pos:
                        break
                    if b.state is not _ACQUIRED or b.member_id != member_id:
                        break
                    pos = b.last_offset + 1
                if pos <= hi:
                    return AcknowledgeResult(ErrorCode.invalid_record_state,
                                             f"offset {pos} is not acquired by this member", None)
                plan.append((lo, hi, t))
        start_before = self._start
        changed: list[tuple[int, int]] = []
        renew_deadline = now_ms + self.config.record_lock_duration_ms
        for lo, hi, t in plan:
            self.stats.acknowledged(t, hi - lo + 1)
            for _, _, b in list(self._segments(lo, hi)):
                assert b is not None
                if t == AcknowledgeType.RENEW:
                    b.lock_deadline_ms = renew_deadline
                    continue
                if t == AcknowledgeType.ACCEPT:
                    self._set(b, _ACKNOWLEDGED)
                elif t == AcknowledgeType.RELEASE:
                    self._set(b, self._released_state(b, dead_letter))
                elif t == AcknowledgeType.REJECT and dead_letter:
                    self._set(b, _ARCHIVING)
                    b.rejected = True
                else:  # REJECT, GAP (no record: nothing to dead-letter)
                    self._set(b, _ARCHIVED)
                changed.append((b.first_offset, b.last_offset))
        self._advance_start()
        return AcknowledgeResult(ErrorCode.none, None, self._write(changed, start_before))

    # -- releases ----------------------------------------------------------------------------

    def release_acquired_records(self, member_id: str, *, dead_letter: bool = False
                                 ) -> ReleaseResult:
        """A member left (or its share session closed): its ACQUIRED records become
        AVAILABLE, or ARCHIVED (ARCHIVING with ``dead_letter``) at the delivery count
        limit."""
        return self._release(lambda b: b.member_id == member_id, dead_letter)

    def tick(self, now_ms: int, *, dead_letter: bool = False) -> ReleaseResult:
        """Expire the acquisition locks whose deadline is at or before ``now_ms``."""
        res = self._release(lambda b: b.lock_deadline_ms is not None and b.lock_deadline_ms <= now_ms,
                            dead_letter)
        self.stats.lock_expired_records += sum(hi - lo + 1 for lo, hi, _ in res.released)
        return res

    def _release(self, which: Callable[[InFlightBatch], bool], dead_letter: bool) -> ReleaseResult:
        start_before = self._start
        released: list[tuple[int, int, str]] = []
        changed: list[tuple[int, int]] = []
        for b in self._batches:
            if b.state is _ACQUIRED and which(b):
                released.append((b.first_offset, b.last_offset, b.member_id))
                changed.append((b.first_offset, b.last_offset))
                self._set(b, self._released_state(b, dead_letter))
        self._advance_start()
        return ReleaseResult(tuple(released), self._write(changed, start_before))

    # -- start offset moves -------------------------------------------------------------------

    def update_log_start_offset(self, log_start_offset: int) -> ShareStateWrite | None:
        """Records before the log start offset are gone (retention, DeleteRecords): the
        SPSO moves up to it and the runs before it are forgotten (acknowledgements of
        those offsets are then skipped, as Kafka does below the SPSO)."""
        if log_start_offset <= self._start:
            return None
        start_before = self._start
        self._split_at(log_start_offset)
        self._batches = [b for b in self._batches if b.first_offset >= log_start_offset]
        self._start = log_start_offset
        self._end = max(self._end, self._start)
        self._advance_start()
        return self._write([], start_before)

    def reset_start_offset(self, offset: int) -> PersistedShareState:
        """AlterShareGroupOffsets (the group coordinator has checked the group is empty):
        a fresh state at ``offset`` with the next state epoch, to write as a
        ShareSnapshot (Kafka's InitializeShareGroupState)."""
        self.state_epoch += 1
        self._batches = []
        self._start = self._end = offset
        return self.snapshot()
