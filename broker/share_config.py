"""The share coordinator's settings (KIP-932) from the broker keys: Kafka's
ShareGroupConfig and ShareCoordinatorConfig names, and txbroker's defaults of the
share.* group configs it does not take per group yet."""

from __future__ import annotations

from typing import Any

from .config import BrokerConfig, ConfigError


def check_share_config(config: BrokerConfig) -> None:
    """The checks of the share keys, at start-up (the coordinator is built later)."""
    session = config.get("group.share.session.timeout.ms")
    heartbeat = config.get("group.share.heartbeat.interval.ms")
    if heartbeat >= session:
        # As Kafka's ShareGroupConfig requires.
        raise ConfigError(f"group.share.heartbeat.interval.ms={heartbeat} must be less than "
                          f"group.share.session.timeout.ms={session}")


def share_coordinator_config(config: BrokerConfig) -> Any:
    """The ShareCoordinatorConfig (imported here: the share coordinator's modules load
    on first use, not at start-up)."""
    from txbroker.coordinator.share.coordinator import ShareCoordinatorConfig
    from txbroker.coordinator.share.group import ShareGroupConfig
    from txbroker.coordinator.share.results import SharePartitionConfig

    check_share_config(config)
    session = config.get("group.share.session.timeout.ms")
    heartbeat = config.get("group.share.heartbeat.interval.ms")
    return ShareCoordinatorConfig(
        group=ShareGroupConfig(session_timeout_ms=session, heartbeat_interval_ms=heartbeat,
                               max_size=config.get("group.share.max.size")),
        partition=SharePartitionConfig(
            record_lock_duration_ms=config.get("group.share.record.lock.duration.ms"),
            delivery_count_limit=config.get("group.share.delivery.count.limit"),
            partition_max_record_locks=config.get("group.share.partition.max.record.locks"),
            isolation_level=config.get("txbroker.share.isolation.level")),
        state_topic_partitions=config.get("share.coordinator.state.topic.num.partitions"),
        state_topic_segment_bytes=config.get("share.coordinator.state.topic.segment.bytes"),
        updates_per_snapshot=config.get(
            "share.coordinator.snapshot.update.records.per.snapshot"),
        max_share_sessions=config.get("group.share.max.share.sessions"),
        auto_offset_reset=config.get("txbroker.share.auto.offset.reset"))
