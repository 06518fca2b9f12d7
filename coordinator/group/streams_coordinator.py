"""The async shell's part for streams groups (KIP-1071, ``group.protocol=streams``):
drives :class:`~txbroker.coordinator.streams.groups.StreamsGroups` as the wiring
specification of ``coordinator/streams/__init__.py`` says. Mixed into
:class:`~txbroker.coordinator.group.coordinator.GroupCoordinator`: streams groups live in
the ``__consumer_offsets`` partitions and the group-id namespace of the other groups.

* A heartbeat's records are appended to the group's partition and the answer waits until
  they are durable; a failed append reloads the group from the log (memory never runs
  ahead of it).
* Session and rebalance timeouts, and the end of a group's initial rebalance delay
  (its first assignment), fire on the coordinator's wake timer (``streams_tick``).
* An assignment too large for the event loop (``AssignmentInput.work`` at least
  ``offload_min_work``: 25-70 ms of the assignor) is computed on the streams
  assignor's thread: the state machine asks for it (``assignment_input``) before it
  changes anything, and the heartbeat (or the ended initial rebalance delay) runs
  again on the event loop with the result, which is used only if the group's input is
  still the same (else it is computed again). Meanwhile the group is held: its other
  heartbeats wait and its timers are not run (as Kafka's coordinator thread runs one
  group's events one after the other); every other request is answered.
* Loading replays the StreamsGroup* records (``replay_streams_record``), then re-arms
  the timers (``streams_loaded``).
* Internal topics (repartition, changelog) a heartbeat asks for are created in the
  background, once at a time per name (``create_streams_topics``).
* One group id names one group type: a classic group with members, a consumer group or
  a share group (checked by the handler) is not a streams group (GROUP_ID_NOT_FOUND); an
  Empty classic group (offsets only) becomes a streams group when a member joins, and an
  Empty streams group a classic group when a classic member joins (``join`` of the
  coordinator), offsets kept, as in Kafka.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode
from txbroker.coordinator.streams.config import RECORD_TYPES, StreamsGroupConfig
from txbroker.protocol.errors import KafkaError

from ..internal_topic import (
    OFFSETS_TOPIC,
    iter_partition_batches,
    partition_for,
)
from ..shell import now_ms
from . import group_configs as GC
from .group_configs import KAFKA_LIMITS, GroupConfigStore
from .offsets import ExpiryRule
from .records import encode_group_metadata_key

if TYPE_CHECKING:
    from txbroker.coordinator.streams.assignor import AssignmentInput, MemberTasks
    from txbroker.coordinator.streams.groups import StreamsGroups
    from txbroker.coordinator.streams.results import StreamsHeartbeat, StreamsHeartbeatResult
    from txbroker.coordinator.streams.topology import InternalTopic

log = logging.getLogger("txbroker.coordinator.group.coordinator")

_E = ErrorCode
Record = tuple[bytes, bytes | None]
TOPIC_RETRY_MS = 60_000


def streams_group_config_limits(base: StreamsGroupConfig) -> dict[str, tuple[int, int, int]]:
    """The broker's values of the range-checked streams.* group configs, with Kafka's
    default bounds (txbroker has no group.streams.min/max.* keys)."""
    return {name: (value, *KAFKA_LIMITS[name][1:]) for name, value in (
        (GC.STREAMS_SESSION_TIMEOUT, base.session_timeout_ms),
        (GC.STREAMS_HEARTBEAT_INTERVAL, base.heartbeat_interval_ms),
        (GC.STREAMS_ASSIGNMENT_INTERVAL, base.assignment_interval_ms))}


def streams_group_config_defaults(base: StreamsGroupConfig) -> dict[str, int]:
    """The broker's values of the other streams.* group configs it has keys for."""
    return {GC.STREAMS_NUM_STANDBY_REPLICAS: base.num_standby_replicas,
            GC.STREAMS_TASK_OFFSET_INTERVAL: base.task_offset_interval_ms,
            GC.STREAMS_INITIAL_REBALANCE_DELAY: base.initial_rebalance_delay_ms}


