"""The share coordinator (KIP-932) of this broker: share-group membership, share
sessions and the share-partitions' delivery state, driven through the one coordinator
shell (:class:`~txbroker.coordinator.shell.CoordinatorShell`), which appends the state
records to ``__share_group_state``, waits for the log's flush policy (an fsync by
default) and fires the wake timer for acquisition-lock expiry and session timeouts.

Owns the ShareGroups (``group.py``), the ShareSessions (``sessions.py``), a
SharePartition (``partition.py``) per (group, topic id, partition) in use and the
persister (``persister.py``). The share handlers (ShareGroupHeartbeat, ShareGroupDescribe,
ShareFetch, ShareAcknowledge, and ListGroups / DeleteGroups) call its public methods;
nothing else touches its fields. Every request whose state changes must be durable is
answered only once its records are (``CoordinatorShell.call``); a failed write rebuilds
the share-partition from what is durable and the request gets the write's error.

Dead-letter topics (KIP-1191): at share.version 2, a share group whose group config
``errors.deadletterqueue.topic.name`` is set gets ARCHIVING records (partition.py) for
what it REJECTs or delivers too often; once their state is durable a task writes their
dead-letter records (``dead_letter.py``) and then persists them ARCHIVED, as Kafka does.
The acknowledgement's answer waits for the ARCHIVING write only.

In Kafka the share-partition state lives on the partition leader and is written through
the share coordinator (a separate internal service, RPCs such as
WriteShareGroupState); on one broker both are here, with no RPC in between.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode
from txbroker.protocol.errors import KafkaError
from txbroker.protocol.records import BatchHeader, read_header
from txbroker.storage.log import PartitionLog
from txbroker.storage.manager import LogManager

from ..shell import CoordinatorShell, now_ms
from .dead_letter import DeadLetterRange, DeadLetterSettings, DeadLetterWriter
from .group import (
    ShareGroup,
    ShareGroupConfig,
    ShareGroups,
    ShareHeartbeat,
    ShareHeartbeatResult,
)
from .group_settings import AUTO_OFFSET_RESET, GroupPartitionConfig, start_offset
from .partition import SharePartition
from .persister import SHARE_STATE_TOPIC, SharePersister, SPKey, StateRecord
from .results import AcknowledgementBatch, AcquiredRecords, FetchedBatch, SharePartitionConfig
from .sessions import ShareSessions
from .state import PersistedShareState, RecordState, ShareStateWrite
from .stats import ShareStats

__all__ = ["ShareCoordinator", "ShareCoordinatorConfig", "PartitionFetch"]

log = logging.getLogger(__name__)
_E = ErrorCode
TopicPartition = tuple[uuid.UUID, int]
# Kafka's group configs of KIP-1191 (coordinator/group/group_configs.py takes them).
DLQ_TOPIC_NAME = "errors.deadletterqueue.topic.name"
DLQ_COPY_RECORD_ENABLE = "errors.deadletterqueue.copy.record.enable"
GroupConfigLookup = Callable[[str, str], object]  # (group id, config name) -> its value


# The most a share-partition's log read takes at once: whole batches from the next
# acquirable offset (at least one, however large), enough for a ShareFetch's
# max_records of small records; more windows are read while nothing was acquired.
READ_WINDOW_BYTES = 1 << 20


@dataclass(frozen=True)
class ShareCoordinatorConfig:
    group: ShareGroupConfig = ShareGroupConfig()
    partition: SharePartitionConfig = SharePartitionConfig()
    state_topic_partitions: int = 50  # share.coordinator.state.topic.num.partitions
    state_topic_segment_bytes: int = 100 * 1024 * 1024  # share.coordinator.state.topic.segment.bytes
    updates_per_snapshot: int = 500  # share.coordinator.snapshot.update.records.per.snapshot
    max_share_sessions: int = 2000  # group.share.max.share.sessions
    auto_offset_reset: str = "latest"  # Kafka's group config share.auto.offset.reset
    dead_letter: DeadLetterSettings = DeadLetterSettings()


@dataclass(frozen=True)
class PartitionFetch:
    """One partition of a ShareFetch answer."""

    error: int = _E.none.value
    message: str | None = None
    records: bytes | memoryview = b""
    acquired: tuple[AcquiredRecords, ...] = ()


@dataclass
class _Effects:
    """What the shell carries out (its Adapter's effects)."""

    events: list[str] = field(default_factory=list)
    responses: dict[int, Any] = field(default_factory=dict)
    persist: list[StateRecord] = field(default_factory=list)


@dataclass
class _Pending:
    """A request waiting for its writes: the answer, and the first failed write's error."""

    result: Any
    writes: int
    error: int = _E.none.value


class ShareCoordinator:
    """See the module docstring. Implements the shell's Adapter."""

    def __init__(self, logs: LogManager, config: ShareCoordinatorConfig, *,
                 group_config: GroupConfigLookup | None = None,
                 share_version: Callable[[], int] | None = None) -> None:
        self.logs = logs
        self.config = config
        # The broker's per-group config values and finalized share.version (callables:
        # the coordinator does not import the broker).
        self._group_config = group_config
        self._share_version = share_version or (lambda: 1)
        self.dead_letters = DeadLetterWriter(logs, config.dead_letter)
        self._dead_lettering: set[SPKey] = set()  # share-partitions with a dead-letter task
        self.groups = ShareGroups(config.group)
        self.groups.group_value = self._group_value
        self.sessions = ShareSessions(config.max_share_sessions)
        self.persister = SharePersister(config.updates_per_snapshot)
        self.partitions: dict[SPKey, SharePartition] = {}
        self.stats = ShareStats()  # counters for /metrics, shared by every share-partition
        self.shell = CoordinatorShell(logs, SHARE_STATE_TOPIC, self,
                                      partitions=config.state_topic_partitions,
                                      segment_bytes=config.state_topic_segment_bytes)
        self._write_ids = 0
        self._records: dict[int, tuple[StateRecord, int | None]] = {}  # write id -> (record, token)
        self._pending: dict[int, _Pending] = {}
        self._loaded = False

    # -- lifecycle ---------------------------------------------------------------------------

    def load(self) -> None:
        """Called on start: the replay of ``__share_group_state`` waits for the first
        use of a share-partition (:meth:`ensure_loaded`), so a broker whose share groups
        are off (or unused) does not pay for it in its start-up time."""
        self._loaded = False

    def ensure_loaded(self) -> None:
        """Replay ``__share_group_state`` once (if it exists); the share-partitions come
        back from it on first use (SharePartition.from_persisted), their groups at once,
        Empty (membership is not durable), so that ListGroups, DeleteGroups and
        ShareGroupDescribe know them after a restart."""
        if self._loaded:
            return
        self._loaded = True
        info = self.logs.topics.get(SHARE_STATE_TOPIC)
        if info is None:
            return
        plogs = [p for i in range(info.partitions)
                 if (p := self.logs.get_log(SHARE_STATE_TOPIC, i)) is not None]
        n = self.persister.load(plogs)
        for group_id, _tid, _p in self.persister.latest:
            self.groups.groups.setdefault(group_id, ShareGroup(group_id))
        if n:
            log.info("loaded the state of %d share-partition(s) from %s", n, SHARE_STATE_TOPIC)

    async def stop(self) -> None:
        await self.shell.stop()

    # -- the shell's Adapter ---------------------------------------------------------------------

    def report(self, event: Any) -> None:
        log.info("%s", event)

    def placement(self, request: StateRecord) -> str:
        return request.placement_key

    def on_effects(self, effects: _Effects) -> None:
        pass

    def next_wake(self, effects: _Effects | None) -> int | None:
        wakes = [d for p in self.partitions.values() if (d := p.next_lock_deadline_ms()) is not None]
        member = self.groups.next_wake_ms()
        if member is not None:
            wakes.append(member)
        return min(wakes) if wakes else None

    def persisted(self, now: int, write_id: int, error: int) -> _Effects:
        rec, token = self._records.pop(write_id)
        effects = _Effects()
        if error == _E.none.value:
            self.persister.durable_now(rec)
            if rec.state is not None and _archiving(rec.state):
                self._maybe_dead_letter(rec.sp)
        else:
            state = self.persister.failed(rec.sp)
            if state is None:
                self.partitions.pop(rec.sp, None)
            else:
                part = self.partitions[rec.sp] = SharePartition.from_persisted(
                    self.partition_config(rec.sp[0]), state, stats=self.stats,
                    dead_letter=self.dead_letter_enabled(rec.sp[0]))
                if part.dead_letter_runs():
                    self._maybe_dead_letter(rec.sp)
            effects.events.append(f"share state write of {rec.placement_key} failed "
                                  f"({_E(error).name}): rebuilt from the durable state")
        if token is not None and (pending := self._pending.get(token)) is not None:
            pending.writes -= 1
            if error != _E.none.value and pending.error == _E.none.value:
                pending.error = error
            if pending.writes == 0:
                del self._pending[token]
                effects.responses[token] = (pending.result, pending.error)
        return effects

    def tick(self, now: int) -> _Effects:
        effects = _Effects()
        for group_id, member_id in self.groups.tick(now, self.topic_image()):
            # As in Kafka, its records stay acquired until its share session closes or
            # their locks expire: membership and delivery state are separate.
            effects.events.append(f"share group {group_id!r}: member {member_id} removed "
                                  f"(session timeout)")
            self._forget_if_empty(group_id)
        for sp, part in self.partitions.items():
            released = part.tick(now, dead_letter=self.dead_letter_enabled(sp[0]))
            self._persist_write(effects, sp, released.write, None)
        return effects

    # -- helpers -----------------------------------------------------------------------------------

    def _next_write_id(self) -> int:
        self._write_ids += 1
        return self._write_ids

    def _persist_write(self, effects: _Effects, sp: SPKey, write: ShareStateWrite | None,
                       token: int | None) -> None:
        if write is None:
            return
        self._add(effects, self.persister.update(self._next_write_id(), sp, write), token)

    def _add(self, effects: _Effects, rec: StateRecord, token: int | None) -> None:
        self._records[rec.write_id] = (rec, token)
        effects.persist.append(rec)
        if token is not None:
            self._pending[token].writes += 1

    def _call(self, token: int, run: Callable[[_Effects, int | None], Any]) -> _Effects:
        """``run`` fills the effects and gives the answer, sent once its writes are
        durable (at once if there are none)."""
        effects = _Effects()
        self._pending[token] = _Pending(None, 0)
        result = run(effects, token)
        pending = self._pending[token]
        pending.result = result
        if pending.writes == 0:
            del self._pending[token]
            effects.responses[token] = (result, _E.none.value)
        return effects

    async def _run(self, run: Callable[[_Effects, int | None], Any]) -> tuple[Any, int]:
        answer = await self.shell.call(lambda token: self._call(token, run))
        if answer is None:  # the shell stopped (shutdown or crash)
            return None, _E.not_coordinator.value
        return answer

    def topic_image(self) -> dict[str, tuple[uuid.UUID, int]]:
        return {name: (info.topic_id, info.partitions) for name, info in self.logs.topics.items()}

    def _topics_by_id(self) -> dict[uuid.UUID, str]:
        return {info.topic_id: name for name, info in self.logs.topics.items()}

    def _released(self, group_id: str, member_id: str, effects: _Effects,
                  token: int | None = None) -> None:
        """A member's share session closed: what it acquired is available again."""
        for sp, part in self.partitions.items():
            if sp[0] == group_id:
                released = part.release_acquired_records(
                    member_id, dead_letter=self.dead_letter_enabled(group_id))
                self._persist_write(effects, sp, released.write, token)

    # -- membership ------------------------------------------------------------------------------

    def heartbeat(self, req: ShareHeartbeat) -> ShareHeartbeatResult:
        """ShareGroupHeartbeat. Membership is in memory (group.py): answered at once. A
        member leaving keeps its acquired records until its share session closes (its
        last ShareAcknowledge / ShareFetch, epoch -1, may still be on its way: a client
        sends both at once when it closes) or their locks expire, as in Kafka."""
        before = self.groups.groups.get(req.group_id)
        epoch_before = before.group_epoch if before is not None else 0
        result = self.groups.heartbeat(now_ms(), req, self.topic_image())
        self.shell.reschedule(self.next_wake(None))  # its session deadline
        g = self.groups.groups.get(req.group_id)
        if g is not None and g.group_epoch != epoch_before:
            log.info("share group %r: group epoch %d, %d member(s), state %s (member %s, "
                     "epoch %d)", req.group_id, g.group_epoch, len(g.members), g.state,
                     req.member_id, req.member_epoch)
        self._forget_if_empty(req.group_id)
        return result

    def _forget_if_empty(self, group_id: str) -> None:
        """An empty share group that never fetched (no share-partition state) is
        forgotten: group ids a client makes up do not pile up in memory."""
        g = self.groups.groups.get(group_id)
        if g is None or g.members:
            return
        self.ensure_loaded()
        if not any(sp[0] == group_id for sp in (*self.partitions, *self.persister.latest)):
            del self.groups.groups[group_id]

    def is_share_group(self, group_id: str) -> bool:
        self.ensure_loaded()
        return group_id in self.groups.groups

    def listing(self) -> list[tuple[str, str]]:
        """(group id, state) of every share group."""
        self.ensure_loaded()
        return [(g.group_id, g.state) for g in self.groups.groups.values()]

    def delete_group(self, group_id: str) -> int:
        """DeleteGroups of an empty share group: its share-partitions' state is deleted
        too (tombstones, as Kafka's DeleteShareGroupState)."""
        self.ensure_loaded()
        error = self.groups.delete_group(group_id)
        if error != _E.none.value:
            return error
        self.sessions.close_group(group_id)
        effects = _Effects()
        doomed = {sp for sp in (*self.partitions, *self.persister.latest) if sp[0] == group_id}
        for sp in sorted(doomed):
            self.partitions.pop(sp, None)
            self._add(effects, self.persister.tombstone(self._next_write_id(), sp), None)
        self.shell.apply(effects)
        return error

    # -- sessions, acknowledgement and acquisition ----------------------------------------------------

    def check_session(self, group_id: str, member_id: str, epoch: int, *,
                      fetch: bool) -> tuple[int, str | None]:
        return self.sessions.check(group_id, member_id, epoch, fetch=fetch)

    def update_session(self, group_id: str, member_id: str, epoch: int,
                       added: Iterable[TopicPartition], forgotten: Iterable[TopicPartition],
                       connection: Any = None) -> list[TopicPartition]:
        """Open / move on / close the session (after :meth:`check_session`); the
        partitions it fetches (none once closed). ``connection``: the request's."""
        session = self.sessions.update(group_id, member_id, epoch, added, forgotten, connection)
        return [] if session is None or epoch == -1 else list(session.partitions)

    async def close_session(self, group_id: str, member_id: str) -> None:
        """A final (epoch -1) request: the member's acquired records are released."""
        await self._run(lambda effects, token: self._released(group_id, member_id, effects, token))

    def connection_closed(self, connection: Any) -> None:
        """A client connection closed: the share sessions it last used close, and
        their members' acquired records are available again at once (not after the
        lock duration), as Kafka does. The writes are not waited for: nobody is."""
        closed = self.sessions.close_connection(connection)
        if not closed:
            return
        effects = _Effects()
        for s in closed:
            effects.events.append(f"share session of member {s.member_id} of group "
                                  f"{s.group_id!r} closed with its connection")
            self._released(s.group_id, s.member_id, effects)
        self.shell.apply(effects)

    async def acknowledge(self, group_id: str, member_id: str,
                          acks: Mapping[TopicPartition, Sequence[AcknowledgementBatch]]
                          ) -> dict[TopicPartition, tuple[int, str | None]]:
        """Apply the acknowledgements, per partition; answered once durable."""
        def run(effects: _Effects, token: int | None) -> dict[TopicPartition, tuple[int, str | None]]:
            now = now_ms()
            dead_letter = self.dead_letter_enabled(group_id)
            out: dict[TopicPartition, tuple[int, str | None]] = {}
            for (tid, p), batches in acks.items():
                sp = (group_id, tid, p)
                part = self._existing(sp)
                if part is None:  # Kafka 4.4: no share-partition here
                    out[(tid, p)] = (_E.unknown_topic_or_partition.value,
                                     "This server does not host this topic-partition.")
                    continue
                res = part.acknowledge(member_id, batches, now_ms=now, dead_letter=dead_letter)
                out[(tid, p)] = (res.error_code, res.error_message)
                self._persist_write(effects, sp, res.write, token)
            return out

        result, error = await self._run(run)
        if error != _E.none.value:
            return {tp: (error, "the share state could not be written") for tp in acks}
        return result

    def _existing(self, sp: SPKey) -> SharePartition | None:
        self.ensure_loaded()
        part = self.partitions.get(sp)
        if part is None and (state := self.persister.latest.get(sp)) is not None:
            part = self.partitions[sp] = SharePartition.from_persisted(
                self.partition_config(sp[0]), state, stats=self.stats,
                dead_letter=self.dead_letter_enabled(sp[0]))
            if part.dead_letter_runs():
                self._maybe_dead_letter(sp)  # Kafka resumes them on initialization
        return part

    def _share_partition(self, sp: SPKey, plog: PartitionLog, effects: _Effects,
                         token: int | None) -> SharePartition:
        part = self._existing(sp)
        if part is None:
            # A new share-partition: its start offset from share.auto.offset.reset.
            strategy = self._group_value(sp[0], AUTO_OFFSET_RESET, self.config.auto_offset_reset)
            start = start_offset(str(strategy), plog, now_ms())
            part, state = SharePartition.initialize(self.partition_config(sp[0]), start,
                                                    stats=self.stats)
            self.partitions[sp] = part
            # The group exists from its first delivery state on (as after a restart).
            self.groups.groups.setdefault(sp[0], ShareGroup(sp[0]))
            self._add(effects, self.persister.snapshot(self._next_write_id(), sp, state), token)
        self._persist_write(effects, sp, part.update_log_start_offset(plog.log_start_offset), token)
        return part

    async def acquire(self, group_id: str, member_id: str, tps: Sequence[TopicPartition], *,
                      max_records: int, max_bytes: int, record_limit: bool = False
                      ) -> dict[TopicPartition, PartitionFetch]:
        """One pass of a ShareFetch: read each partition from its next acquirable offset
        and acquire for the member; answered once the acquisitions are durable.
        ``record_limit``: ShareAcquireMode record_limit, at most ``max_records``."""
        names = self._topics_by_id()

        def run(effects: _Effects, token: int | None) -> dict[TopicPartition, PartitionFetch]:
            out: dict[TopicPartition, PartitionFetch] = {}
            remaining_bytes = max_bytes
            remaining_records = max_records
            for tid, p in tps:
                name = names.get(tid)
                plog = self.logs.get_log(name, p) if name is not None else None
                if plog is None:
                    out[(tid, p)] = PartitionFetch(
                        (_E.unknown_topic_id if name is None else _E.unknown_topic_or_partition).value)
                    continue
                if remaining_records <= 0 or remaining_bytes <= 0:
                    out[(tid, p)] = PartitionFetch()
                    continue
                try:
                    got = self._acquire_one((group_id, tid, p), plog, member_id, effects, token,
                                            remaining_records, remaining_bytes, record_limit)
                except (KafkaError, OSError) as e:
                    code = e.code.value if isinstance(e, KafkaError) else _E.kafka_storage_error.value
                    out[(tid, p)] = PartitionFetch(code, str(e))
                    continue
                out[(tid, p)] = got
                remaining_records -= sum(a.last_offset - a.first_offset + 1 for a in got.acquired)
                remaining_bytes -= len(got.records)
            return out

        result, error = await self._run(run)
        if error != _E.none.value:
            # Not durable: the acquisitions were undone (rebuilt); nothing is delivered.
            return {tp: PartitionFetch(error, "the share state could not be written") for tp in tps}
        return result

    def _acquire_one(self, sp: SPKey, plog: PartitionLog, member_id: str, effects: _Effects,
                     token: int | None, max_records: int, max_bytes: int,
                     record_limit: bool) -> PartitionFetch:
        """Read from the share-partition's next acquirable offset in windows of at most
        READ_WINDOW_BYTES (a read of the whole max_bytes would copy megabytes to deliver
        a batch), acquire, and answer only the batches the acquired records are in, as
        Kafka slices its fetched records: a client parses what it is sent."""
        part = self._share_partition(sp, plog, effects, token)
        cfg = part.config
        limit = plog.last_stable_offset if cfg.read_committed else plog.high_watermark
        budget = max_bytes
        while budget > 0:
            offset = part.next_fetch_offset()
            if offset >= limit or not part.can_acquire_records():
                return PartitionFetch()
            read = plog.read(offset, min(budget, READ_WINDOW_BYTES), max_offset=limit,
                             min_one=True)
            if not read.data:
                return PartitionFetch()
            budget -= len(read.data)
            got = self._acquire_read(sp, part, plog, read, offset, member_id, effects,
                                     token, max_records, limit, record_limit)
            if got is not None:
                return got
            if part.next_fetch_offset() <= offset:  # nothing moved: no progress to make
                return PartitionFetch()
        return PartitionFetch()

    def _acquire_read(self, sp: SPKey, part: SharePartition, plog: PartitionLog, read,
                      offset: int, member_id: str, effects: _Effects, token: int | None,
                      max_records: int, limit: int, record_limit: bool) -> PartitionFetch | None:
        """Acquire among the batches of one read; None if none was acquired (the read
        was control batches, aborted or over the delivery limit)."""
        cfg = part.config
        data = read.data
        headers: list[tuple[int, BatchHeader]] = []  # (position, header), as walked

        def batches() -> Iterator[FetchedBatch]:
            # Walked only as far as the acquisition goes: a 1 MiB read of one-record
            # batches is ~13,000 headers, of which a max_records of 500 needs 500.
            pos = 0
            while pos < len(data):
                h = read_header(data, pos)
                headers.append((pos, h))
                pos += h.size
                # Control batches (transaction markers) are never delivered: left out of
                # what the share-partition sees, they are archived as offsets with no record.
                if not h.is_control:
                    yield FetchedBatch(h.base_offset, h.last_offset)

        fetched: Iterable[FetchedBatch] = batches()
        aborted: list[tuple[int, int]] = []
        if cfg.read_committed and (txns := plog.aborted_transactions(offset, read.next_offset)):
            fetched = list(fetched)  # the aborted batches are found among all the headers
            for txn in txns:
                aborted += [(h.base_offset, h.last_offset) for _, h in headers
                            if h.is_transactional and not h.is_control
                            and h.producer_id == txn.producer_id
                            and txn.first_offset <= h.base_offset <= txn.last_offset]
        res = part.acquire(member_id, fetched, fetch_offset=offset, now_ms=now_ms(),
                           max_records=max_records, last_stable_offset=limit,
                           aborted_ranges=aborted, record_limit=record_limit,
                           read_end=read.next_offset)
        self._persist_write(effects, sp, res.write, token)
        if not res.acquired:
            return None
        lo, hi = res.acquired[0].first_offset, res.acquired[-1].last_offset
        begin = next(p for p, h in headers if h.last_offset >= lo)
        end = max(p + h.size for p, h in headers if h.base_offset <= hi)
        return PartitionFetch(records=bytes(data[begin:end]), acquired=res.acquired)

    # -- dead-letter topics (KIP-1191) ----------------------------------------------------------

    def partition_config(self, group_id: str) -> GroupPartitionConfig:
        """The share.* settings of ``group_id``'s share-partitions, read at each use."""
        return GroupPartitionConfig(group_id, self._group_value, self.config.partition)

    def _group_value(self, group_id: str, name: str, default: object) -> object:
        if self._group_config is None:
            return default
        try:
            return self._group_config(group_id, name)
        except KeyError:  # a store that does not take the key
            return default

    def dead_letter_enabled(self, group_id: str) -> bool:
        """share.version 2 and the group has a dead-letter topic (Kafka's
        SharePartition.isDLQEnabledForGroup, asked at each transition)."""
        return self._share_version() >= 2 and bool(self._group_value(group_id, DLQ_TOPIC_NAME, ""))

    def _maybe_dead_letter(self, sp: SPKey) -> None:
        if sp not in self._dead_lettering and not self.shell.stopped:
            self._dead_lettering.add(sp)
            self.shell.spawn(self._dead_letter(sp))

    async def _dead_letter(self, sp: SPKey) -> None:
        """Write the dead-letter records of the share-partition's ARCHIVING records whose
        state is durable, then persist them ARCHIVED; again while there are more."""
        group_id, tid, p = sp
        try:
            while not self.shell.stopped:
                part = self.partitions.get(sp)
                durable = self.persister.durable.get(sp)
                ranges = _dead_letter_ranges(part, durable)
                if part is None or not ranges:
                    return
                name = self._topics_by_id().get(tid)
                source = self.logs.get_log(name, p) if name is not None else None
                written = await self.dead_letters.write(
                    group_id, name or str(tid), p, source, ranges,
                    dlq_topic=str(self._group_value(group_id, DLQ_TOPIC_NAME, "") or ""),
                    copy_record=bool(self._group_value(group_id, DLQ_COPY_RECORD_ENABLE, False)))
                self.stats.dlq_records += written

                def finish(effects: _Effects, token: int | None,
                           ranges: list[DeadLetterRange] = ranges) -> None:
                    current = self.partitions.get(sp)  # (rebuilt if a write failed meanwhile)
                    if current is not None:
                        for r in ranges:
                            self._persist_write(effects, sp, current.finish_archiving(
                                r.first_offset, r.last_offset), token)

                _, error = await self._run(finish)
                if error != _E.none.value:
                    # Still ARCHIVING in the durable state: the next durable write of
                    # this share-partition (or a restart) writes them again.
                    log.error("share group %r: the ARCHIVED state of %s-%d after its "
                              "dead-letter records could not be written (%s)", group_id,
                              name, p, _E(error).name)
                    return
        finally:
            self._dead_lettering.discard(sp)

    # -- offsets admin (DescribeShareGroupOffsets, AlterShareGroupOffsets, DeleteShareGroupOffsets) --

    def share_group_state(self, group_id: str) -> str | None:
        """"Empty" / "Stable" of a share group, None when there is none."""
        self.ensure_loaded()
        g = self.groups.groups.get(group_id)
        return None if g is None else g.state

    def partition_offsets(self, group_id: str) -> dict[TopicPartition, tuple[int, int, int]]:
        """(start offset, leader epoch, delivery complete count) of every share-partition
        of the group with a state (Kafka's ReadShareGroupStateSummary)."""
        self.ensure_loaded()
        out: dict[TopicPartition, tuple[int, int, int]] = {}
        for sp, state in self.persister.latest.items():
            if sp[0] == group_id:
                out[(sp[1], sp[2])] = (state.start_offset, state.leader_epoch,
                                       state.delivery_complete_count)
        for sp, part in self.partitions.items():
            if sp[0] == group_id:
                out[(sp[1], sp[2])] = (part.start_offset, part.leader_epoch,
                                       part.delivery_complete_count)
        return out

    async def alter_offsets(self, group_id: str, offsets: Mapping[TopicPartition, int]) -> int:
        """AlterShareGroupOffsets: only while the group is empty (NON_EMPTY_GROUP); the
        group is created if it does not exist, as Kafka does. Each share-partition gets
        a fresh state at its offset (the next state epoch), written as a ShareSnapshot; a
        negative offset deletes its state instead. Answered once durable."""
        self.ensure_loaded()
        g = self.groups.groups.get(group_id)
        if g is not None and g.members:
            return _E.non_empty_group.value

        def run(effects: _Effects, token: int | None) -> None:
            if offsets:  # (nothing to set: no group is made up)
                self.groups.groups.setdefault(group_id, ShareGroup(group_id))
            for (tid, p), offset in sorted(offsets.items()):
                sp = (group_id, tid, p)
                part = self._existing(sp)
                if offset < 0:
                    # Kafka's "uninitialized" start offset (-1): no state, the next
                    # fetch starts afresh from share.auto.offset.reset.
                    if part is not None:
                        self.partitions.pop(sp, None)
                        self._add(effects, self.persister.tombstone(self._next_write_id(), sp),
                                  token)
                    continue
                if part is None:
                    part, state = SharePartition.initialize(self.partition_config(group_id), offset,
                                                            stats=self.stats)
                    self.partitions[sp] = part
                else:
                    state = part.reset_start_offset(offset)
                self._add(effects, self.persister.snapshot(self._next_write_id(), sp, state), token)

        _, error = await self._run(run)
        return error

    async def delete_offsets(self, group_id: str, topic_ids: Iterable[uuid.UUID]
                             ) -> tuple[int, set[uuid.UUID]]:
        """DeleteShareGroupOffsets: only while the group is empty; the share state of
        every partition of the topics is deleted (tombstones, as Kafka's
        DeleteShareGroupState); answered once durable. The error, and the topics that
        had a share state (the others have "no offset information to delete")."""
        self.ensure_loaded()
        g = self.groups.groups.get(group_id)
        if g is None:
            return _E.group_id_not_found.value, set()
        if g.members:
            return _E.non_empty_group.value, set()
        tids = set(topic_ids)

        def run(effects: _Effects, token: int | None) -> set[uuid.UUID]:
            doomed = {sp for sp in (*self.partitions, *self.persister.latest)
                      if sp[0] == group_id and sp[1] in tids}
            for sp in sorted(doomed):
                self.partitions.pop(sp, None)
                self._add(effects, self.persister.tombstone(self._next_write_id(), sp), token)
            return {sp[1] for sp in doomed}

        deleted, error = await self._run(run)
        return error, deleted or set()


def _archiving(state: PersistedShareState) -> bool:
    return any(b.delivery_state == RecordState.ARCHIVING for b in state.state_batches)


def _dead_letter_ranges(part: SharePartition | None, durable: PersistedShareState | None
                        ) -> list[DeadLetterRange]:
    """The share-partition's ARCHIVING runs, cut to what is durably ARCHIVING, or durably
    AVAILABLE at the delivery count limit (a record in flight at the limit when the broker
    stopped: every rebuild archives it): a dead-letter record is never written for a state
    a crash could take back. A run read back after a restart has lost why it was
    archived: Kafka's rule then, rejected below the delivery count limit."""
    if part is None or durable is None:
        return []
    limit = part.config.delivery_count_limit
    spans = [(b.first_offset, b.last_offset) for b in durable.state_batches
             if b.delivery_state == RecordState.ARCHIVING
             or b.delivery_state == RecordState.AVAILABLE and b.delivery_count >= limit]
    out: list[DeadLetterRange] = []
    for run in part.dead_letter_runs():
        for lo, hi in spans:
            lo, hi = max(lo, run.first_offset), min(hi, run.last_offset)
            if lo <= hi:
                out.append(DeadLetterRange(lo, hi, run.delivery_count,
                                           run.rejected or run.delivery_count < limit))
    return sorted(out, key=lambda r: r.first_offset)
