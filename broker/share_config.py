"""The share coordinator's settings (KIP-932) from the broker keys: Kafka's
ShareGroupConfig and ShareCoordinatorConfig names, the bounds and defaults of the share.*
group configs (coordinator/group/group_configs.py), and txbroker's own defaults of the
two Kafka has no broker key for (share.auto.offset.reset, share.isolation.level)."""

from __future__ import annotations

from typing import Any

from .config import BrokerConfig, ConfigError

# Share group configs bounded by group.share.min.<key> / group.share.max.<key>: name ->
# the <key> of the broker's group.share.<key> keys.
_BOUNDED = {"share.session.timeout.ms": "session.timeout.ms",
            "share.heartbeat.interval.ms": "heartbeat.interval.ms",
            "share.record.lock.duration.ms": "record.lock.duration.ms",
            "share.delivery.count.limit": "delivery.count.limit",
            "share.partition.max.record.locks": "partition.max.record.locks"}


def check_share_config(config: BrokerConfig) -> None:
    """The checks of the share keys, at start-up (the coordinator is built later)."""
    session = config.get("group.share.session.timeout.ms")
    heartbeat = config.get("group.share.heartbeat.interval.ms")
    if heartbeat >= session:
        # As Kafka's ShareGroupConfig requires.
        raise ConfigError(f"group.share.heartbeat.interval.ms={heartbeat} must be less than "
                          f"group.share.session.timeout.ms={session}")
    # Unlike Kafka, a broker value outside its group.share.min/max.* keys is taken (a
    # test's 1 s lock needs no min key): the bounds apply to the group configs alone.


def share_group_config_limits(config: BrokerConfig) -> dict[str, tuple[int, int, int]]:
    """(broker value, min, max) of each range-checked share.* group config."""
    return {name: (config.get(f"group.share.{key}"), config.get(f"group.share.min.{key}"),
                   config.get(f"group.share.max.{key}"))
            for name, key in _BOUNDED.items()}


def share_group_config_defaults(config: BrokerConfig) -> dict[str, str]:
    """txbroker's broker-wide defaults of the share.* group configs Kafka has no broker
    key for."""
    return {"share.auto.offset.reset": config.get("txbroker.share.auto.offset.reset"),
            "share.isolation.level": config.get("txbroker.share.isolation.level")}


def share_coordinator_config(config: BrokerConfig) -> Any:
    """The ShareCoordinatorConfig (imported here: the share coordinator's modules load
    on first use, not at start-up)."""
    from txbroker.coordinator.share.coordinator import ShareCoordinatorConfig
    from txbroker.coordinator.share.dead_letter import DeadLetterSettings
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
        auto_offset_reset=config.get("txbroker.share.auto.offset.reset"),
        dead_letter=DeadLetterSettings(
            topic_name_prefix=config.get("errors.deadletterqueue.topic.name.prefix"),
            auto_create_topics=config.get("errors.deadletterqueue.auto.create.topics.enable"),
            new_topic_partitions=config.get("num.partitions"),
            max_partitions=config.get("txbroker.max.partitions")))