def streams_config_for(store: GroupConfigStore, group_id: str,
                       base: StreamsGroupConfig) -> StreamsGroupConfig:
    """``base`` (the broker's keys) with the group's own streams.* configs; the keys
    txbroker takes but does not act on are not read (docs/compatibility.md)."""
    overrides = store.get(group_id)
    if not overrides:
        return base
    return replace(
        base,
        session_timeout_ms=overrides.get(GC.STREAMS_SESSION_TIMEOUT, base.session_timeout_ms),
        heartbeat_interval_ms=overrides.get(GC.STREAMS_HEARTBEAT_INTERVAL,
                                            base.heartbeat_interval_ms),
        num_standby_replicas=overrides.get(GC.STREAMS_NUM_STANDBY_REPLICAS,
                                           base.num_standby_replicas),
        task_offset_interval_ms=overrides.get(GC.STREAMS_TASK_OFFSET_INTERVAL,
                                              base.task_offset_interval_ms),
        initial_rebalance_delay_ms=overrides.get(GC.STREAMS_INITIAL_REBALANCE_DELAY,
                                                 base.initial_rebalance_delay_ms),
        assignment_interval_ms=overrides.get(GC.STREAMS_ASSIGNMENT_INTERVAL,
                                             base.assignment_interval_ms))


def is_streams_record(key: bytes) -> bool:
    """A StreamsGroup* record of ``__consumer_offsets``: its key starts with an int16
    record type (Kafka's layout); the other records' keys are msgpack arrays, whose
    first byte is never 0."""
    return len(key) >= 2 and key[0] == 0 and key[1] in RECORD_TYPES


class PartitionCounts(Mapping[str, int]):
    """The topics as the streams coordinator sees them: name -> partition count, read
    from the log manager on lookup (no copy per heartbeat)."""

    def __init__(self, topics: Mapping[str, Any]) -> None:
        self._topics = topics

    def __getitem__(self, name: str) -> int:
        return self._topics[name].partitions

    def __iter__(self) -> Iterator[str]:
        return iter(self._topics)

    def __len__(self) -> int:
        return len(self._topics)


