"""The share-partitions' durable state in ``__share_group_state`` (Kafka's share
coordinator, reduced to one broker): which records a state write becomes, where they
go, and the replay on start. Sans-IO except :func:`load`, which reads the topic.

Owns, per share-partition (group id, topic id, partition): the state that is durable
(``durable``), the state once every appended write is durable (``latest``), the
snapshot epoch and the updates written since the last snapshot. The share coordinator
(``coordinator.py``) is its only user.

Kafka's layout: the records of a share-partition are keyed (for placement) by
``"group:topicId:partition"`` (SharePartitionKey.asCoordinatorKey, the topic id in
Kafka's base64 form) hashed like a group id onto the topic's partitions
(``share.coordinator.state.topic.num.partitions``, 50); a ShareSnapshot holds the whole
state, ShareUpdates the changed batches, and after
``share.coordinator.snapshot.update.records.per.snapshot`` (500) updates the next write
is a snapshot again, so compaction (one snapshot and one update per share-partition
kept) and replay stay bounded.
"""

from __future__ import annotations

import base64
import logging
import time
import uuid
from dataclasses import dataclass, field

from txbroker.storage.log import PartitionLog

from ..internal_topic import iter_partition_batches
from .records import (
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
from .state import PersistedShareState, ShareStateWrite, apply_write

__all__ = ["SHARE_STATE_TOPIC", "SPKey", "StateRecord", "SharePersister", "coordinator_key"]

log = logging.getLogger(__name__)

SHARE_STATE_TOPIC = "__share_group_state"
SPKey = tuple[str, uuid.UUID, int]  # (group id, topic id, partition)


def coordinator_key(key: SPKey) -> str:
    """Kafka's SharePartitionKey.asCoordinatorKey: what places the records."""
    group_id, topic_id, partition = key
    tid = base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")
    return f"{group_id}:{tid}:{partition}"


@dataclass
class StateRecord:
    """One record to append (the shell's persist request)."""

    write_id: int
    sp: SPKey
    key: bytes
    value: bytes | None
    state: PersistedShareState | None  # the state once it is durable (None: deleted)
    placement_key: str = field(init=False)

    def __post_init__(self) -> None:
        self.placement_key = coordinator_key(self.sp)


class SharePersister:
    def __init__(self, updates_per_snapshot: int = 500) -> None:
        self.updates_per_snapshot = updates_per_snapshot
        self.durable: dict[SPKey, PersistedShareState] = {}
        self.latest: dict[SPKey, PersistedShareState] = {}
        self._snapshot_epoch: dict[SPKey, int] = {}
        self._updates: dict[SPKey, int] = {}

    def snapshot(self, write_id: int, sp: SPKey, state: PersistedShareState) -> StateRecord:
        """A ShareSnapshot of the whole state (a new share-partition, or every
        ``updates_per_snapshot`` updates)."""
        epoch = self._snapshot_epoch.get(sp, -1) + 1
        self._snapshot_epoch[sp] = epoch
        self._updates[sp] = 0
        now = int(time.time() * 1000)
        value = ShareSnapshotValue(epoch, state.state_epoch, state.leader_epoch, state.start_offset,
                                   now, now, state.state_batches, state.delivery_complete_count)
        self.latest[sp] = state
        return StateRecord(write_id, sp, encode_key(ShareStateKey(SHARE_SNAPSHOT, *sp)),
                           encode_snapshot_value(value), state)

    def update(self, write_id: int, sp: SPKey, write: ShareStateWrite) -> StateRecord:
        """The record of a state write: a ShareUpdate, or a snapshot when due."""
        before = self.latest.get(sp)
        state = apply_write(before, write) if before is not None else PersistedShareState(
            write.state_epoch, write.leader_epoch, write.start_offset,
            write.delivery_complete_count, write.state_batches)
        if before is None or self._updates.get(sp, 0) >= self.updates_per_snapshot:
            return self.snapshot(write_id, sp, state)
        self._updates[sp] = self._updates.get(sp, 0) + 1
        self.latest[sp] = state
        value = ShareUpdateValue(self._snapshot_epoch.get(sp, 0), write.leader_epoch,
                                 write.start_offset, write.state_batches,
                                 write.delivery_complete_count)
        return StateRecord(write_id, sp, encode_key(ShareStateKey(SHARE_UPDATE, *sp)),
                           encode_update_value(value), state)

    def tombstone(self, write_id: int, sp: SPKey) -> StateRecord:
        """The share-partition's state deleted (its group was deleted)."""
        self.latest.pop(sp, None)
        self._updates.pop(sp, None)
        return StateRecord(write_id, sp, encode_key(ShareStateKey(SHARE_SNAPSHOT, *sp)), None, None)

    def durable_now(self, rec: StateRecord) -> None:
        if rec.state is None:
            self.durable.pop(rec.sp, None)
        else:
            self.durable[rec.sp] = rec.state

    def failed(self, sp: SPKey) -> PersistedShareState | None:
        """A write of ``sp`` failed: what is durable is what counts again (the next
        write is a snapshot of it)."""
        state = self.durable.get(sp)
        if state is None:
            self.latest.pop(sp, None)
        else:
            self.latest[sp] = state
        self._updates[sp] = self.updates_per_snapshot
        return state

    # -- recovery ------------------------------------------------------------------------------

    def load(self, plogs: list[PartitionLog]) -> int:
        """Replay the topic's partitions (every record in log order); the number of
        share-partitions with a state."""
        states: dict[SPKey, PersistedShareState | None] = {}
        for plog in plogs:
            for header, records in iter_partition_batches(plog, plog.log_start_offset):
                if header.is_control:
                    continue
                for rec in records:
                    if rec.key is None:
                        continue
                    try:
                        key = decode_key(rec.key)
                        value = decode_value(key, rec.value)
                    except ValueError as e:
                        log.warning("skipping a malformed %s record: %s", SHARE_STATE_TOPIC, e)
                        continue
                    sp = (key.group_id, key.topic_id, key.partition)
                    states[sp] = replay(states.get(sp), value)
                    if isinstance(value, ShareSnapshotValue):
                        self._snapshot_epoch[sp] = value.snapshot_epoch
                        self._updates[sp] = 0
                    elif value is not None:
                        self._updates[sp] = self._updates.get(sp, 0) + 1
        for sp, state in states.items():
            if state is not None:
                self.durable[sp] = self.latest[sp] = state
        return len(self.durable)
