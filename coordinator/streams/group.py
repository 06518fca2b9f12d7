"""One streams group (KIP-1071) as a sans-IO state machine: its persisted state, the
replay of its records, leaving, fencing and timeouts. The heartbeat itself is in
``heartbeat.py``. Owns the group's state; the streams-group shell is its only caller.

Every change is made by records: an operation builds the records Kafka 4.4 writes and
applies each through :meth:`StreamsGroup.replay`, the same function that rebuilds the
group from ``__consumer_offsets`` after a restart, so a rebuilt group equals the one
that wrote the records (:meth:`persisted_view`). What is not in records is soft state,
as in Kafka: session and rebalance deadlines (re-armed by :meth:`on_loaded`), the
initial rebalance delay (Kafka's timer: when a member joins the group while it is
Empty, the first target assignment waits ``initial_rebalance_delay_ms``; not re-armed
after a load, the next heartbeat assigns), the configured topology (recomputed at the
next heartbeat), a member's request to shut the application down and the endpoint
information epoch (Kafka's: it moves when a member's ``application.server`` endpoint
changes, or the tasks of a member with one; 0 after a load), and the task offsets and
end offsets each member last reported (Kafka's MemberTaskOffsets, in memory only: the
assignor ranks standby candidates by them, describe lists them).

Group states (StreamsGroup.StreamsGroupState): EMPTY without members; NOT_READY while
the topology is not validated against the topics (missing source or internal topics,
bad partitioning); ASSIGNING while the group epoch is ahead of the target assignment's;
RECONCILING while a member is not STABLE at the assignment epoch; STABLE; DEAD once
deleted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from txbroker.coordinator.streams import records as R
from txbroker.coordinator.streams.assignor import (
    AssignmentInput,
    AssignorMember,
    MemberTasks,
    TaskId,
    compute_target,
)
from txbroker.coordinator.streams.reconcile import (
    EMPTY_TASKS,
    MemberAssignment,
    Owners,
    TasksTuple,
)
from txbroker.coordinator.streams.records import (
    GroupMetadata,
    MemberMetadata,
    StreamsRecord,
    StreamsRecordKey,
    TargetAssignmentMetadata,
)
from txbroker.coordinator.streams.results import (
    LEAVE_STATIC_EPOCH,
    EndpointPartitions,
    Expired,
    StreamsGroupConfig,
)
from txbroker.coordinator.streams.topology import ConfiguredTopology, StreamsTopology

__all__ = ["StreamsGroup", "NeedsAssignment", "EMPTY", "NOT_READY", "ASSIGNING", "RECONCILING", "STABLE_GROUP", "DEAD"]

EMPTY, NOT_READY, ASSIGNING, RECONCILING, STABLE_GROUP, DEAD = (
    "Empty", "NotReady", "Assigning", "Reconciling", "Stable", "Dead")


class NeedsAssignment(Exception):  # noqa: N818 (a request to the shell, not an error)
    """Raised by :meth:`StreamsGroup.update_target` when the assignment is too large to
    compute on the event loop: the operation that needed it is rolled back, the shell
    computes ``compute_target(snapshot)`` elsewhere and runs the operation again with
    the result (``StreamsGroup.precomputed``)."""

    def __init__(self, snapshot: AssignmentInput) -> None:
        super().__init__("assignment to be computed off the event loop")
        self.snapshot = snapshot


@dataclass
class _Persisted:
    """Everything the records hold. A new group is at group epoch 1 with a target
    assignment of epoch 1 (Kafka 4.4's StreamsGroup and TargetAssignmentMetadata.INITIAL):
    the first member's join makes the group epoch 2."""

    group_epoch: int = 1
    metadata_hash: int = 0
    validated_topology_epoch: int = -1
    last_assignment_configs: tuple[tuple[str, str], ...] | None = None
    topology: StreamsTopology | None = None
    assignment_epoch: int = 1
    assignment_timestamp: int = 0
    members: dict[str, MemberMetadata] = field(default_factory=dict)
    target: dict[str, TasksTuple] = field(default_factory=dict)
    current: dict[str, MemberAssignment] = field(default_factory=dict)
    metadata_seen: bool = False  # a StreamsGroupMetadata record exists (the group exists)

    def copy(self) -> _Persisted:
        return replace(self, members=dict(self.members), target=dict(self.target),
                       current=dict(self.current))


class StreamsGroup:
    def __init__(self, group_id: str, config: StreamsGroupConfig | None = None) -> None:
        self.group_id = group_id
        self.config = config or StreamsGroupConfig()
        self.p = _Persisted()
        self.deleted = False
        # Soft state.
        self.configured: ConfiguredTopology | None = None
        self.session_deadlines: dict[str, int] = {}
        self.rebalance_deadlines: dict[str, int] = {}
        # When the initial rebalance delay ends (None: not running).
        self.initial_delay_deadline: int | None = None
        self.endpoint_epoch = 0
        # member id -> (TaskOffsets, TaskEndOffsets) it last reported: task -> offset.
        self.task_offsets: dict[str, tuple[dict[TaskId, int], dict[TaskId, int]]] = {}
        self.shutdown_requester: str | None = None
        # A target assignment computed elsewhere, used by update_target if its input
        # equals the group's (set by the caller around one operation).
        self.precomputed: tuple[AssignmentInput, Mapping[str, MemberTasks]] | None = None
        self._out: list[StreamsRecord] = []

    # -- records ----------------------------------------------------------------------

    def replay(self, key: StreamsRecordKey, value: Any) -> None:
        """Apply one record (``value`` None: a tombstone), at load or as it is written."""
        p, kind, mid = self.p, key.record_type, key.member_id
        if kind == R.GROUP_METADATA:
            if value is None:
                self.deleted = True
                p.metadata_seen = False
                return
            self.deleted = False
            p.metadata_seen = True
            p.group_epoch, p.metadata_hash = value.epoch, value.metadata_hash
            p.validated_topology_epoch = value.validated_topology_epoch
            p.last_assignment_configs = value.last_assignment_configs
        elif kind == R.TOPOLOGY:
            p.topology = value
        elif kind == R.TARGET_ASSIGNMENT_METADATA:
            if value is None:
                p.assignment_epoch, p.assignment_timestamp = 1, 0  # Kafka's INITIAL
            else:
                p.assignment_epoch = value.assignment_epoch
                p.assignment_timestamp = value.assignment_timestamp
        else:
            table: dict = {R.MEMBER_METADATA: p.members, R.TARGET_ASSIGNMENT_MEMBER: p.target,
                           R.CURRENT_MEMBER_ASSIGNMENT: p.current}[kind]
            if value is None:
                table.pop(mid, None)
            else:
                table[mid] = value
            if kind == R.MEMBER_METADATA and value is None:
                self.session_deadlines.pop(mid, None)
                self.rebalance_deadlines.pop(mid, None)
                self.task_offsets.pop(mid, None)

    def _write(self, kind: int, value: Any, member_id: str = "") -> None:
        record = (StreamsRecordKey(kind, self.group_id, member_id), value)
        self._out.append(record)
        self.replay(*record)

    def _take(self) -> tuple[StreamsRecord, ...]:
        out, self._out = tuple(self._out), []
        return out

    def persisted_view(self) -> _Persisted:
        """The state the records determine (a copy), to compare a rebuilt group with."""
        return self.p.copy()

    def on_loaded(self, now_ms: int) -> None:
        """After a load: every member gets a full session to heartbeat again, a member
        revoking tasks a full rebalance timeout (Kafka's onLoaded re-arms the timers)."""
        for mid in self.p.members:
            self.session_deadlines[mid] = now_ms + self.config.session_timeout_ms
            if self.p.current.get(mid, MemberAssignment()).state == 2:
                self.rebalance_deadlines[mid] = now_ms + max(0, self.p.members[mid].rebalance_timeout_ms)

    # -- views ------------------------------------------------------------------------

    @property
    def state(self) -> str:
        p = self.p
        if self.deleted:
            return DEAD
        if not p.members:
            return EMPTY
        if p.topology is None or p.topology.epoch != p.validated_topology_epoch:
            return NOT_READY
        if p.group_epoch > p.assignment_epoch:
            return ASSIGNING
        if any(not p.current.get(m, MemberAssignment()).is_reconciled_to(p.assignment_epoch)
               for m in p.members):
            return RECONCILING
        return STABLE_GROUP

    def member_assignment(self, member_id: str) -> MemberAssignment:
        return self.p.current.get(member_id, MemberAssignment())

    def static_member(self, instance_id: str) -> str | None:
        for mid, m in self.p.members.items():
            if m.instance_id == instance_id:
                return mid
        return None

    def owners(self) -> Owners:
        """Current holders of each task (assigned or pending revocation), by process."""
        active: dict[TaskId, str] = {}
        standby: dict[TaskId, set[str]] = {}
        warmup: dict[TaskId, set[str]] = {}
        for mid, c in self.p.current.items():
            meta = self.p.members.get(mid)
            if meta is None:
                continue
            pid = meta.process_id
            for tasks in (c.assigned, c.pending_revocation):
                for t in tasks.active:
                    active[t] = pid
                for t in tasks.standby:
                    standby.setdefault(t, set()).add(pid)
                for t in tasks.warmup:
                    warmup.setdefault(t, set()).add(pid)
        none: frozenset[str] = frozenset()
        return Owners(active.get, lambda t: frozenset(standby.get(t, none)),
                      lambda t: frozenset(warmup.get(t, none)))

    def endpoint_partitions(self, last: str, topics: Mapping[str, int]) -> tuple[
            EndpointPartitions, ...]:
        """Kafka's buildEndpointToPartitions: each member with a user endpoint (``last``
        at the end), with the partitions of the input topics (source and repartition
        source) of its active tasks, and of its standby and warm-up tasks; a topic
        without such partitions is left out."""
        subtopologies = {s.subtopology_id: s for s in (
            self.p.topology.subtopologies if self.p.topology is not None else ())}

        def partitions(tasks: frozenset[TaskId]) -> tuple[tuple[str, tuple[int, ...]], ...]:
            out = []
            for sid in sorted({s for s, _ in tasks}):
                sub = subtopologies.get(sid)
                for topic in sorted(set(sub.input_topics())) if sub is not None else ():
                    count = topics.get(topic)
                    parts = tuple(sorted(p for s, p in tasks
                                         if s == sid and count is not None and p < count))
                    if parts:
                        out.append((topic, parts))
            return tuple(out)

        out = []
        for mid in sorted(self.p.members, key=lambda m: (m == last, m)):
            endpoint = self.p.members[mid].user_endpoint
            if endpoint is None:
                continue
            a = self.member_assignment(mid).assigned
            out.append(EndpointPartitions(endpoint[0], endpoint[1], partitions(a.active),
                                          partitions(a.standby | a.warmup)))
        return tuple(out)

    def describe(self) -> dict[str, Any]:
        """StreamsGroupDescribe's view of the group, as plain data."""
        p = self.p
        members = []
        for mid, m in sorted(p.members.items()):
            c = p.current.get(mid, MemberAssignment())
            members.append({"member_id": mid, "member_epoch": c.member_epoch, "state": c.state,
                            "instance_id": m.instance_id, "rack_id": m.rack_id,
                            "client_id": m.client_id, "client_host": m.client_host,
                            "topology_epoch": m.topology_epoch, "process_id": m.process_id,
                            "user_endpoint": m.user_endpoint, "client_tags": m.client_tags,
                            "assignment": c.assigned,
                            "task_offsets": self.task_offsets.get(mid, ({}, {})),
                            "target_assignment": p.target.get(mid, EMPTY_TASKS)})
        return {"group_id": self.group_id, "state": self.state, "group_epoch": p.group_epoch,
                "assignment_epoch": p.assignment_epoch, "topology": p.topology,
                "members": members}

    # -- operations -------------------------------------------------------------------

    def group_metadata(self, epoch: int, metadata_hash: int | None = None,
                       validated: int | None = None,
                       configs: tuple[tuple[str, str], ...] | None = None) -> GroupMetadata:
        p = self.p
        return GroupMetadata(epoch, p.metadata_hash if metadata_hash is None else metadata_hash,
                             p.validated_topology_epoch if validated is None else validated,
                             p.last_assignment_configs if configs is None else configs)

    def fence(self, member_id: str) -> None:
        """Remove a member (leave -1, session or rebalance timeout): tombstones, a group
        epoch bump, and for the last member the assignment epoch follows (Kafka writes a
        target assignment metadata record with timestamp 0)."""
        last = len(self.p.members) == 1 and member_id in self.p.members
        self.fence_records_only(member_id)
        epoch = self.p.group_epoch + 1
        self._write(R.GROUP_METADATA, self.group_metadata(epoch))
        if last:
            self._write(R.TARGET_ASSIGNMENT_METADATA, TargetAssignmentMetadata(epoch, 0))
        if self.shutdown_requester == member_id and not self.p.members:
            self.shutdown_requester = None

    def fence_records_only(self, member_id: str) -> None:
        """The member's three tombstones (Kafka's removeStreamsMember)."""
        self._write(R.CURRENT_MEMBER_ASSIGNMENT, None, member_id)
        self._write(R.TARGET_ASSIGNMENT_MEMBER, None, member_id)
        self._write(R.MEMBER_METADATA, None, member_id)

    def static_leave(self, member_id: str) -> None:
        """Epoch -2: the member keeps its tasks (and its place) until its session times
        out; nothing is pending revocation and its tasks' assignment epochs become 0."""
        c = self.p.current.get(member_id, MemberAssignment())
        c = replace(c, member_epoch=LEAVE_STATIC_EPOCH, pending_revocation=EMPTY_TASKS,
                    active_epochs=tuple((t, 0) for t, _ in sorted(c.active_epochs)
                                        if t in c.assigned.active))
        self._write(R.CURRENT_MEMBER_ASSIGNMENT, c, member_id)
        self.rebalance_deadlines.pop(member_id, None)

    def expire(self, now_ms: int) -> Expired:
        """Fence the members whose session or rebalance (revocation) timeout passed;
        then, if the initial rebalance delay ended, compute the delayed assignment."""
        gone = sorted(m for m in self.p.members
                      if self.session_deadlines.get(m, now_ms + 1) <= now_ms
                      or self.rebalance_deadlines.get(m, now_ms + 1) <= now_ms)
        for mid in gone:
            self.fence(mid)
        snapshot = None
        if self.initial_delay_deadline is not None and self.initial_delay_deadline <= now_ms:
            try:
                self.end_initial_delay(now_ms)
            except NeedsAssignment as need:  # the shell computes it: assign_delayed
                snapshot = need.snapshot
        return Expired(tuple(gone), self._take(), snapshot)

    def assign_delayed(self, precomputed: tuple[AssignmentInput, Mapping[str, MemberTasks]],
                       now_ms: int) -> tuple[tuple[StreamsRecord, ...], AssignmentInput | None]:
        """The delayed assignment that :meth:`expire` left to be computed elsewhere:
        applied if the group still waits for one and its input is the one computed
        (the records); if the input changed meanwhile, nothing is written and the new
        input is returned, to be computed in turn; a group that no longer waits (Empty,
        assigned meanwhile, a new delay or interval running) gets nothing."""
        p = self.p
        if not (p.members and self.configured is not None and p.group_epoch > p.assignment_epoch
                and self.initial_delay_deadline is None and self.can_assign(now_ms)):
            return (), None
        self.precomputed = precomputed
        try:
            self.update_target(now_ms)
        except NeedsAssignment as need:
            return (), need.snapshot
        finally:
            self.precomputed = None
        return self._take(), None

    def end_initial_delay(self, now_ms: int) -> None:
        """Kafka's computeDelayedTargetAssignment: nothing for a group that became Empty
        or whose topology was not configured yet (after a load); otherwise the target
        assignment at the group epoch, unless the assignment interval holds it back."""
        self.initial_delay_deadline = None
        p = self.p
        if (p.members and self.configured is not None and p.group_epoch > p.assignment_epoch
                and self.can_assign(now_ms)):
            self.update_target(now_ms)

    def can_assign(self, now_ms: int) -> bool:
        """Kafka's canComputeNextTargetAssignment: no assignment yet (timestamp 0), no
        interval, or the interval since the last assignment has passed."""
        last, interval = self.p.assignment_timestamp, self.config.assignment_interval_ms
        return last == 0 or interval == 0 or now_ms >= last + interval

    def assignment_input(self) -> AssignmentInput:
        """What the assignor reads of the group now."""
        p, configured = self.p, self.configured
        members = tuple(AssignorMember(mid, m.process_id, p.target.get(mid, EMPTY_TASKS).active,
                                       p.target.get(mid, EMPTY_TASKS).standby,
                                       self.task_offsets.get(mid, ({}, {}))[0])
                        for mid, m in sorted(p.members.items()))
        ready = configured is not None and configured.is_ready
        return AssignmentInput(members, (configured.tasks or {}) if ready else None,
                               frozenset(configured.stateful) if ready else frozenset(),
                               self.config.num_standby_replicas)

    def update_target(self, now_ms: int) -> None:
        """A new target assignment at the group epoch (the sticky assignor over the
        configured topology's tasks); only members whose target changed get a record
        (Kafka's TargetAssignmentBuilder writes the delta). A result computed elsewhere
        (``precomputed``) is applied only if its input equals the group's now; otherwise
        an input whose :meth:`AssignmentInput.work` reaches ``offload_min_work`` raises
        NeedsAssignment before anything is written, and a smaller one is computed here."""
        snapshot = self.assignment_input()
        if self.precomputed is not None and self.precomputed[0] == snapshot:
            result = self.precomputed[1]
        elif snapshot.work() >= self.config.offload_min_work:
            raise NeedsAssignment(snapshot)
        else:
            result = compute_target(snapshot)
        p = self.p
        for m in snapshot.members:
            tasks = result.get(m.member_id)
            new = TasksTuple(tasks.active, tasks.standby) if tasks else EMPTY_TASKS
            if p.target.get(m.member_id) != new:
                self._write(R.TARGET_ASSIGNMENT_MEMBER, new, m.member_id)
        self._write(R.TARGET_ASSIGNMENT_METADATA, TargetAssignmentMetadata(p.group_epoch, now_ms))

    def next_deadline_ms(self) -> int | None:
        deadlines = list(self.session_deadlines.values()) + list(self.rebalance_deadlines.values())
        if self.initial_delay_deadline is not None:
            deadlines.append(self.initial_delay_deadline)
        return min(deadlines, default=None)

    def delete(self) -> tuple[StreamsRecord, ...]:
        """DeleteGroups of an EMPTY group: tombstones for its group-level records."""
        if self.p.members:
            raise ValueError("only an empty streams group can be deleted")
        self._write(R.TARGET_ASSIGNMENT_METADATA, None)
        self._write(R.TOPOLOGY, None)
        self._write(R.GROUP_METADATA, None)
        return self._take()

    @classmethod
    def rebuild(cls, group_id: str, records: Mapping[StreamsRecordKey, Any] | list[StreamsRecord],
                config: StreamsGroupConfig | None = None) -> StreamsGroup:
        """A group from its records in log order (or a compacted key -> value map)."""
        g = cls(group_id, config)
        items = records.items() if isinstance(records, Mapping) else records
        for key, value in items:
            g.replay(key, value)
        return g
