"""The plain data the streams-group state machine takes and answers: its configuration,
a StreamsGroupHeartbeat as it matters to the coordinator, and the results."""

from __future__ import annotations

from dataclasses import dataclass

from txbroker.coordinator.streams.assignor import AssignmentInput, TaskId
from txbroker.coordinator.streams.config import StreamsGroupConfig
from txbroker.coordinator.streams.reconcile import TasksTuple
from txbroker.coordinator.streams.records import StreamsRecord
from txbroker.coordinator.streams.topology import InternalTopic, Status, StreamsTopology

__all__ = ["StreamsGroupConfig", "StreamsHeartbeat", "StreamsHeartbeatResult", "Expired",
           "EndpointPartitions",
           "JOIN_EPOCH", "LEAVE_EPOCH", "LEAVE_STATIC_EPOCH"]

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
LEAVE_STATIC_EPOCH = -2  # a static member leaves and will rejoin with its instance id


@dataclass(frozen=True)
class StreamsHeartbeat:
    """StreamsGroupHeartbeatRequest's fields the coordinator uses. None means "not sent"
    / "unchanged since the last heartbeat", as on the wire. The owned task sets are
    all None or all given."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    topology: StreamsTopology | None = None
    active_tasks: frozenset[TaskId] | None = None
    standby_tasks: frozenset[TaskId] | None = None
    warmup_tasks: frozenset[TaskId] | None = None
    process_id: str | None = None
    user_endpoint: tuple[str, int] | None = None
    client_tags: tuple[tuple[str, str], ...] | None = None
    shutdown_application: bool = False
    client_id: str = ""  # from the request header / connection, as Kafka takes them
    client_host: str = ""
    endpoint_information_epoch: int = 0  # the member's view of the endpoints
    # TaskOffsets / TaskEndOffsets: (subtopology, partition, offset) of the tasks whose
    # state the member has, and their changelogs' end offsets (None: unchanged).
    task_offsets: tuple[tuple[str, int, int], ...] | None = None
    task_end_offsets: tuple[tuple[str, int, int], ...] | None = None

    def owned(self) -> TasksTuple | None:
        if self.active_tasks is None:
            return None
        return TasksTuple(self.active_tasks, self.standby_tasks or frozenset(),
                          self.warmup_tasks or frozenset())


@dataclass(frozen=True)
class EndpointPartitions:
    """One member's interactive-query endpoint (``application.server``) and the
    partitions of the source and repartition-source topics of its active tasks, and of
    its standby and warm-up tasks: (topic, partitions) pairs."""

    host: str
    port: int
    active: tuple[tuple[str, tuple[int, ...]], ...] = ()
    standby: tuple[tuple[str, tuple[int, ...]], ...] = ()


@dataclass(frozen=True)
class StreamsHeartbeatResult:
    """The response's fields (error 0: success) and the records to persist before it is
    sent. ``assignment`` None: unchanged since the last response (the wire's null task
    lists). ``internal_topics_to_create``: the caller creates them (CreateTopics with
    these partition counts, replication factor -1 = broker default, and configs)."""

    error: int = 0
    message: str | None = None
    member_id: str = ""
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    task_offset_interval_ms: int = 0
    statuses: tuple[Status, ...] = ()
    assignment: TasksTuple | None = None
    internal_topics_to_create: tuple[InternalTopic, ...] = ()
    records: tuple[StreamsRecord, ...] = ()
    # The group's endpoint information epoch, and every member's endpoint and partitions
    # when the member's epoch of them is another (None: unchanged for it).
    endpoint_information_epoch: int = 0
    partitions_by_endpoint: tuple[EndpointPartitions, ...] | None = None
    # Not an answer yet: the heartbeat needs this assignment, too large to compute on
    # the event loop; nothing was changed or written. The caller computes it
    # (compute_target) and sends the heartbeat again with the result.
    assignment_input: AssignmentInput | None = None


@dataclass(frozen=True)
class Expired:
    """Members fenced by :meth:`StreamsGroup.expire` and the records to persist."""

    member_ids: tuple[str, ...] = ()
    records: tuple[StreamsRecord, ...] = ()
    # The initial rebalance delay ended but its assignment is too large to compute on
    # the event loop: the caller computes it and gives it to StreamsGroup.assign_delayed.
    assignment_input: AssignmentInput | None = None
