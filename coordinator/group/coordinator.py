"""The group coordinator: drives the sans-IO state machine (``state.py``) and
offsets store (``offsets.py``) through the coordinators' one async shell
(:mod:`..shell`), of which this class is the adapter (records go to
``__consumer_offsets`` by group id; the classic and consumer groups' timers); loads
``__consumer_offsets`` on start and answers the group and offset requests.

Who may touch what: the state machines (``state``, ``consumer``, ``offsets``) are this
object's; handlers call the public methods below.

Ordering rules kept here (see state.py and manager.py):
* records are appended in the order the state machine asks for them, and a
  response that depends on a record is released only after the record is
  fsynced (``group_persisted``);
* committed offsets become visible (``OffsetStore.commit``) only once durable.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode
from txbroker.protocol.errors import KafkaError
from txbroker.protocol.records import ControlType, control_type_of
from txbroker.storage.log import PartitionLog
from txbroker.storage.manager import LogManager

from ..internal_topic import (
    OFFSETS_TOPIC,
    append_failure,
    append_records,
    coordinator_append_error,
    log_append_failure,
    partition_for,
)
from ..shell import CoordinatorShell, now_ms, read_batches
from ..streams.config import StreamsGroupConfig
from .consumer_classic import ClassicJoinRequest
from .consumer_coordinator import ConsumerGroupShell
from .consumer_records import ConsumerRecordKey
from .consumer_state import ConsumerGroupConfig, ConsumerGroups
from .group_configs import HEARTBEAT_INTERVAL, SESSION_TIMEOUT, GroupConfigStore
from .offsets import OffsetStore
from .records import (
    OffsetKey,
    OffsetValue,
    decode_key,
    encode_group_metadata_key,
    encode_offset_key,
    encode_offset_value,
)
from .results import GroupDescription, GroupListing
from .state import (
    Effects,
    GroupConfig,
    GroupCoordinatorState,
    GroupEvent,
    JoinResult,
    PersistRequest,
    SyncResult,
)
from .streams_coordinator import (
    StreamsGroupShell,
    is_streams_record,
    streams_config_for,
    streams_group_config_defaults,
    streams_group_config_limits,
)

log = logging.getLogger(__name__)

_E = ErrorCode


@dataclass
class GroupCoordinatorConfig:
    offsets_topic_partitions: int = 50  # offsets.topic.num.partitions
    offsets_topic_segment_bytes: int = 104857600  # offsets.topic.segment.bytes
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000  # offsets.retention.minutes
    offsets_retention_check_interval_ms: int = 600000  # offsets.retention.check.interval.ms
    offset_metadata_max_bytes: int = 4096  # offset.metadata.max.bytes
    group: GroupConfig | None = None
    consumer: ConsumerGroupConfig | None = None
    streams: StreamsGroupConfig | None = None  # the group.streams.* broker keys
    # The share.* group configs' (broker value, min, max) and other broker defaults
    # (GroupConfigStore's limits and defaults; Kafka's own where not given).
    group_config_limits: Mapping[str, tuple[int, int, int]] = field(default_factory=dict)
    group_config_defaults: Mapping[str, int | bool | str] = field(default_factory=dict)


@dataclass
class OffsetCommitEntry:
    topic: str
    partition: int
    offset: int
    leader_epoch: int | None
    metadata: str | None


class GroupCoordinator(ConsumerGroupShell, StreamsGroupShell):
    def __init__(self, logs: LogManager, config: GroupCoordinatorConfig) -> None:
        self.logs = logs
        self.config = config
        self.state = GroupCoordinatorState(config.group or GroupConfig(), self._new_member_id)
        self.offsets = OffsetStore()
        # KIP-848 consumer-protocol groups, beside the classic ones (one group id names
        # a group of one type at a time).
        self.consumer = ConsumerGroups(config.consumer or ConsumerGroupConfig())
        # Group configs (resource type 32): per-group consumer.session.timeout.ms and
        # consumer.heartbeat.interval.ms, which the consumer groups read.
        c = self.consumer.config
        streams_config = config.streams or StreamsGroupConfig()
        self.group_configs = GroupConfigStore(getattr(logs, "data_dir", None), {
            SESSION_TIMEOUT: (c.session_timeout_ms, c.min_session_timeout_ms,
                              c.max_session_timeout_ms),
            HEARTBEAT_INTERVAL: (c.heartbeat_interval_ms, c.min_heartbeat_interval_ms,
                                 c.max_heartbeat_interval_ms),
            **streams_group_config_limits(streams_config),
            **config.group_config_limits},
            {**streams_group_config_defaults(streams_config), **config.group_config_defaults})
        self.consumer.overrides = self.group_configs.overrides
        # KIP-1071 streams groups, in the same partitions and group-id namespace, each
        # with the broker's group.streams.* keys overridden by its streams.* configs
        # (``self.streams``, built on first use: StreamsGroupShell).
        self._streams_config_for = (
            lambda group_id: streams_config_for(self.group_configs, group_id, streams_config))
        self._streams_creating: dict[str, int] = {}
        # Classic members' LeaveGroup of a consumer group: (log, last offset) to wait for.
        self._unflushed_leaves: dict[str, tuple[PartitionLog, int]] = {}
        # __consumer_offsets partitions still loading: their groups answer
        # COORDINATOR_LOAD_IN_PROGRESS, the others are served (Kafka loads each group
        # coordinator partition on its own).
        self._loading: set[int] = set()
        self.shell = CoordinatorShell(logs, OFFSETS_TOPIC, self,
                                      partitions=config.offsets_topic_partitions,
                                      segment_bytes=config.offsets_topic_segment_bytes)
        self._expiry_task: asyncio.Task | None = None
        self.rebalances = 0  # completed join phases (new generations), for /metrics

    @staticmethod
    def _new_member_id(prefix: str) -> str:
        # Kafka: client id (or group.instance.id for static members) + "-" + a UUID.
        return f"{prefix}-{uuid.uuid4()}"

    # --- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        """Load __consumer_offsets if it exists (in the background, partition by
        partition: a group's requests get COORDINATOR_LOAD_IN_PROGRESS until its
        partition is loaded); it is created on first use."""
        self.shell.start()
        if OFFSETS_TOPIC in self.logs.topics:
            self._loading = set(range(self.logs.topics[OFFSETS_TOPIC].partitions))
            self.shell.start(self._load(), "group-coordinator-load")
        self._expiry_task = asyncio.create_task(self._expiry_loop(), name="offset-expiry")

    async def stop(self) -> None:
        await self.shell.stop(self._expiry_task)
        self.streams_stop()

    def ensure_offsets_topic(self) -> None:
        self.shell.ensure_topic()

    def status(self) -> ErrorCode:
        return _E.none if self.loaded else _E.coordinator_load_in_progress

    @property
    def loaded(self) -> bool:
        """Every partition of __consumer_offsets loaded."""
        return not self._loading

    def is_ready(self, group_id: str) -> bool:
        """Is the group's __consumer_offsets partition loaded (its requests served)?"""
        return not self._loading or partition_for(
            group_id, self.logs.topics[OFFSETS_TOPIC].partitions) not in self._loading

    def _partition(self, group_id: str) -> PartitionLog:
        return self.shell.partition_log(group_id)

    async def _load(self) -> None:
        started = time.monotonic()
        records = 0
        known: set[str] = set()
        for p in range(self.logs.topics[OFFSETS_TOPIC].partitions):
            plog = self.logs.get_log(OFFSETS_TOPIC, p)
            if plog is not None:
                records += await self._load_partition(plog)
            # The groups with offsets only (no group record) exist too, Empty.
            groups = set(self.offsets.groups())
            for group in groups - known:
                if group not in self.consumer.groups and not self.is_streams_group(group):
                    self.state.ensure_group(group)
            known = groups
            self._loading.discard(p)
            await asyncio.sleep(0)  # serve the groups of this partition now
        self.consumer.loaded(now_ms())
        self.streams_loaded(now_ms())
        self._reschedule()
        log.info("group coordinator loaded %d record(s) from %s in %.2fs: %d group(s)",
                 records, OFFSETS_TOPIC, time.monotonic() - started, len(self.state.group_ids()))

    async def _load_partition(self, plog: PartitionLog) -> int:
        records = 0
        async for header, recs in read_batches(plog, plog.log_start_offset):
            if header.is_control:
                for rec in recs:
                    commit = control_type_of(rec) == ControlType.COMMIT
                    self.offsets.complete_transaction(header.producer_id, None, commit)
                continue
            pid = header.producer_id if header.is_transactional else None
            for rec in recs:
                if rec.key is None:
                    continue
                try:
                    if is_streams_record(rec.key):
                        self.replay_streams_record(rec.key, rec.value)
                    elif self.offsets.replay(rec.key, rec.value, pid) is None:
                        key = decode_key(rec.key)
                        if isinstance(key, ConsumerRecordKey):
                            self.consumer.replay(key, rec.value)
                            records += 1
                            continue
                        effects = self.state.replay(rec.key, rec.value, now_ms())
                        if effects is not None:
                            self._apply(effects)
                except ValueError as e:
                    log.warning("%s: skipping unreadable record at offset %d: %s",
                                plog.name, rec.offset, e)
                records += 1
        return records

    # --- the shell's adapter ------------------------------------------------------------

    def _apply(self, effects: Effects) -> None:
        self.shell.apply(effects)

    def placement(self, request: PersistRequest) -> str:
        return request.group_id

    def persisted(self, now: int, write_id: int, error: int) -> Effects:
        return self.state.group_persisted(now, write_id, error)

    def on_effects(self, effects: Effects) -> None:
        pass  # every effect of a group is the shell's

    def next_wake(self, effects: Effects | None = None) -> int | None:
        wakes = [w for w in (self.state.next_wake_ms(), self.consumer.next_wake_ms(),
                             self.streams_next_deadline_ms()) if w is not None]
        return min(wakes) if wakes else None

    def _reschedule(self) -> None:
        self.shell.reschedule(self.next_wake())

    def tick(self, now: int) -> Effects:
        for group_id, records, why in self.consumer.tick(now):
            log.info("%s: removed (group epoch bumped)", why)
            self._append_consumer_records(group_id, records)
            self._downgrade_after_removal(group_id, now)
        self.streams_tick(now)
        return self.state.tick(now)

    def report(self, e: GroupEvent) -> None:
        if e.kind == "preparing_rebalance":
            log.info("preparing to rebalance group %r in state %s with old generation %d "
                     "(%d member(s))", e.group_id, e.old_state, e.generation_id, e.members)
        elif e.kind == "new_generation":
            self.rebalances += 1
            if e.members:
                log.info("group %r rebalanced: generation %d with %d member(s), protocol %s",
                         e.group_id, e.generation_id, e.members, e.protocol)
            else:
                log.info("group %r is now Empty (generation %d)", e.group_id, e.generation_id)

    # --- front doors for the admin views (the state machine is this object's) ----------

    def describe(self, group_id: str) -> GroupDescription:
        """DescribeGroups of a classic group (an unknown one is Dead with no members)."""
        return self.state.describe(group_id)

    def list_groups(self, states_filter: Iterable[str] | None = None) -> list[GroupListing]:
        """ListGroups of the classic groups; the states filter is case-insensitive."""
        return self.state.list_groups(states_filter)

    # --- group membership --------------------------------------------------------------

    async def join(self, *, group_id: str, member_id: str, group_instance_id: str | None,
                   client_id: str, client_host: str, session_timeout_ms: int,
                   rebalance_timeout_ms: int, protocol_type: str,
                   protocols: list[tuple[str, bytes]], require_known_member_id: bool,
                   supports_skip_assignment: bool = False) -> JoinResult:
        if not self.is_ready(group_id):
            return JoinResult(_E.coordinator_load_in_progress.value, member_id=member_id)
        if self.is_streams_group(group_id):
            # One id names one group type: a streams group with members refuses a classic
            # member; an Empty one is deleted (its offsets stay) and the id becomes a
            # classic group, as Kafka's maybeDeleteEmptyStreamsGroup.
            if self.streams.groups[group_id].p.members:
                return JoinResult(_E.inconsistent_group_protocol.value, member_id=member_id)
            if await self.delete_streams_group(group_id) != _E.none.value:
                return JoinResult(_E.coordinator_not_available.value, member_id=member_id)
            log.info("empty streams group %r converted to a classic group", group_id)
        if self.is_consumer_group(group_id):
            if self.consumer.groups[group_id].members:
                # A classic member of a consumer group (online migration, consumer_classic).
                limits = self.state.config
                if not (limits.min_session_timeout_ms <= session_timeout_ms
                        <= limits.max_session_timeout_ms):
                    return JoinResult(_E.invalid_session_timeout.value, member_id=member_id)
                return await self.classic_join_consumer_group(ClassicJoinRequest(
                    group_id, member_id, group_instance_id, client_id, client_host,
                    session_timeout_ms, rebalance_timeout_ms, protocol_type,
                    tuple((n, bytes(m)) for n, m in protocols), require_known_member_id))
            if await self.delete_consumer_group(group_id) != _E.none.value:
                return JoinResult(_E.coordinator_not_available.value, member_id=member_id)
            log.info("empty consumer group %r converted to a classic group", group_id)
        self.ensure_offsets_topic()
        result = await self.shell.call(lambda token: self.state.join(
            token, now_ms(), group_id, member_id, group_instance_id, client_id, client_host,
            session_timeout_ms, rebalance_timeout_ms, protocol_type, protocols,
            require_known_member_id, supports_skip_assignment))
        return result if result is not None else JoinResult(_E.coordinator_not_available.value)

    async def sync(self, *, group_id: str, generation_id: int, member_id: str,
                   group_instance_id: str | None, protocol_type: str | None,
                   protocol_name: str | None, assignments: dict[str, bytes]) -> SyncResult:
        if not self.is_ready(group_id):
            return SyncResult(_E.coordinator_load_in_progress.value)
        if self.is_consumer_group(group_id):
            return self.classic_sync_consumer_group(group_id, generation_id, member_id,
                                                    group_instance_id, protocol_type,
                                                    protocol_name)
        self.ensure_offsets_topic()
        result = await self.shell.call(lambda token: self.state.sync(
            token, now_ms(), group_id, generation_id, member_id, group_instance_id,
            protocol_type, protocol_name, assignments))
        return result if result is not None else SyncResult(_E.coordinator_not_available.value)

    def heartbeat(self, *, group_id: str, generation_id: int, member_id: str,
                  group_instance_id: str | None) -> int:
        if not self.is_ready(group_id):
            return _E.coordinator_load_in_progress.value
        if self.is_consumer_group(group_id):
            return self.classic_heartbeat_consumer_group(group_id, generation_id, member_id,
                                                         group_instance_id)
        error = self.state.heartbeat(now_ms(), group_id, generation_id, member_id,
                                     group_instance_id)
        self._reschedule()
        return error

    def leave(self, group_id: str, members: list[tuple[str, str | None]]) -> tuple[int, list[int]]:
        if not self.is_ready(group_id):
            return _E.coordinator_load_in_progress.value, [
                _E.coordinator_load_in_progress.value] * len(members)
        if self.is_consumer_group(group_id):
            return _E.none.value, self.classic_leave_consumer_group(group_id, members)
        result = self.state.leave(now_ms(), group_id, members)
        self._apply(result.effects)
        return result.error, result.member_errors

    # --- offsets ------------------------------------------------------------------------

    async def commit_offsets(self, *, group_id: str, generation_id: int, member_id: str,
                             group_instance_id: str | None, entries: list[OffsetCommitEntry],
                             api_version: int, retention_ms: int | None = None
                             ) -> dict[tuple[str, int], int]:
        """OffsetCommit: per (topic, partition) error codes."""
        keys = [(e.topic, e.partition) for e in entries]
        if not self.is_ready(group_id):
            return dict.fromkeys(keys, _E.coordinator_load_in_progress.value)
        self.ensure_offsets_topic()
        error = self.consumer_commit_error(group_id, member_id, group_instance_id, generation_id,
                                           False, api_version, entries)
        if error is None:
            error = self.streams_commit_error(group_id, member_id, generation_id, False,
                                              api_version, entries)
        if error is None:
            error = self.state.validate_offset_commit(group_id, generation_id, member_id,
                                                      group_instance_id, now_ms(), api_version)
        self._reschedule()
        if error != _E.none.value:
            return dict.fromkeys(keys, error)
        commit_ms = now_ms()
        expire_ms = commit_ms + retention_ms if retention_ms is not None and retention_ms >= 0 \
            else None
        results, records, accepted = self._offset_records(group_id, entries, commit_ms, expire_ms)
        if records:
            plog = self._partition(group_id)
            try:
                last = append_records(plog, records, timestamp=commit_ms).last_offset
                await self.logs.flusher.wait_acked(plog, last + 1)
            except (KafkaError, OSError) as err:
                log_append_failure(self.logs, log, err, f"offsets of group {group_id}")
                code = append_failure(err)
                for e, _v in accepted:
                    results[(e.topic, e.partition)] = code
                return results
            for e, v in accepted:
                self.offsets.commit(group_id, e.topic, e.partition, v.offset, v.leader_epoch,
                                    v.metadata, v.commit_timestamp_ms, v.expire_timestamp_ms)
                results[(e.topic, e.partition)] = _E.none.value
        return results

    def _offset_records(self, group_id: str, entries: list[OffsetCommitEntry], commit_ms: int,
                        expire_ms: int | None):
        """Check each entry; the records to append for the valid ones.
        Returns (errors of the rejected, records, [(entry, value)] of the accepted)."""
        results: dict[tuple[str, int], int] = {}
        records: list[tuple[bytes, bytes | None]] = []
        accepted: list[tuple[OffsetCommitEntry, OffsetValue]] = []
        for e in entries:
            if len((e.metadata or "").encode()) > self.config.offset_metadata_max_bytes:
                results[(e.topic, e.partition)] = _E.offset_metadata_too_large.value
                continue
            if self.logs.get_log(e.topic, e.partition) is None:
                results[(e.topic, e.partition)] = _E.unknown_topic_or_partition.value
                continue
            value = OffsetValue(e.offset, e.leader_epoch, e.metadata or "", commit_ms, expire_ms)
            records.append((encode_offset_key(group_id, e.topic, e.partition),
                            encode_offset_value(value)))
            accepted.append((e, value))
        return results, records, accepted

    async def txn_commit_offsets(self, *, group_id: str, producer_id: int, producer_epoch: int,
                                 generation_id: int, member_id: str,
                                 group_instance_id: str | None,
                                 entries: list[OffsetCommitEntry]) -> dict[tuple[str, int], int]:
        """TxnOffsetCommit: the offsets are written now, in a transactional batch of the
        producer, and stay pending (invisible to OffsetFetch) until the transaction's
        marker reaches the group's __consumer_offsets partition."""
        keys = [(e.topic, e.partition) for e in entries]
        if not self.is_ready(group_id):
            return dict.fromkeys(keys, _E.coordinator_load_in_progress.value)
        self.ensure_offsets_topic()
        error = self.consumer_commit_error(group_id, member_id, group_instance_id, generation_id,
                                           True, 0, entries)
        if error is None:
            error = self.streams_commit_error(group_id, member_id, generation_id, True, 0,
                                              entries)
        if error is None:
            error = self.state.validate_txn_offset_commit(group_id, generation_id, member_id,
                                                          group_instance_id, now_ms())
        self._reschedule()
        if error != _E.none.value:
            return dict.fromkeys(keys, error)
        commit_ms = now_ms()
        results, records, accepted = self._offset_records(group_id, entries, commit_ms, None)
        if records:
            plog = self._partition(group_id)
            try:
                last = append_records(plog, records, timestamp=commit_ms,
                                      producer_id=producer_id,
                                      producer_epoch=producer_epoch).last_offset
                await self.logs.flusher.wait_acked(plog, last + 1)
            except OSError as err:
                log_append_failure(self.logs, log, err,
                                   f"transactional offsets of group {group_id}")
                code = coordinator_append_error(_E.kafka_storage_error)
                for e, _v in accepted:
                    results[(e.topic, e.partition)] = code
                return results
            except KafkaError as err:
                # A fenced producer's batch: INVALID_PRODUCER_EPOCH, as Kafka answers it
                # (every version; its clients treat it as fatal for TxnOffsetCommit).
                code = err.code.value
                for e, _v in accepted:
                    results[(e.topic, e.partition)] = code
                return results
            for e, v in accepted:
                self.offsets.txn_commit(producer_id, group_id, e.topic, e.partition, v.offset,
                                        v.leader_epoch, v.metadata, v.commit_timestamp_ms)
                results[(e.topic, e.partition)] = _E.none.value
        return results

    def complete_transaction(self, producer_id: int, commit: bool) -> None:
        """A COMMIT/ABORT marker of ``producer_id`` is durable in __consumer_offsets:
        its pending offsets become committed or are dropped."""
        changed = self.offsets.complete_transaction(producer_id, None, commit)
        if changed:
            log.debug("transaction of producer %d %s %d offset(s)", producer_id,
                      "committed" if commit else "aborted", len(changed))

    def fetch_offsets(self, group_id: str, partitions: Iterable[tuple[str, int]] | None,
                      require_stable: bool) -> tuple[int, dict[tuple[str, int], tuple]]:
        """OffsetFetch: (group error, {(topic, partition): (offset, leader_epoch, metadata,
        error)}); ``partitions`` None means every partition the group has offsets for."""
        if not self.is_ready(group_id):
            return _E.coordinator_load_in_progress.value, {}
        if partitions is None:
            partitions = sorted(self.offsets.group_offsets(group_id))
        out = {}
        for topic, partition in partitions:
            if require_stable and self.offsets.has_pending(group_id, topic, partition):
                out[(topic, partition)] = (-1, -1, "", _E.unstable_offset_commit.value)
                continue
            v = self.offsets.get(group_id, topic, partition)
            if v is None:
                out[(topic, partition)] = (-1, -1, "", _E.none.value)
            else:
                epoch = v.leader_epoch if v.leader_epoch is not None else -1
                out[(topic, partition)] = (v.offset, epoch, v.metadata, _E.none.value)
        return _E.none.value, out

    async def _write_tombstones(self, keys: list[OffsetKey], groups: list[str]) -> None:
        by_partition: dict[int, list[tuple[bytes, bytes | None]]] = {}
        if OFFSETS_TOPIC not in self.logs.topics:
            return
        n = self.logs.topics[OFFSETS_TOPIC].partitions
        for k in keys:
            by_partition.setdefault(partition_for(k.group_id, n), []).append(
                (encode_offset_key(k.group_id, k.topic, k.partition), None))
        for g in groups:
            by_partition.setdefault(partition_for(g, n), []).append(
                (encode_group_metadata_key(g), None))
        waits = []
        for p, records in by_partition.items():
            plog = self.logs.get_log(OFFSETS_TOPIC, p)
            if plog is None:
                continue
            try:
                last = append_records(plog, records).last_offset
            except (KafkaError, OSError) as e:  # logged and skipped, as Kafka does
                log_append_failure(self.logs, log, e, f"{len(records)} tombstone(s) to {plog.name}")
                continue
            waits.append(self.logs.flusher.wait_acked(plog, last + 1))
        if waits:
            await asyncio.gather(*waits)

    async def delete_groups(self, group_ids: list[str]) -> dict[str, int]:
        results = {}
        keys: list[OffsetKey] = []
        deleted: list[str] = []
        for group_id in group_ids:
            if not self.is_ready(group_id):
                results[group_id] = _E.coordinator_load_in_progress.value
                continue
            if not group_id:
                results[group_id] = _E.invalid_group_id.value
                continue
            if self.is_consumer_group(group_id):
                error = await self.delete_consumer_group(group_id)
            elif self.is_streams_group(group_id):
                error = await self.delete_streams_group(group_id)
            else:
                error = self.state.delete_group(group_id)
            results[group_id] = error
            if error == _E.none.value:
                keys += self.offsets.delete_group(group_id)
                deleted.append(group_id)
        if deleted:
            await self._write_tombstones(keys, deleted)
            log.info("deleted group(s) %s", ", ".join(deleted))
        return results

    async def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]
                             ) -> tuple[int, dict[tuple[str, int], int]]:
        """OffsetDelete (KIP-496)."""
        if not self.is_ready(group_id):
            return _E.coordinator_load_in_progress.value, {}
        streams = self.streams_expiry_rule(group_id)
        if streams is not None:
            # Kafka's StreamsGroup: the topology's source topics of a group with members
            # are GROUP_SUBSCRIBED_TO_TOPIC, the same topics whose offsets never expire.
            group_error, topic_errors = _E.none.value, {
                t: _E.group_subscribed_to_topic.value for t, _ in partitions
                if t in streams.keep_topics}
        else:
            group_error, topic_errors = self.state.validate_offset_delete(
                group_id, sorted({t for t, _ in partitions}))
        if group_error != _E.none.value:
            return group_error, {}
        results = {}
        doomed = []
        for topic, partition in partitions:
            error = topic_errors.get(topic, _E.none.value)
            if error == _E.none.value and self.logs.get_log(topic, partition) is None:
                error = _E.unknown_topic_or_partition.value
            results[(topic, partition)] = error
            if error == _E.none.value:
                doomed.append((topic, partition))
        keys = self.offsets.delete(group_id, doomed)
        groups = self.state.cleanup_groups(self.offsets.has_offsets)
        await self._write_tombstones(keys, groups)
        return _E.none.value, results

    async def delete_topic_offsets(self, topics: set[str]) -> None:
        """DeleteTopics: as Kafka, every group forgets its offsets of the deleted topics
        (tombstones), and a group left Empty without offsets goes too. A topic created
        again under the same name starts with no committed offsets."""
        if not self.loaded or not topics:
            return
        keys = []
        for group in self.offsets.groups():
            doomed = [tp for tp in self.offsets.group_offsets(group) if tp[0] in topics]
            if doomed:
                keys += self.offsets.delete(group, doomed)
        groups = self.state.cleanup_groups(self.offsets.has_offsets)
        if keys or groups:
            await self._write_tombstones(keys, groups)
            log.info("deleted topic(s) %s: removed %d committed offset(s), %d empty group(s)",
                     sorted(topics), len(keys), len(groups))

    async def _expiry_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.offsets_retention_check_interval_ms / 1000)
            if not self.loaded:
                continue
            try:
                await self.expire_offsets()
            except Exception:
                log.exception("offset expiry failed")

    async def expire_offsets(self, now: int | None = None) -> int:
        now = now_ms() if now is None else now
        keys = self.offsets.expire(now, self.config.offsets_retention_ms,
                                   self.offset_expiry_rule)
        groups = self.state.cleanup_groups(self.offsets.has_offsets)
        groups += await self.cleanup_consumer_groups()
        groups += await self.cleanup_streams_groups()
        if keys or groups:
            await self._write_tombstones(keys, groups)
            log.info("expired %d offset(s); removed %d empty group(s)", len(keys), len(groups))
        return len(keys)



