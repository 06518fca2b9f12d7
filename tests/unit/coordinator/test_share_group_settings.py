"""A share group's own settings (group_settings.py): each read from the group's configs
at each use, the broker's defaults without them; where a new share-partition starts."""

from __future__ import annotations

from dataclasses import dataclass

from txbroker.coordinator.share.group_settings import GroupPartitionConfig, start_offset
from txbroker.coordinator.share.results import SharePartitionConfig

BASE = SharePartitionConfig(record_lock_duration_ms=30_000, delivery_count_limit=5)


def test_each_setting_is_read_from_the_group_at_each_use():
    configs = {("g", "share.delivery.count.limit"): 2}
    cfg = GroupPartitionConfig("g", lambda g, n, d: configs.get((g, n), d), BASE)
    assert (cfg.delivery_count_limit, cfg.record_lock_duration_ms) == (2, 30_000)
    configs[("g", "share.record.lock.duration.ms")] = 1000
    configs[("g", "share.isolation.level")] = "read_committed"
    assert (cfg.record_lock_duration_ms, cfg.read_committed) == (1000, True)
    other = GroupPartitionConfig("h", lambda g, n, d: configs.get((g, n), d), BASE)
    assert (other.delivery_count_limit, other.read_committed) == (5, False)


@dataclass
class _Log:
    log_start_offset: int = 3
    high_watermark: int = 10
    first_after: dict | None = None

    def offset_for_timestamp(self, timestamp: int):
        return (self.first_after or {}).get(timestamp)


def test_start_offset_by_strategy():
    now = 10_000_000
    log = _Log(first_after={now - 3_600_000: (7, now - 100)})
    assert start_offset("earliest", log, now) == 3
    assert start_offset("latest", log, now) == 10
    assert start_offset("by_duration:PT1H", log, now) == 7
    assert start_offset("by_duration:PT2H", log, now) == 10  # no record that recent
