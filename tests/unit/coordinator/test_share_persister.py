"""coordinator/share/persister.py: which __share_group_state records a share-partition's
writes become, and where they go."""

from __future__ import annotations

import uuid

from txbroker.coordinator.internal_topic import partition_for
from txbroker.coordinator.share.persister import SharePersister, coordinator_key
from txbroker.coordinator.share.records import (
    SHARE_SNAPSHOT,
    SHARE_UPDATE,
    decode_key,
    decode_value,
    replay,
)
from txbroker.coordinator.share.state import PersistedShareState, ShareStateWrite, StateBatch

TID = uuid.UUID(int=1)
SP = ("g", TID, 3)


def test_coordinator_key_is_kafkas():
    # SharePartitionKey.asCoordinatorKey: "group:topicId:partition", Kafka's base64 id.
    assert coordinator_key(SP) == "g:AAAAAAAAAAAAAAAAAAAAAQ:3"
    assert 0 <= partition_for(coordinator_key(SP), 50) < 50


def write(start: int, first: int, last: int, state: int, count: int) -> ShareStateWrite:
    return ShareStateWrite(0, 0, start, -1, (StateBatch(first, last, state, count),))


def test_updates_between_snapshots_and_the_replay_of_them():
    p = SharePersister(updates_per_snapshot=2)
    recs = [p.snapshot(1, SP, PersistedShareState(0, 0, 10))]
    recs += [p.update(2 + i, SP, write(10, 10 + i, 10 + i, 0, 1)) for i in range(4)]
    kinds = [decode_key(r.key).record_type for r in recs]
    # A snapshot, two updates, then the next write is a snapshot again, then an update.
    assert kinds == [SHARE_SNAPSHOT, SHARE_UPDATE, SHARE_UPDATE, SHARE_SNAPSHOT, SHARE_UPDATE]
    state = None
    for r in recs:
        state = replay(state, decode_value(decode_key(r.key), r.value))
        p.durable_now(r)
    assert state == p.durable[SP] == p.latest[SP]
    assert state.start_offset == 10
    assert state.state_batches == (StateBatch(10, 13, 0, 1),)
    assert {r.placement_key for r in recs} == {coordinator_key(SP)}


def test_a_failed_write_goes_back_to_the_durable_state():
    p = SharePersister()
    first = p.snapshot(1, SP, PersistedShareState(0, 0, 0))
    p.durable_now(first)
    p.update(2, SP, write(0, 0, 4, 2, 1))
    assert p.latest[SP].start_offset == 0 and p.latest[SP].state_batches
    assert p.failed(SP) == PersistedShareState(0, 0, 0)
    # The next write is a whole snapshot (what is durable is no longer what memory had).
    nxt = p.update(3, SP, write(0, 0, 0, 0, 1))
    assert decode_key(nxt.key).record_type == SHARE_SNAPSHOT
    tomb = p.tombstone(4, SP)
    assert tomb.value is None and SP not in p.latest
