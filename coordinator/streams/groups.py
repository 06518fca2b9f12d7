"""Every streams group of one ``__consumer_offsets`` partition (or of the broker): routes
heartbeats, record replay, timeouts and describes to the :class:`StreamsGroup` they are
about. Owns the groups; the streams-group shell is its only caller. Sans-IO like them.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping

from kio.schema.errors import ErrorCode
from txbroker.coordinator.streams.assignor import AssignmentInput, MemberTasks
from txbroker.coordinator.streams.group import DEAD, StreamsGroup
from txbroker.coordinator.streams.heartbeat import heartbeat
from txbroker.coordinator.streams.records import StreamsRecord, StreamsRecordKey
from txbroker.coordinator.streams.results import (
    JOIN_EPOCH,
    Expired,
    StreamsGroupConfig,
    StreamsHeartbeat,
    StreamsHeartbeatResult,
)
from txbroker.coordinator.streams.topology import TopicImage

__all__ = ["StreamsGroups"]


class StreamsGroups:
    def __init__(self, config_for: Callable[[str], StreamsGroupConfig] | None = None) -> None:
        """``config_for(group_id)``: the group's configs (broker defaults overridden by
        the group's dynamic configs, GroupConfig's ``streams.*`` keys)."""
        self.config_for = config_for or (lambda _group_id: StreamsGroupConfig())
        self.groups: dict[str, StreamsGroup] = {}

    def get(self, group_id: str) -> StreamsGroup | None:
        g = self.groups.get(group_id)
        return None if g is None or g.state == DEAD else g

    def heartbeat(self, hb: StreamsHeartbeat, topics: TopicImage, now_ms: int,
                  precomputed: tuple[AssignmentInput, Mapping[str, MemberTasks]] | None = None,
                  ) -> StreamsHeartbeatResult:
        """A joining heartbeat creates the group; any other one for a group that does
        not exist is GROUP_ID_NOT_FOUND (as Kafka's getStreamsGroupOrThrow). An answer
        with ``assignment_input`` changed nothing: the caller computes that assignment
        off the event loop and calls again with it as ``precomputed``."""
        g = self.get(hb.group_id)
        created = g is None and hb.member_epoch == JOIN_EPOCH
        if g is None:
            if not created:
                return StreamsHeartbeatResult(
                    error=ErrorCode.group_id_not_found.value,
                    message=f"Streams group {hb.group_id} not found.")
            g = StreamsGroup(hb.group_id, self.config_for(hb.group_id))
            self.groups[hb.group_id] = g
        g.config = self.config_for(hb.group_id)  # group configs are dynamic
        result = heartbeat(g, hb, topics, now_ms, precomputed)
        if created and (result.error or result.assignment_input is not None):
            del self.groups[hb.group_id]  # nothing was written
        return result

    def replay(self, key: StreamsRecordKey, value: object) -> None:
        g = self.groups.get(key.group_id)
        if g is None:
            if value is None:
                return  # a tombstone for a group we never saw
            g = self.groups[key.group_id] = StreamsGroup(key.group_id,
                                                         self.config_for(key.group_id))
        g.replay(key, value)

    def on_loaded(self, now_ms: int) -> None:
        for g in self.groups.values():
            g.on_loaded(now_ms)

    def expire(self, now_ms: int, skip: Collection[str] = ()) -> dict[str, Expired]:
        """Session / rebalance timeouts and ended initial rebalance delays of every
        group but those in ``skip`` (their assignment is being computed): group id ->
        what was fenced, the records to persist and the assignment to compute."""
        out = {}
        for gid, g in self.groups.items():
            if gid in skip:
                continue
            e = g.expire(now_ms)
            if e.records or e.assignment_input is not None:
                out[gid] = e
        return out

    def assign_delayed(self, group_id: str,
                       precomputed: tuple[AssignmentInput, Mapping[str, MemberTasks]],
                       now_ms: int) -> tuple[tuple[StreamsRecord, ...], AssignmentInput | None]:
        """StreamsGroup.assign_delayed of the group (nothing if it is gone)."""
        g = self.get(group_id)
        return ((), None) if g is None else g.assign_delayed(precomputed, now_ms)

    def next_deadline_ms(self, skip: Collection[str] = ()) -> int | None:
        deadlines = [d for gid, g in self.groups.items()
                     if gid not in skip and (d := g.next_deadline_ms()) is not None]
        return min(deadlines, default=None)

    def describe(self, group_ids: Iterable[str]) -> dict[str, dict | None]:
        """StreamsGroupDescribe: None for a group that does not exist (GROUP_ID_NOT_FOUND)."""
        out: dict[str, dict | None] = {}
        for gid in group_ids:
            g = self.get(gid)
            out[gid] = None if g is None else g.describe()
        return out

    def delete(self, group_id: str) -> tuple[StreamsRecord, ...]:
        g = self.get(group_id)
        if g is None:
            raise KeyError(group_id)
        return g.delete()
