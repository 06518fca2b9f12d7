"""The console's read-only picture of a share group (``coordinator/share/view.py``)."""

from __future__ import annotations

import uuid

from txbroker.coordinator.share.group import ShareGroup, ShareMember
from txbroker.coordinator.share.partition import SharePartition
from txbroker.coordinator.share.results import (
    AcknowledgementBatch,
    FetchedBatch,
    SharePartitionConfig,
)
from txbroker.coordinator.share.state import AcknowledgeType, PersistedShareState, StateBatch
from txbroker.coordinator.share.view import share_group_picture, start_offsets

T, U = uuid.UUID(int=1), uuid.UUID(int=2)
NAMES = {T: "t", U: "u"}


def _partition() -> SharePartition:
    part, _ = SharePartition.initialize(SharePartitionConfig(), 0)
    part.acquire("m", [FetchedBatch(0, 9)], fetch_offset=0, now_ms=0, max_records=100)
    types = (AcknowledgeType.ACCEPT,) * 2 + (AcknowledgeType.RELEASE, AcknowledgeType.REJECT)
    res = part.acknowledge("m", [AcknowledgementBatch(0, 3, tuple(int(t) for t in types))],
                           now_ms=1)
    assert res.error_code == 0
    return part


def test_states_delivery_counts_members_and_unloaded_partitions() -> None:
    g = ShareGroup("g", group_epoch=3, assignment_epoch=3)
    g.members["m"] = ShareMember("m", 3, ("t",), None, "cid", "/127.0.0.1", 0,
                                 assigned={T: frozenset({0})})
    partitions = {("g", T, 0): _partition(), ("other", T, 0): _partition()}
    # Not loaded since a restart: 5..7 acknowledged, 8 available (count 2), 9 a gap.
    persisted = {("g", U, 0): PersistedShareState(0, 0, 5, 3, (
        StateBatch(5, 7, 2, 1), StateBatch(8, 8, 0, 2), StateBatch(10, 10, 4, 1)))}
    picture, total = share_group_picture(g, partitions, persisted, NAMES, limit=10)
    assert total == 2 and (picture.state, picture.group_epoch) == ("Stable", 3)
    [m] = picture.members
    assert (m.client_id, m.assignment) == ("cid", (("t", 0),))
    t0, u0 = picture.partitions
    # 0, 1 accepted: the window starts at 2 (released), 3 rejected, 4..9 acquired.
    assert (t0.topic, t0.start_offset, t0.end_offset, t0.loaded) == ("t", 2, 10, True)
    assert t0.states == {"available": 1, "acquired": 6, "acknowledged": 0, "archiving": 0,
                         "archived": 1}
    assert t0.delivery_counts == {1: 8} and t0.complete == 1 and t0.max_delivery_count == 1
    assert (u0.start_offset, u0.end_offset, u0.loaded) == (5, 11, False)
    assert u0.states["acknowledged"] == 3 and u0.states["available"] == 2  # 8 and the gap
    assert u0.states["archived"] == 1 and u0.delivery_counts == {0: 1, 1: 4, 2: 1}
    assert u0.max_delivery_count == 2
    first, _ = share_group_picture(g, partitions, persisted, NAMES, limit=1)
    assert [p.topic for p in first.partitions] == ["t"]


def test_start_offsets_in_one_pass() -> None:
    partitions = {("g", T, 0): _partition()}
    persisted = {("g", T, 0): PersistedShareState(0, 0, 0, 0), ("h", U, 1): PersistedShareState(0, 0, 7, 2)}
    assert start_offsets(partitions, persisted) == {"g": {(T, 0): (2, 1)}, "h": {(U, 1): (7, 2)}}