class StreamsGroupShell:
    """Streams-group entry points of the group coordinator (see the module docstring).
    ``self.streams`` is the StreamsGroups, built (and the streams coordinator's modules
    imported) on first use: a broker that never sees a streams group never loads them.
    ``self._streams_creating``: the internal topics being created, or whose creation
    failed (name -> when it may be tried again). ``self._streams_config_for``: a
    group's StreamsGroupConfig."""

    _streams_groups: StreamsGroups | None = None
    _streams_assignor: ThreadPoolExecutor | None = None

    @property
    def _streams_holds(self) -> dict[str, asyncio.Future[None]]:
        """group id -> done when the group's assignment off the event loop has landed."""
        holds = self.__dict__.get("_streams_holds_by_group")
        if holds is None:
            holds = self.__dict__["_streams_holds_by_group"] = {}
        return holds

    def _streams_hold(self, group_id: str) -> asyncio.Future[None]:
        held = asyncio.get_running_loop().create_future()
        self._streams_holds[group_id] = held
        return held

    def _streams_release(self, group_id: str, held: asyncio.Future[None]) -> None:
        if self._streams_holds.get(group_id) is held:
            del self._streams_holds[group_id]
        held.set_result(None)
        self._reschedule()  # its timers were not run meanwhile

    async def _streams_idle(self, group_id: str) -> None:
        while (held := self._streams_holds.get(group_id)) is not None:
            await asyncio.shield(held)

    def streams_stop(self) -> None:
        """The assignor's thread ends (after an assignment it is computing)."""
        if self._streams_assignor is not None:
            self._streams_assignor.shutdown(wait=False, cancel_futures=True)
            self._streams_assignor = None

    async def _streams_compute(self, snapshot: AssignmentInput) -> dict[str, MemberTasks]:
        """The assignment of ``snapshot``, on the streams assignor's thread (one: the
        large groups' assignments queue, as on Kafka's coordinator threads)."""
        from txbroker.coordinator.streams.assignor import compute_target

        if self._streams_assignor is None:
            self._streams_assignor = ThreadPoolExecutor(
                1, thread_name_prefix="txbroker-streams-assignor")
        started = now_ms()
        result = await asyncio.get_running_loop().run_in_executor(
            self._streams_assignor, compute_target, snapshot)
        log.info("streams assignment of %d member(s) computed off the event loop in %d ms",
                 len(snapshot.members), now_ms() - started)
        return result

    @property
    def streams(self) -> StreamsGroups:
        if self._streams_groups is None:
            from txbroker.coordinator.streams.groups import StreamsGroups

            self._streams_groups = StreamsGroups(self._streams_config_for)
        return self._streams_groups

    def _streams_get(self, group_id: str):
        """The live streams group ``group_id`` (None, without building anything, when no
        streams group was ever seen)."""
        return None if self._streams_groups is None else self._streams_groups.get(group_id)

    def is_streams_group(self, group_id: str) -> bool:
        return self._streams_get(group_id) is not None

    def replay_streams_record(self, key: bytes, value: bytes | None) -> None:
        """One StreamsGroup* record at load (ValueError: unreadable, the caller skips it)."""
        from txbroker.coordinator.streams import records as SR

        self.streams.replay(*SR.decode_record(key, value))

    def streams_loaded(self, now: int) -> None:
        if self._streams_groups is not None:
            self._streams_groups.on_loaded(now)

    def streams_next_deadline_ms(self) -> int | None:
        return None if self._streams_groups is None else self._streams_groups.next_deadline_ms(
            self._streams_holds)

    def _append_streams_records(self, group_id: str, records: list[Record]):
        """Append now (in call order); returns (partition log, last offset, error)."""
        return self._append_group_records(group_id, records, "streams group",
                                          self._reload_streams_group)

    def _reload_streams_group(self, group_id: str) -> None:
        """Memory back to the log after a failed write: the group's records replayed (a
        scan of its partition, only on this rare path)."""
        from txbroker.coordinator.streams import records as SR

        self.streams.groups.pop(group_id, None)
        n = self.logs.topics[OFFSETS_TOPIC].partitions if OFFSETS_TOPIC in self.logs.topics else 0
        plog = self.logs.get_log(OFFSETS_TOPIC, partition_for(group_id, n)) if n else None
        try:
            for header, recs in (iter_partition_batches(plog, plog.log_start_offset)
                                 if plog is not None else ()):
                if header.is_control:
                    continue
                for rec in recs:
                    if rec.key is None or not is_streams_record(rec.key):
                        continue
                    try:
                        key, value = SR.decode_record(rec.key, rec.value)
                    except ValueError:
                        continue
                    if key.group_id == group_id:
                        self.streams.replay(key, value)
        except (KafkaError, OSError, ValueError) as e:
            log.error("cannot read back streams group %s: %r", group_id, e)
        g = self.streams.groups.get(group_id)
        if g is not None:
            g.on_loaded(now_ms())

    def _streams_type_error(self, group_id: str, joining: bool) -> list[Record] | None:
        """None if ``group_id`` may be a streams group, else the records that make it one:
        an Empty classic group's tombstone, written before the streams group's records
        (Kafka's maybeDeleteEmptyClassicGroup; the classic group leaves memory once they
        are written) — raises LookupError when another group type owns the id."""
        if self.is_consumer_group(group_id):
            raise LookupError(group_id)
        classic = self.state.classic_group(group_id)
        if classic is None:
            return None
        if classic.members or not joining or classic.state.value != "Empty":
            raise LookupError(group_id)
        return [(encode_group_metadata_key(group_id), None)]

    async def streams_heartbeat(self, hb: StreamsHeartbeat) -> StreamsHeartbeatResult:
        """StreamsGroupHeartbeat: answered once its records are durable. A heartbeat
        whose assignment is too large for the event loop holds its group while the
        assignment is computed on the assignor's thread, then runs again with it."""
        from txbroker.coordinator.streams import records as SR
        from txbroker.coordinator.streams.results import JOIN_EPOCH, StreamsHeartbeatResult

        held = precomputed = None
        try:
            while True:
                if held is None:
                    await self._streams_idle(hb.group_id)
                if not self.is_ready(hb.group_id):
                    return StreamsHeartbeatResult(error=_E.coordinator_load_in_progress.value)
                try:
                    pre = self._streams_type_error(hb.group_id,
                                                   hb.member_epoch == JOIN_EPOCH) or []
                except LookupError:
                    return StreamsHeartbeatResult(
                        error=_E.group_id_not_found.value,
                        message=f"Group {hb.group_id} is not a streams group.")
                self.ensure_offsets_topic()
                g = self.streams.get(hb.group_id)
                epoch_before = g.p.group_epoch if g is not None else 0
                result = self.streams.heartbeat(hb, PartitionCounts(self.logs.topics),
                                                now_ms(), precomputed)
                if result.assignment_input is None:
                    break
                held = held or self._streams_hold(hb.group_id)
                snapshot = result.assignment_input
                precomputed = (snapshot, await self._streams_compute(snapshot))
            self._reschedule()
            # A refused join converts nothing (Kafka writes none of its records).
            pre = pre if result.error == _E.none.value and result.records else []
            records = pre + [SR.encode_record(r) for r in result.records]
            plog, last, error = self._append_streams_records(hb.group_id, records)
        finally:
            if held is not None:
                self._streams_release(hb.group_id, held)
        if error != _E.none.value:
            return StreamsHeartbeatResult(error=error)
        if pre and self.state.delete_group(hb.group_id) == _E.none.value:
            log.info("empty classic group %r converted to a streams group", hb.group_id)
        g = self.streams.get(hb.group_id)
        if g is not None and g.p.group_epoch != epoch_before:
            log.info("streams group %r: group epoch %d, %d member(s), state %s (member %s, "
                     "epoch %d)", hb.group_id, g.p.group_epoch, len(g.p.members), g.state,
                     hb.member_id, hb.member_epoch)
        if plog is not None:
            await self.logs.flusher.wait_acked(plog, last + 1)
        return result

    def streams_missing_client_tags(self, group_id: str, member_id: str) -> list[str]:
        """The group's ``streams.rack.aware.assignment.tags`` the member sent no client
        tag for (Kafka's MISSING_CLIENT_TAGS status, heartbeat v1+), in the config's
        order."""
        text = str(self.group_configs.value(group_id, GC.STREAMS_RACK_TAGS)).strip()
        g = self._streams_get(group_id)
        member = g.p.members.get(member_id) if g is not None and text else None
        if member is None:
            return []
        have = {key for key, _value in member.client_tags}
        return [tag for tag in re.split(r"\s*,\s*", text) if tag not in have]

    def streams_tick(self, now: int) -> None:
        """Session and rebalance timeouts, and the assignments the initial rebalance
        delay held back: their records appended."""
        if self._streams_groups is None:
            return
        from txbroker.coordinator.streams import records as SR

        holds = self._streams_holds
        for group_id, expired in self._streams_groups.expire(now, holds).items():
            if expired.member_ids:
                log.info("streams group %r: member(s) %s removed on session or rebalance "
                         "timeout (group epoch bumped)", group_id,
                         ", ".join(expired.member_ids))
            elif expired.assignment_input is None:
                log.info("streams group %r: initial rebalance delay over, tasks assigned",
                         group_id)
            if expired.records:
                self._append_streams_records(group_id,
                                             [SR.encode_record(r) for r in expired.records])
            if expired.assignment_input is not None:
                self.shell.spawn(self._streams_assign_delayed(
                    group_id, expired.assignment_input, self._streams_hold(group_id)))

    async def _streams_assign_delayed(self, group_id: str, snapshot: AssignmentInput | None,
                                      held: asyncio.Future[None]) -> None:
        """The assignment an ended initial rebalance delay left to compute off the event
        loop; computed again while the group's input changes under it."""
        from txbroker.coordinator.streams import records as SR

        try:
            while snapshot is not None:
                precomputed = (snapshot, await self._streams_compute(snapshot))
                records, snapshot = self.streams.assign_delayed(group_id, precomputed, now_ms())
                if records:
                    log.info("streams group %r: initial rebalance delay over, tasks assigned",
                             group_id)
                    self._append_streams_records(group_id,
                                                 [SR.encode_record(r) for r in records])
        finally:
            self._streams_release(group_id, held)

    def create_streams_topics(self, topics: Iterable[InternalTopic],
                              max_partitions: int | None = None) -> None:
        """Create the internal topics a heartbeat asked for, in the background (Kafka's
        broker does not wait either: the next heartbeat sees them); a name already being
        created is not asked for again."""
        now = now_ms()
        wanted = [t for t in topics if t.name not in self.logs.topics
                  and self._streams_creating.get(t.name, now) <= now]
        if not wanted:
            return
        # In progress: not before it is done (then at once if it failed: see below).
        self._streams_creating.update((t.name, 2**63) for t in wanted)
        self.shell.spawn(self._create_streams_topics(wanted, max_partitions))

    async def _create_streams_topics(self, topics: list[InternalTopic],
                                     max_partitions: int | None) -> None:
        failed: set[str] = set()
        try:
            created = await self.logs.create_topics(
                [(t.name, t.partitions, dict(t.configs)) for t in topics],
                max_partitions=max_partitions)
            for name, result in created.items():
                if isinstance(result, KafkaError) and result.code != _E.topic_already_exists:
                    failed.add(name)
                    log.warning("cannot create streams internal topic %r (tried again in "
                                "%d s): %s", name, TOPIC_RETRY_MS // 1000, result)
        finally:
            for t in topics:
                self._streams_creating.pop(t.name, None)
            # A refused topic is asked for by every heartbeat: one try (and log line) a
            # minute, not one per heartbeat.
            self._streams_creating.update((name, now_ms() + TOPIC_RETRY_MS) for name in failed)

    def streams_commit_error(self, group_id: str, member_id: str, member_epoch: int,
                             transactional: bool, api_version: int, entries) -> int | None:
        """The OffsetCommit/TxnOffsetCommit check for a streams group; None if
        ``group_id`` is not one."""
        g = self._streams_get(group_id)
        if g is None:
            return None
        from txbroker.coordinator.streams.offsets import validate_offset_commit

        return validate_offset_commit(g, member_id, member_epoch, transactional, api_version,
                                      [(e.topic, e.partition) for e in entries])

    def streams_fetch_error(self, group_id: str, member_id: str | None, member_epoch: int) -> int:
        """OffsetFetch v9+ with a member id and epoch, for a streams group."""
        g = self._streams_get(group_id)
        if g is None:
            return _E.none.value
        from txbroker.coordinator.streams.offsets import validate_offset_fetch

        return validate_offset_fetch(g, member_id, member_epoch)

    async def delete_streams_group(self, group_id: str) -> int:
        """DeleteGroups of a streams group: only an Empty one (tombstones of its records)."""
        g = self._streams_get(group_id)
        if g is None:
            return _E.group_id_not_found.value
        if g.p.members:
            return _E.non_empty_group.value
        from txbroker.coordinator.streams import records as SR

        records = [SR.encode_record(r) for r in self.streams.delete(group_id)]
        del self.streams.groups[group_id]
        plog, last, error = self._append_streams_records(group_id, records)
        if plog is not None:
            await self.logs.flusher.wait_acked(plog, last + 1)
        return error

    def streams_expiry_rule(self, group_id: str) -> ExpiryRule | None:
        """How a streams group's offsets expire (None: not a streams group): retention
        counts from each commit, but a group with members keeps its topology's source
        topics' offsets (Kafka's StreamsGroup.isSubscribedToTopic)."""
        g = self._streams_get(group_id)
        if g is None:
            return None
        topology = g.p.topology
        keep = frozenset(t for s in topology.subtopologies for t in s.input_topics()) \
            if g.p.members and topology is not None else frozenset()
        return ExpiryRule(keep_topics=keep)

    async def cleanup_streams_groups(self) -> list[str]:
        """Remove the Empty streams groups without offsets (Kafka's periodic cleanup,
        after offsets expiry: maybeDeleteGroup of every group type); returns their ids."""
        if self._streams_groups is None:
            return []
        doomed = [gid for gid, g in self.streams.groups.items()
                  if self.streams.get(gid) is not None and not g.p.members
                  and not self.offsets.has_offsets(gid)]
        for group_id in doomed:
            await self.delete_streams_group(group_id)
        return doomed

    def streams_describe(self, group_ids: Iterable[str]) -> dict[str, dict | None]:
        if self._streams_groups is None:
            return dict.fromkeys(group_ids)
        return self._streams_groups.describe(group_ids)

    def streams_listing(self) -> list[tuple[str, str]]:
        """(group id, state) of every streams group."""
        if self._streams_groups is None:
            return []
        return [(gid, g.state) for gid, g in self.streams.groups.items()
                if self.streams.get(gid) is not None]


__all__ = ["StreamsGroupShell", "PartitionCounts", "is_streams_record", "streams_config_for",
           "streams_group_config_defaults", "streams_group_config_limits"]
