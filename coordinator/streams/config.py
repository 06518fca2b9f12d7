"""What the group coordinator needs of streams groups before any exists: the broker's
streams-group settings and the StreamsGroup* record types of ``__consumer_offsets``.
Kept apart from the rest of the streams coordinator so that a broker with no streams
group never imports it (about a tenth of the start-up's imports)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["StreamsGroupConfig", "GROUP_METADATA", "MEMBER_METADATA",
           "TARGET_ASSIGNMENT_METADATA", "TARGET_ASSIGNMENT_MEMBER", "CURRENT_MEMBER_ASSIGNMENT",
           "TOPOLOGY", "RECORD_TYPES"]

# The StreamsGroup* record types (Kafka's key versions in __consumer_offsets).
GROUP_METADATA = 17
MEMBER_METADATA = 19
TARGET_ASSIGNMENT_METADATA = 20
TARGET_ASSIGNMENT_MEMBER = 21
CURRENT_MEMBER_ASSIGNMENT = 22
TOPOLOGY = 23
RECORD_TYPES = (GROUP_METADATA, TARGET_ASSIGNMENT_METADATA, TOPOLOGY,
                MEMBER_METADATA, TARGET_ASSIGNMENT_MEMBER, CURRENT_MEMBER_ASSIGNMENT)


@dataclass(frozen=True)
class StreamsGroupConfig:
    """Kafka 4.4's broker defaults (GroupCoordinatorConfig); per group they are the group
    configs ``streams.session.timeout.ms``, ``streams.heartbeat.interval.ms``,
    ``streams.num.standby.replicas``, ``streams.task.offset.interval.ms``,
    ``streams.initial.rebalance.delay.ms``, ``streams.assignment.interval.ms``
    (GroupConfig)."""

    session_timeout_ms: int = 45_000  # group.streams.session.timeout.ms
    heartbeat_interval_ms: int = 5_000  # group.streams.heartbeat.interval.ms
    num_standby_replicas: int = 0  # group.streams.num.standby.replicas (max 2)
    max_size: int = 2**31 - 1  # group.streams.max.size
    task_offset_interval_ms: int = 60_000  # group.streams.task.offset.interval.ms
    # The first assignment of a group a member joins while Empty waits this long.
    initial_rebalance_delay_ms: int = 3_000  # group.streams.initial.rebalance.delay.ms
    # A new target assignment at most this often (0: at once).
    assignment_interval_ms: int = 1_000  # group.streams.assignment.interval.ms
    # Not a Kafka key: an assignment whose estimated work (AssignmentInput.work: 25-70
    # ms of the assignor here) reaches this is computed off the event loop by the
    # shell (the heartbeat waits for it; see StreamsGroup.update_target).
    offload_min_work: int = 100_000

    def assignment_configs(self) -> tuple[tuple[str, str], ...]:
        """LastAssignmentConfigs: a change of them triggers a new assignment."""
        return (("num.standby.replicas", str(self.num_standby_replicas)),)
