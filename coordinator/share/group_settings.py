"""A share group's own settings: Kafka's ``share.*`` group configs of one group, read at
each use, as Kafka's ShareGroupConfigProvider reads them (a lock duration change applies
from the next acquisition, a delivery count limit from the next check, an
auto.offset.reset from the next share-partition initialised).

The values come from a lookup the share coordinator is given (group id, config name,
default) -> value; the broker answers it from its group configs (group_configs.py), so
nothing here imports the broker. Without an override the lookup answers the broker's
default, and without a lookup the defaults given here apply.
"""

from __future__ import annotations

from collections.abc import Callable

from txbroker.coordinator.group.group_configs import by_duration_ms
from txbroker.storage.log import PartitionLog

from .results import SharePartitionConfig

__all__ = ["GroupPartitionConfig", "GroupValue", "start_offset"]

GroupValue = Callable[[str, str, object], object]  # (group id, name, default) -> value

LOCK_DURATION = "share.record.lock.duration.ms"
DELIVERY_COUNT_LIMIT = "share.delivery.count.limit"
MAX_RECORD_LOCKS = "share.partition.max.record.locks"
ISOLATION_LEVEL = "share.isolation.level"
RENEW_ENABLE = "share.renew.acknowledge.enable"
AUTO_OFFSET_RESET = "share.auto.offset.reset"
SESSION_TIMEOUT = "share.session.timeout.ms"
HEARTBEAT_INTERVAL = "share.heartbeat.interval.ms"


def _setting(name: str, field: str) -> property:
    def get(self: GroupPartitionConfig):
        return self.value(self.group_id, name, getattr(self.base, field))
    return property(get, doc=f"The group's {name}.")


class GroupPartitionConfig:
    """The SharePartitionConfig of one group's share-partitions, each field its group
    config as it is now (duck-typed: the share-partition reads the same names)."""

    __slots__ = ("group_id", "value", "base")

    def __init__(self, group_id: str, value: GroupValue, base: SharePartitionConfig) -> None:
        self.group_id = group_id
        self.value = value
        self.base = base

    record_lock_duration_ms = _setting(LOCK_DURATION, "record_lock_duration_ms")
    delivery_count_limit = _setting(DELIVERY_COUNT_LIMIT, "delivery_count_limit")
    partition_max_record_locks = _setting(MAX_RECORD_LOCKS, "partition_max_record_locks")
    isolation_level = _setting(ISOLATION_LEVEL, "isolation_level")
    renew_acknowledge_enable = _setting(RENEW_ENABLE, "renew_acknowledge_enable")

    @property
    def read_committed(self) -> bool:
        return self.isolation_level == "read_committed"


def start_offset(strategy: str, plog: PartitionLog, now_ms: int) -> int:
    """Where a new share-partition starts, by share.auto.offset.reset: ``earliest`` the
    log start, ``latest`` the high watermark, ``by_duration:<ISO-8601>`` the first record
    written at or after now minus the duration (the high watermark if there is none)."""
    if strategy == "earliest":
        return plog.log_start_offset
    if strategy.startswith("by_duration:"):
        duration = by_duration_ms(strategy[len("by_duration:"):])
        if duration is not None:
            found = plog.offset_for_timestamp(now_ms - duration)
            if found is not None:
                return found[0]
    return plog.high_watermark
