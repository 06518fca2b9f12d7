"""The async shell's part for consumer-protocol groups (KIP-848): drives
:class:`~txbroker.coordinator.group.consumer_state.ConsumerGroups`, appends the
records it returns to ``__consumer_offsets`` and answers a heartbeat once they are
durable. Mixed into :class:`~txbroker.coordinator.group.coordinator.GroupCoordinator`.

A group id names one group type at a time. An Empty classic group (offsets only)
becomes a consumer group when a member joins with ConsumerGroupHeartbeat, and an Empty
consumer group a classic group on a JoinGroup, as in Kafka. A classic group with
members is upgraded (migration.py) when ``group.consumer.migration.policy`` allows it,
else the heartbeat is refused with GROUP_ID_NOT_FOUND ("not a consumer group"); its
members go on as classic members of the consumer group (consumer_classic.py), and when
the last consumer-protocol member leaves, the group is downgraded back to a classic
group if the policy allows it.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import txbroker.coordinator.group.migration as migration
from kio.schema.errors import ErrorCode
from txbroker.protocol.errors import KafkaError

from ..internal_topic import (
    OFFSETS_TOPIC,
    append_failure,
    append_records,
    iter_partition_batches,
    log_append_failure,
    partition_for,
)
from ..shell import now_ms
from .consumer_checks import Refused, validate_heartbeat
from .consumer_classic import ClassicJoinRequest
from .consumer_records import ConsumerRecordKey
from .consumer_state import HeartbeatRequest, HeartbeatResult, Record
from .offsets import ExpiryRule
from .records import decode_key, encode_group_metadata_key
from .results import JoinResult, SyncResult

log = logging.getLogger("txbroker.coordinator.group.coordinator")

_E = ErrorCode


class TopicImage(Mapping[str, tuple[uuid.UUID, int]]):
    """The topics as the assignors see them: name -> (topic id, partitions), read from
    the log manager on lookup (no copy per heartbeat). The internal topics are in it:
    Kafka's coordinator resolves names and regexes against its whole metadata image, so
    a member subscribed to ``__consumer_offsets`` is assigned its partitions."""

    def __init__(self, topics: Mapping[str, Any]) -> None:
        self._topics = topics

    def __getitem__(self, name: str) -> tuple[uuid.UUID, int]:
        info = self._topics[name]
        return info.topic_id, info.partitions

    def __iter__(self) -> Iterator[str]:
        return iter(self._topics)

    def __len__(self) -> int:
        return len(self._topics)


class ConsumerGroupShell:
    """Consumer-protocol entry points of the group coordinator (see the module docstring)."""

    def topic_image(self) -> TopicImage:
        return TopicImage(self.logs.topics)

    def topic_names(self) -> dict[uuid.UUID, str]:
        return {i.topic_id: n for n, i in self.logs.topics.items()}

    def is_consumer_group(self, group_id: str) -> bool:
        return group_id in self.consumer.groups

    def _append_consumer_records(self, group_id: str, records: list[Record]):
        """Append now (in call order); returns (partition log, last offset, error)."""
        return self._append_group_records(group_id, records, "consumer group",
                                          self._reload_consumer_group)

    def _append_group_records(self, group_id: str, records: list[Record], kind: str,
                              reload: Callable[[str], None]):
        """Append a group's records now; on a failure the group is reloaded from the
        log (memory must not run ahead of it). (partition log, last offset, error)."""
        if not records:
            return None, -1, _E.none.value
        try:
            plog = self._partition(group_id)
            return plog, append_records(plog, records).last_offset, _E.none.value
        except (KafkaError, OSError) as e:
            log_append_failure(self.logs, log, e, f"{kind} {group_id}")
            reload(group_id)
            return None, -1, append_failure(e)

    def _reload_consumer_group(self, group_id: str) -> None:
        """Memory back to the log after a failed write: the group's records replayed
        (a scan of its __consumer_offsets partition, only on this rare path)."""
        records = []
        plog = self.logs.get_log(OFFSETS_TOPIC, partition_for(
            group_id, self.logs.topics[OFFSETS_TOPIC].partitions)) \
            if OFFSETS_TOPIC in self.logs.topics else None
        try:
            for header, recs in (iter_partition_batches(plog, plog.log_start_offset)
                                 if plog is not None else ()):
                if header.is_control:
                    continue
                for rec in recs:
                    if rec.key is None:
                        continue
                    try:
                        key = decode_key(rec.key)
                    except ValueError:
                        continue
                    if isinstance(key, ConsumerRecordKey) and key.group_id == group_id:
                        records.append((key, rec.value))
        except (KafkaError, OSError, ValueError) as e:
            log.error("cannot read back consumer group %s: %r", group_id, e)
        self.consumer.reload(group_id, records, now_ms())

    async def consumer_heartbeat(self, req: HeartbeatRequest) -> HeartbeatResult:
        """ConsumerGroupHeartbeat: answered once its records are durable."""
        if not self.is_ready(req.group_id):
            return HeartbeatResult(_E.coordinator_load_in_progress.value)
        self.ensure_offsets_topic()
        now = now_ms()
        pre: list[Record] = []
        classic = self.state.classic_group(req.group_id) if req.group_id else None
        if classic is not None:
            try:
                validate_heartbeat(req, self.consumer.config.assignors)
            except Refused as e:
                return HeartbeatResult(e.error, e.message)
            if classic.members and req.member_epoch == 0:
                pre = self._upgrade(req.group_id, now)
            elif not classic.members and self.state.delete_group(req.group_id) == _E.none.value:
                # An Empty classic group (offsets only) becomes a consumer group, as in Kafka.
                log.info("empty classic group %r converted to a consumer group", req.group_id)
                pre = [(encode_group_metadata_key(req.group_id), None)]
            if not pre:
                return HeartbeatResult(_E.group_id_not_found.value,
                                       f"Group {req.group_id} is not a consumer group.")
        known = req.group_id in self.consumer.groups
        epoch_before = self.consumer.groups[req.group_id].group_epoch if known else 0
        result = self.consumer.heartbeat(now, req, self.topic_image())
        after: list[Record] = []
        downgrade = None
        if result.error == _E.none.value and req.member_epoch < 0:
            after, downgrade = self._downgrade_records(req.group_id, now)
        self._reschedule()
        plog, last, error = self._append_consumer_records(req.group_id,
                                                          pre + result.records + after)
        if error != _E.none.value:
            return HeartbeatResult(error)
        if downgrade is not None:
            self._adopt(req.group_id, downgrade, now)
        g = self.consumer.groups.get(req.group_id)
        if g is not None and g.group_epoch != epoch_before:
            log.info("consumer group %r: group epoch %d, %d member(s), state %s (member %s, "
                     "epoch %d)", req.group_id, g.group_epoch, len(g.members), g.state,
                     result.member_id, req.member_epoch)
        if plog is not None:
            await self.logs.flusher.wait_acked(plog, last + 1)
        return result

    # -- online migration (migration.py) -------------------------------------------------

    def _upgrade(self, group_id: str, now: int) -> list[Record]:
        """A classic group with members becomes a consumer group if the policy and the
        group allow it (migration.upgrade); its records, or [] if not."""
        records, effects, why = migration.upgrade(self.state, self.consumer, group_id,
                                                  self.topic_image(), now)
        if effects is None:
            log.info("cannot upgrade classic group %r to a consumer group: %s", group_id, why)
            return []
        self._apply(effects)
        g = self.consumer.groups[group_id]
        log.info("classic group %r (generation %d, %d member(s)) upgraded to a consumer group",
                 group_id, g.group_epoch, len(g.members))
        return records

    def _downgrade_records(self, group_id: str, now: int):
        return migration.downgrade(self.consumer, self.state.config.max_size, group_id, now)

    def _adopt(self, group_id: str, value, now: int) -> None:
        log.info("consumer group %r downgraded to a classic group (generation %d, %d "
                 "member(s)); rebalancing", group_id, value.generation_id, len(value.members))
        self._apply(self.state.adopt_group(group_id, value, now))

    def _downgrade_after_removal(self, group_id: str, now: int) -> None:
        records, value = self._downgrade_records(group_id, now)
        if value is not None:
            _plog, _last, error = self._append_consumer_records(group_id, records)
            if error == _E.none.value:
                self._adopt(group_id, value, now)

    # -- classic members of a consumer group (consumer_classic.py) ------------------------

    async def classic_join_consumer_group(self, req: ClassicJoinRequest) -> JoinResult:
        now = now_ms()
        result, records = self.consumer.classic_join(now, req, self.topic_image())
        self._reschedule()
        plog, last, error = self._append_consumer_records(req.group_id, records)
        if error != _E.none.value:
            return JoinResult(error, member_id=req.member_id)
        if result.error == _E.none.value:
            log.info("classic member %s joined consumer group %r at epoch %d",
                     result.member_id, req.group_id, result.generation_id)
        if plog is not None:
            await self.logs.flusher.wait_acked(plog, last + 1)
        return result

    def classic_sync_consumer_group(self, group_id: str, generation_id: int, member_id: str,
                                    instance_id: str | None, protocol_type: str | None,
                                    protocol_name: str | None) -> SyncResult:
        result = self.consumer.classic_sync(now_ms(), group_id, generation_id,
                                            member_id, instance_id, protocol_type,
                                            protocol_name)
        self._reschedule()
        return result

    def classic_heartbeat_consumer_group(self, group_id: str, generation_id: int,
                                         member_id: str, instance_id: str | None) -> int:
        error = self.consumer.classic_heartbeat(now_ms(), group_id,
                                                generation_id, member_id, instance_id)
        self._reschedule()
        return error

    def classic_leave_consumer_group(self, group_id: str,
                                     members: list[tuple[str, str | None]]) -> list[int]:
        """LeaveGroup of classic members of a consumer group: their records are appended
        now; :meth:`leave_durable` waits for them before the answer goes out."""
        errors, records = self.consumer.classic_leave(group_id, members)
        plog, last, _error = self._append_consumer_records(group_id, records)
        if plog is not None:
            self._unflushed_leaves[group_id] = (plog, last)
        self._reschedule()
        return errors

    async def leave_durable(self, group_id: str) -> None:
        """Once the records of the last LeaveGroup of ``group_id`` are durable."""
        pending = self._unflushed_leaves.pop(group_id, None)
        if pending is not None:
            await self.logs.flusher.wait_acked(pending[0], pending[1] + 1)

    def consumer_commit_error(self, group_id: str, member_id: str, instance_id: str | None,
                              member_epoch: int, transactional: bool, api_version: int,
                              entries) -> int | None:
        """The OffsetCommit/TxnOffsetCommit check for a consumer group; None if
        ``group_id`` is not one."""
        if group_id not in self.consumer.groups:
            return None
        topics = self.logs.topics
        partitions = [(topics[e.topic].topic_id if e.topic in topics else None, e.partition)
                      for e in entries]
        return self.consumer.validate_offset_commit(group_id, member_id, instance_id,
                                                    member_epoch, transactional, api_version,
                                                    partitions)

    def consumer_fetch_error(self, group_id: str, member_id: str | None,
                             member_epoch: int) -> int:
        """OffsetFetch v9+ with a member id and epoch, for a consumer group."""
        if group_id not in self.consumer.groups:
            return _E.none.value
        return self.consumer.validate_offset_fetch(group_id, member_id, member_epoch)

    async def delete_consumer_group(self, group_id: str) -> int:
        error, records = self.consumer.delete_group(group_id)
        plog, last, werr = self._append_consumer_records(group_id, records)
        if plog is not None:
            await self.logs.flusher.wait_acked(plog, last + 1)
        return error if werr == _E.none.value else werr

    def offset_expiry_rule(self, group_id: str) -> ExpiryRule | None:
        """How a group's offsets expire: a consumer group's (Kafka's ConsumerGroup)
        count from each commit, except for the topics its members subscribe to, which
        never expire; a streams group's as StreamsGroupShell.streams_expiry_rule says; a
        classic group's as its state says."""
        g = self.consumer.groups.get(group_id)
        if g is None:
            streams = self.streams_expiry_rule(group_id)  # (StreamsGroupShell)
            return streams if streams is not None else self.state.offset_expiry_rule(group_id)
        return ExpiryRule(keep_topics=frozenset(g.subscribed_topic_names()))

    async def cleanup_consumer_groups(self) -> list[str]:
        """Remove the consumer groups without members and offsets (Kafka's periodic
        cleanup, after offsets expiry); returns their ids."""
        doomed = [g.group_id for g in self.consumer.groups.values()
                  if not g.members and not self.offsets.has_offsets(g.group_id)]
        for group_id in doomed:
            await self.delete_consumer_group(group_id)
        return doomed

    def consumer_listing(self) -> list[tuple[str, str]]:
        """(group id, state) of every consumer group."""
        return [(g.group_id, g.state) for g in self.consumer.groups.values()]


__all__ = ["ConsumerGroupShell", "OFFSETS_TOPIC", "TopicImage"]
